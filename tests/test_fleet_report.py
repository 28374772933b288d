"""``report --from postgresql://... --html FILE``: the page's figures computed in the store.

Against a real PostgreSQL: for the same journals and filter, everything the page shows besides
the verdict (audit, deprecations, idempotency, timeline, error examples, the stories kept)
equals the local ``report``'s; the verdict is the store's (events and calls it holds per
journal, checkpoints it kept, findings it recorded); the page drawn from the store renders in
headless Chromium with every chart drawn, nothing fetched, and a ``<script>`` title as text.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._fleet_report import report_from
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import write_idempotency_fleet
from .pg_cluster import Cluster
from .replay_helpers import Built, build, everyday
from .test_fleet_calls import DEC, NOV_END, OCT, write_months
from .test_replay_report import WIDE, _browse, _multi_session_journal, _root


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, pg_cluster: Cluster) -> tuple[list[Path], str]:
    base = tmp_path_factory.mktemp("report")
    bridge: Built = build(base / "bridge", everyday)
    multi = base / "multi.db"
    _multi_session_journal(multi)
    paths = [
        bridge.path,
        multi,
        write_months(base / "months.db", "months-0", [OCT, NOV_END, DEC], 40),
        *write_idempotency_fleet(base / "idempotency"),
    ]
    url = pg_cluster.create_database()
    assert replay.ship(paths, url).ok
    return paths, url


CLI = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "report"]
FILTERS = [
    replay.ReportFilter(),
    replay.ReportFilter(session="s41"),
    replay.ReportFilter(journal="months"),
    replay.ReportFilter(journal="idem-"),
    replay.ReportFilter(since=datetime(2026, 12, 1, tzinfo=UTC)),
    replay.ReportFilter(since=NOV_END, until=NOV_END + timedelta(minutes=5)),
    replay.ReportFilter(until=datetime(2026, 11, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("where", FILTERS)
def test_the_page_from_the_store_shows_the_local_figures(
    fleet: tuple[list[Path], str], where: replay.ReportFilter
) -> None:
    paths, url = fleet
    local = replay.report(paths, where, accept_unverified=True, stories=7)
    stored = report_from(url, where, stories=7)
    assert local.audit.calls > 0
    for field in ("audit", "idempotency", "buckets", "errors", "stories"):
        assert to_json(getattr(stored, field)) == to_json(getattr(local, field)), field
    # Each judges the removal gates at the moment it runs.
    moment = stored.deprecations.as_of
    assert to_json(stored.deprecations) == to_json(
        msgspec.structs.replace(local.deprecations, as_of=moment)
    )
    assert (stored.bucket_seconds, stored.stories_first, stored.stories_more, stored.filter) == (
        local.bucket_seconds,
        local.stories_first,
        local.stories_more,
        local.filter,
    )


def test_the_verdict_is_what_the_store_accepted(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    local = replay.verify(paths, accept_unverified=True)
    stored = report_from(url).verify
    assert stored.ok and not stored.findings
    by_id = {j.journal_id: j for j in local.journals}
    assert sorted(j.journal_id or "" for j in stored.journals) == sorted(by_id)
    for j in stored.journals:
        mine = by_id[j.journal_id]
        assert (j.events, j.head_seq, j.head_hash, j.calls) == (
            mine.events,
            mine.head_seq,
            mine.head_hash,
            mine.calls,
        )
        assert j.signatures_checked == j.checkpoints_checked
    assert to_json(stored.in_doubt) == to_json(local.in_doubt)
    assert stored.trusted_keys  # the keys the store registered


@pytest.mark.parametrize("where", FILTERS[:4])
def test_the_page_s_aggregates_come_from_the_audit_s_one_read_of_the_call_lines(
    fleet: tuple[list[Path], str], where: replay.ReportFilter
) -> None:
    """The timeline, the error examples and the first stories' calls are aggregated over the
    lines the audit reads: one scan of the call lines for all of them, not one each."""
    from agentteam_task_bridge.replay import _fleet_report as page
    from agentteam_task_bridge.replay._fleet_reports import _audit_query, connect

    _, url = fleet
    scope, _, _ = page.scope_of(where)
    sql = _audit_query(scope.lines, page._extra(7))
    with connect(url, autocommit=True) as conn:
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql, scope.line_params
        ).fetchone()
        [lines] = conn.execute(
            f"SELECT count(*) FROM agentteam.call_lines WHERE {scope.lines}", scope.line_params
        ).fetchone()
    assert lines > 0
    assert _relation_rows(plan["Plan"], "call_lines") == lines


def test_the_idempotency_check_runs_beside_the_rest_of_the_page(
    fleet: tuple[list[Path], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The longest query, on its own connection, overlaps the page's other reads: here it
    waits for the verdict, which the other reads reach, and would wait in vain run first."""
    from agentteam_task_bridge.replay import _fleet_report as page

    _, url = fleet
    verdict_read = threading.Event()
    check, verdict = page.idempotency_for_report, page._verdict

    def waiting_check(*args: Any, **kwargs: Any) -> Any:
        assert verdict_read.wait(timeout=30), "the check ran before the page's other reads"
        return check(*args, **kwargs)

    def noted_verdict(*args: Any, **kwargs: Any) -> Any:
        result = verdict(*args, **kwargs)
        verdict_read.set()
        return result

    monkeypatch.setattr(page, "idempotency_for_report", waiting_check)
    monkeypatch.setattr(page, "_verdict", noted_verdict)
    beside = report_from(url, stories=7)
    monkeypatch.undo()
    alone = report_from(url, stories=7)
    assert verdict_read.is_set() and beside.idempotency.calls > 0
    assert to_json(beside.idempotency) == to_json(alone.idempotency)
    assert to_json(beside.audit) == to_json(alone.audit)


def _relation_rows(plan: dict[str, Any], prefix: str) -> int:
    """The rows a plan's scans of the relations named ``prefix...`` returned, every loop."""
    rows = int(plan["Actual Rows"]) * int(plan["Actual Loops"])
    own = rows if str(plan.get("Relation Name", "")).startswith(prefix) else 0
    return own + sum(_relation_rows(child, prefix) for child in plan.get("Plans", []))


@pytest.mark.parametrize("where", FILTERS)
def test_the_window_over_whole_journals_is_read_from_their_heads(
    fleet: tuple[list[Path], str], where: replay.ReportFilter
) -> None:
    """The deprecations' time window (the earliest and latest event the filter keeps): over
    whole journals (no filter, a journal filter) the spans the ingest keeps with each head, no
    event read; under a session or a time filter a scan of the events it keeps. Equal to the
    scan either way."""
    from agentteam_task_bridge.replay import _fleet_report as page
    from agentteam_task_bridge.replay._fleet_reports import connect, window_query

    _, url = fleet
    scope, _, _ = page.scope_of(where)
    sql, params = window_query(scope)
    with connect(url, autocommit=True) as conn:
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
        window = conn.execute(sql, params).fetchone()
        scanned = conn.execute(
            'SELECT min(ts_wall COLLATE "C"), max(ts_wall COLLATE "C") FROM agentteam.events'
            f" WHERE {scope.events}",
            scope.event_params,
        ).fetchone()
    assert window == scanned
    if where.session is None and where.since is None and where.until is None:
        assert window is not None and window[0] is not None
        assert _relation_rows(plan["Plan"], "events") == 0
        assert _relation_rows(plan["Plan"], "heads") > 0
    else:
        assert scope.heads is None


def test_the_heads_keep_each_journal_s_span_batch_by_batch(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    """A journal whose clock went back (its second session a month before its first), shipped
    seven events a batch: its head keeps the earliest and the latest of every batch, and the
    window the store reports is the local one."""
    from agentteam_task_bridge.replay._fleet_reports import connect, deprecations_from

    paths = [
        write_months(tmp_path / "back.db", "back-0", [DEC, OCT, NOV_END], 40),
        write_months(tmp_path / "months.db", "months-0", [OCT, DEC], 50),
    ]
    url = pg_cluster.create_database()
    assert replay.ship(paths, url, batch_size=7).ok
    with connect(url, autocommit=True) as conn:
        spans = conn.execute(
            "SELECT h.journal_id, h.first_wall, h.last_wall FROM agentteam.heads h"
            " ORDER BY h.journal_id"
        ).fetchall()
        scanned = conn.execute(
            'SELECT journal_id, min(ts_wall COLLATE "C"), max(ts_wall COLLATE "C")'
            " FROM agentteam.events GROUP BY journal_id ORDER BY journal_id"
        ).fetchall()
    assert spans == scanned and len(spans) == 2
    assert spans[0][1].startswith("2026-10-20") and spans[0][2].startswith("2026-12-03")
    stored, local = deprecations_from(url), replay.deprecations(paths)
    assert (stored.window_start, stored.window_end) == (local.window_start, local.window_end)
    assert stored.window_start == spans[0][1]


def test_a_version_6_store_is_refused_with_a_reason_not_patched(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Version 6 keeps no idempotency state per journal (nor version 5 the journals' spans) a
    report reads: not upgraded in place."""
    import psycopg

    from agentteam_task_bridge.replay._fleet_schema import SCHEMA_VERSION

    paths = [write_months(tmp_path / "months.db", "months-0", [OCT], 40)]
    url = pg_cluster.create_database()
    assert replay.ship(paths, url).ok and SCHEMA_VERSION >= 7
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute("UPDATE agentteam.store_meta SET value = '6' WHERE key = 'schema_version'")
    with pytest.raises(replay.StoreError, match="schema version 6 is older"):
        replay.ship(paths, url)


def test_the_idempotency_check_looks_up_session_ends_only_for_calls_never_closed(
    fleet: tuple[list[Path], str],
) -> None:
    """Of the events, the check reads the end of the session of each call never closed: the
    lookup runs for those calls alone, not once per call line."""
    from agentteam_task_bridge.replay._fleet_idempotency import idempotency_query
    from agentteam_task_bridge.replay._fleet_reports import connect
    from agentteam_task_bridge.replay._idempotency import declared_hints

    _, url = fleet
    for in_order in (False, True):
        sql, params = idempotency_query(hints=declared_hints(), in_order=in_order)
        with connect(url, autocommit=True) as conn:
            conn.execute("SET jit = off")
            [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
            lines, unclosed = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE closed_seq IS NULL)"
                " FROM agentteam.call_lines"
            ).fetchone()
        assert 0 < unclosed < lines
        assert 0 < _probes(plan["Plan"], "events") <= unclosed


def _probes(plan: dict[str, Any], prefix: str) -> int:
    """The most times any node above a scan of the relations ``prefix...`` ran."""
    below = [_probes(child, prefix) for child in plan.get("Plans", [])]
    return max([*below, int(plan["Actual Loops"]) if _scans(plan, prefix) else 0])


def _scans(plan: dict[str, Any], prefix: str) -> bool:
    return str(plan.get("Relation Name", "")).startswith(prefix) or any(
        _scans(child, prefix) for child in plan.get("Plans", [])
    )


def test_the_cli_refuses_journals_and_keys_with_from(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    for extra in ([str(paths[0])], ["--trusted-key", "x"]):
        done = subprocess.run(
            [*CLI, "--html", "/nonexistent/x.html", "--from", url, *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2 and "--from" in done.stderr, done.stderr


@pytest.mark.slow
def test_the_page_from_the_store_draws_in_chromium(
    fleet: tuple[list[Path], str], tmp_path: Path
) -> None:
    paths, url = fleet
    html = tmp_path / "fleet.html"
    done = subprocess.run(
        [*CLI, "--from", url, "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # 1: the idempotency journals break rules on purpose, as the local report says too.
    calls = replay.report(paths, accept_unverified=True).audit.calls
    assert done.returncode == 1 and f"{calls} calls, verified" in done.stdout, done.stderr
    assert html.stat().st_size < 2_000_000
    dom = _browse(html, tmp_path, "--dump-dom")
    root = _root(dom)
    assert root.get("data-check") == "done", dom[:500]
    assert int(root["data-charts"]) >= 5 and root["data-charts-drawn"] == root["data-charts"]
    assert root["data-resources"] == "0" and root["data-csp-violations"] == "0"
    assert "data-pwned" not in root
    assert "&lt;script&gt;document.documentElement" in dom and WIDE in dom
