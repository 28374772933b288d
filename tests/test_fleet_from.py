"""``calls | audit | deprecations | idempotency --from postgresql://...`` equal the local reports.

The fleet: a real bridge session of every kind of call (results, errors, rejections, a refresh,
keyed creates, deprecated names), a dozen written journals of plausible calls (old tool
names, upstream errors, rejections with multibyte text) and three journals sharing idempotency
keys and tasks (baselines, sound replays, conflicts, every idempotency finding, calls closed out
of order or never; emoji and CJK keys, channels and agents), shipped into a real PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import SHARED_KEY, write_fleet, write_idempotency_fleet
from .pg_cluster import Cluster
from .replay_helpers import Built, build, everyday

AS_OF = datetime(2027, 1, 15, tzinfo=UTC)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, pg_cluster: Cluster) -> tuple[list[Path], str]:
    base = tmp_path_factory.mktemp("fleet")
    bridge: Built = build(base / "bridge", everyday)
    written = write_fleet(base / "written", 12, 9)
    paths = [bridge.path, *written, *write_idempotency_fleet(base / "idempotency")]
    url = pg_cluster.create_database()
    shipped = replay.ship(paths, url)
    assert shipped.ok and shipped.shipped > 0
    return paths, url


@pytest.mark.parametrize(
    "where, limit",
    [
        (replay.CallFilter(), None),
        (replay.CallFilter(), 7),
        (replay.CallFilter(status="error"), None),
        (replay.CallFilter(status="in_doubt"), None),
        (replay.CallFilter(status="rejected"), 3),
        (replay.CallFilter(tool="list_tasks"), None),
        (replay.CallFilter(agent="agent-1", tool="task_create"), None),
        (replay.CallFilter(error_code="upstream_unavailable"), None),
        (replay.CallFilter(since=datetime(2000, 1, 1, tzinfo=UTC)), 5),
        (replay.CallFilter(until=datetime(2000, 1, 1, tzinfo=UTC)), None),
    ],
)
def test_calls_from_the_store_equal_the_local_list(
    fleet: tuple[list[Path], str], where: replay.CallFilter, limit: int | None
) -> None:
    paths, url = fleet
    local = replay.list_calls(paths, where, limit=limit)
    assert to_json(reports.calls_from(url, where, limit=limit)) == to_json(local)


def test_the_bridge_session_s_client_is_named_from_its_handshake_both_ways(
    fleet: tuple[list[Path], str],
) -> None:
    # The real session journals its client in `session_handshake` (the written journals, in
    # their `session_started`, as journals before it did): both readers name both.
    paths, url = fleet
    for listed in (
        replay.list_calls(paths, replay.CallFilter()),
        reports.calls_from(url, replay.CallFilter()),
    ):
        names = {call.client_name for call in listed.calls}
        assert "agentteam-tests" in names and len(names - {None}) > 1


def test_audit_from_the_store_equals_the_local_audit(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    local = replay.audit(paths)
    assert local.calls > 100 and local.error_codes and local.mutations_by_board
    assert to_json(reports.audit_from(url)) == to_json(local)


@pytest.mark.parametrize("names", [(), ("list_tasks", "never_used")])
def test_deprecations_from_the_store_equal_the_local_report(
    fleet: tuple[list[Path], str], names: tuple[str, ...]
) -> None:
    paths, url = fleet
    local = replay.deprecations(paths, as_of=AS_OF, names=names)
    assert any(n.count for n in local.names)
    stored = reports.deprecations_from(url, as_of=AS_OF, names=names)
    assert to_json(stored) == to_json(local)


def test_idempotency_from_the_store_equals_the_local_check(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    local = replay.check_idempotency(paths)
    assert {f.rule for f in local.findings} == {
        "key_outside_callback",
        "conflict_not_reported",
        "replay_allocated_numbers",
        "replay_identities_differ",
        "replay_not_reused",
        "claim_repeat_changed",
        "claim_state_wrong",
        "idempotent_hint_unsafe",
    }
    [shared] = [g for g in local.groups if g.key == SHARED_KEY]
    assert (shared.journal_id, shared.calls, shared.conflicts) == ("idem-0", 10, 3)
    assert any(g.key == "空白🦀" for g in local.groups)  # an argument key, stripped
    assert local.claim_repeats and {h.verdict for h in local.hints} >= {"holds", "violated"}
    assert to_json(reports.idempotency_from(url)) == to_json(local)


def test_idempotency_from_the_store_forgets_repeats_as_the_local_check_does(
    fleet: tuple[list[Path], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repeats further apart than the window are not compared, by either (here 3 calls)."""
    paths, url = fleet
    full = replay.check_idempotency(paths)
    monkeypatch.setattr("agentteam_task_bridge.replay._idempotency.REPEAT_WINDOW", 3)
    monkeypatch.setattr("agentteam_task_bridge.replay._fleet_idempotency.REPEAT_WINDOW", 3)
    local = replay.check_idempotency(paths)
    assert sum(h.repeats for h in local.hints) < sum(h.repeats for h in full.hints)
    assert to_json(reports.idempotency_from(url)) == to_json(local)


@pytest.mark.slow  # eight CLI processes; --json equality is proven above on the same objects
@pytest.mark.parametrize("command", ["calls", "audit", "deprecations", "idempotency"])
def test_the_cli_prints_the_same_report(fleet: tuple[list[Path], str], command: str) -> None:
    paths, url = fleet
    extra = ["--as-of", "2027-01-15"] if command == "deprecations" else []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentteam_task_bridge.replay._cli", command, *args, *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    local = run(*map(str, paths))
    stored = run("--from", url)
    assert stored.returncode == local.returncode, stored.stderr
    assert stored.stdout == local.stdout


def test_an_empty_journal_reads_the_same_from_the_store(tmp_path: Path, pg_url: str) -> None:
    """No calls at all: every report over the store is the local one (empty, not an error)."""
    from agentteam_task_bridge import journal

    from .journal_helpers import KEY

    path = tmp_path / "empty.db"
    journal.open_sync_writer(path, key=KEY).close()
    assert replay.ship([path], pg_url).ok
    assert to_json(reports.calls_from(pg_url, replay.CallFilter())) == to_json(
        replay.list_calls([path])
    )
    assert to_json(reports.audit_from(pg_url)) == to_json(replay.audit([path]))
    assert to_json(reports.deprecations_from(pg_url, as_of=AS_OF)) == to_json(
        replay.deprecations([path], as_of=AS_OF)
    )
    assert to_json(reports.idempotency_from(pg_url)) == to_json(replay.check_idempotency([path]))


def _relation_rows(plan: dict[str, Any], prefix: str) -> int:
    """The rows a plan's scans of the relations named ``prefix...`` returned, every loop."""
    rows = 0
    if str(plan.get("Relation Name", "")).startswith(prefix):
        rows += int(plan["Actual Rows"]) * int(plan["Actual Loops"])
    for child in plan.get("Plans", []):
        rows += _relation_rows(child, prefix)
    return rows


def test_idempotency_from_reads_the_call_lines_not_the_events(
    fleet: tuple[list[Path], str],
) -> None:
    """The check's per-call fields are kept on the call lines at ingest: the query reads one
    line per call and, of the events, only the session ends of the calls never closed."""
    from agentteam_task_bridge.replay._fleet_idempotency import idempotency_query
    from agentteam_task_bridge.replay._idempotency import declared_hints

    _, url = fleet
    sql, params = idempotency_query(hints=declared_hints())
    with reports.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        [[plan]] = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
        events, lines, unclosed = conn.execute(
            "SELECT (SELECT count(*) FROM agentteam.events),"
            " (SELECT count(*) FROM agentteam.call_lines),"
            " (SELECT count(*) FROM agentteam.call_lines WHERE closed_seq IS NULL)"
        ).fetchone()
    assert events > 4 * lines > 0 and 0 < unclosed < lines
    assert _relation_rows(plan["Plan"], "call_lines") == lines
    assert _relation_rows(plan["Plan"], "events") <= unclosed
