"""`replay.audit`: usage, errors, latency, truncation, mutations per board, sessions; CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._audit import Histogram
from agentteam_task_bridge.replay._render import write_audit_csv

from .replay_helpers import (
    Built,
    call_event,
    everyday_journal,
    injected,
    route,
    session_started,
    write_events,
)

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers


def test_usage_errors_latency_and_boards_of_a_real_session(everyday_journal: Built) -> None:
    report = replay.audit([everyday_journal.path])
    assert report.calls == 18
    usage = {(u.tool, u.status): u.calls for u in report.tool_usage}
    assert usage[("task_create", "result")] == 4 and usage[("task_create", "error")] == 1
    assert usage[("task_get", "rejected")] == 1 and usage[("list_tasks", "rejected")] == 1
    assert {u.agent_id for u in report.tool_usage} == {"agt_local"}
    assert {e.error_code: e.calls for e in report.error_codes} == {
        "task_not_found": 1,
        "invalid_arguments": 1,
        "idempotency_conflict": 1,
        "unknown_tool": 1,
        "deprecated_tool": 1,
    }
    bridge, upstream = report.latency
    assert (bridge.name, bridge.count) == ("bridge", 18)
    assert (upstream.name, upstream.count) == ("upstream", 16)
    for lat in report.latency:
        assert lat.p50_ms is not None and lat.p99_ms is not None and lat.max_ms is not None
        assert lat.p50_ms <= lat.p99_ms <= lat.max_ms
    boards = {(b.channel, b.tool): b.mutations for b in report.mutations_by_board}
    assert boards == {
        ("general", "task_create"): 3,
        ("general", "task_update"): 2,
        ("general", "task_set_claim"): 2,
        ("general", "task_checkpoint"): 1,
        ("eng", "task_create"): 1,
        ("eng", "task_delete"): 1,
    }
    [session] = report.sessions
    assert (session.calls, session.errors, session.end_reason) == (18, 5, "stdin closed")
    assert session.client == "agentteam-tests 9.9.9" and session.agent_id == "agt_local"
    assert report.truncation_rate == 0.0


def _truncating_journal(path: Path) -> None:
    events = [session_started()]
    for i, truncated in enumerate([True, False, False, True]):
        call = f"c{i}"
        events += [
            call_event(call, journal.CallReceived(arguments={"channel": "g"}), tool="task_list"),
            call_event(call, injected(), tool="task_list"),
            call_event(
                call,
                journal.UpstreamRequest(method="GET", route=route(""), body={"channel": "g"}),
                tool="task_list",
            ),
            call_event(
                call,
                journal.UpstreamResponse(status=200, body={}, duration_ms=10.0 * (i + 1)),
                tool="task_list",
            ),
            call_event(
                call,
                journal.CallResult(result={"data": {}, "meta": {}}, truncated=truncated),
                tool="task_list",
            ),
        ]
    events.append(journal.Event(session_id="s1", payload=journal.SessionEnded(reason="eof")))
    write_events(path, events)


def test_truncation_rate_and_merged_journals(everyday_journal: Built, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    _truncating_journal(other)
    alone = replay.audit([other])
    [lists] = alone.truncation
    assert (lists.results, lists.truncated, lists.rate) == (4, 2, 0.5)
    assert alone.latency[1].max_ms == 40.0 and alone.latency[1].count == 4
    merged = replay.audit([everyday_journal.path, other])
    assert merged.calls == 22 and len(merged.sessions) == 2
    assert 0 < merged.truncation_rate < 0.5


def test_csv_export_writes_one_file_per_section(everyday_journal: Built, tmp_path: Path) -> None:
    report = replay.audit([everyday_journal.path])
    written = write_audit_csv(report, tmp_path / "audit")
    assert sorted(p.name for p in written) == [
        "error_codes.csv",
        "latency.csv",
        "mutations_by_board.csv",
        "sessions.csv",
        "tool_usage.csv",
        "truncation.csv",
    ]
    with (tmp_path / "audit" / "tool_usage.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert sum(int(r["calls"]) for r in rows) == 18
    assert set(rows[0]) == {"tool", "agent_id", "status", "calls"}


def test_percentiles_are_within_one_percent() -> None:
    histogram = Histogram()
    values = [0.05 * i for i in range(1, 10_001)]
    for value in values:
        histogram.add(value)
    for q in (0.5, 0.9, 0.99):
        exact = values[int(q * len(values)) - 1]
        estimate = histogram.quantile(q)
        assert estimate is not None and abs(estimate - exact) / exact < 0.01
    assert histogram.quantile(1.0) == max(values)
