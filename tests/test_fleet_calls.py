"""The fleet store's call lines, kept at ingest: equal to the local reports however they arrive.

A report ``--from`` the store reads ``agentteam.call_lines`` (one row per call, refolded by the
checked ingest for every call a batch touches), not the events. Proven against a real
PostgreSQL: shipped in batches of 1, 4, 61 and 5,000 events (calls split across batches, a call
split across a month's end), the lines equal a fold of the whole history and the reports equal
the local ones; a time window reads only the partitions of its months (EXPLAIN); a version-2
store gets its lines on the next ship; nobody but the ingest writes them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._fleet_calls import fold_sql
from agentteam_task_bridge.replay._fleet_schema import SCHEMA_VERSION
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import journal_events, write_idempotency_fleet
from .journal_helpers import KEY
from .pg_cluster import Cluster
from .replay_helpers import Built, build, everyday

OCT = datetime(2026, 10, 20, 8, 0, tzinfo=UTC)
NOV_END = datetime(2026, 11, 30, 23, 58, tzinfo=UTC)  # its calls run into December
DEC = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _clock(times: list[datetime], step: timedelta) -> Callable[[], str]:
    """A writer clock: each event ``step`` after the last, from ``times[0]``."""

    def now() -> str:
        moment = times[0]
        times[0] = moment + step
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    return now


def write_months(path: Path, journal_id: str, starts: list[datetime], first: int) -> Path:
    """A journal of one session per start (9 calls each), its events 20 seconds apart."""
    with pytest.MonkeyPatch.context() as patch:
        with journal.open_sync_writer(path, key=KEY, journal_id=journal_id) as writer:
            for n, start in enumerate(starts):
                patch.setattr(
                    "agentteam_task_bridge.journal._core.wall_now",
                    _clock([start], timedelta(seconds=20)),
                )
                writer.append_many(journal_events(first + n, 9))
    return path


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("calls")
    bridge: Built = build(base / "bridge", everyday)
    return [
        bridge.path,
        write_months(base / "months.db", "months-0", [OCT, NOV_END, DEC], 40),
        write_months(base / "december.db", "months-1", [DEC + timedelta(hours=2)], 50),
        *write_idempotency_fleet(base / "idempotency"),
    ]


@pytest.fixture(scope="module")
def shipped(paths: list[Path], pg_cluster: Cluster) -> str:
    url = pg_cluster.create_database()
    assert replay.ship(paths, url).ok
    return url


def stored_lines(url: str) -> tuple[list[Any], list[Any]]:
    """The call lines the ingest kept, and a fold of every event the store holds, same order."""
    order = " ORDER BY journal_id, call_id"
    with reports.connect(url, autocommit=True) as conn:
        kept = conn.execute("SELECT * FROM agentteam.call_lines" + order).fetchall()
        folded = conn.execute(f"SELECT * FROM ({fold_sql('true')}) f" + order).fetchall()
    return kept, folded


@pytest.mark.parametrize("batch", [1, 4, 61, 5_000])
def test_lines_kept_batch_by_batch_equal_a_fold_of_the_whole_history(
    paths: list[Path], pg_cluster: Cluster, batch: int
) -> None:
    url = pg_cluster.create_database()
    assert replay.ship(paths, url, batch_size=batch).ok
    kept, folded = stored_lines(url)
    assert len(kept) > 100 and kept == folded
    assert to_json(reports.calls_from(url)) == to_json(replay.list_calls(paths))
    assert to_json(reports.audit_from(url)) == to_json(replay.audit(paths))


def test_lines_of_calls_still_open_are_refolded_as_their_events_arrive(
    tmp_path: Path, pg_url: str
) -> None:
    """Ship after every few events, as ``--follow`` does: open calls close in a later ship."""
    path = tmp_path / "live.db"
    events = journal_events(7, 9)
    with journal.open_sync_writer(path, key=KEY, journal_id="live-0") as writer:
        for start in range(0, len(events), 5):
            writer.append_many(events[start : start + 5])
            assert replay.ship([path], pg_url).ok
            kept, folded = stored_lines(pg_url)
            assert kept == folded
            assert to_json(reports.calls_from(pg_url)) == to_json(replay.list_calls([path]))


WINDOWS = [
    replay.CallFilter(since=datetime(2026, 12, 1, tzinfo=UTC)),
    replay.CallFilter(until=datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)),
    replay.CallFilter(since=NOV_END, until=NOV_END + timedelta(minutes=3)),
    replay.CallFilter(since=OCT + timedelta(seconds=20), until=OCT + timedelta(seconds=20)),
    replay.CallFilter(since=datetime(2099, 1, 1, tzinfo=UTC)),
    replay.CallFilter(session="s41", since=datetime(2026, 12, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("where", WINDOWS)
def test_windows_and_sessions_read_from_the_lines_equal_the_local_list(
    paths: list[Path], shipped: str, where: replay.CallFilter
) -> None:
    local = replay.list_calls(paths, where)
    assert to_json(reports.calls_from(shipped, where)) == to_json(local)


def test_the_sessions_named_in_the_windows_exist(paths: list[Path]) -> None:
    """The session filter above selects calls on both sides of December 1 (not vacuous)."""
    calls = replay.list_calls(paths, replay.CallFilter(session="s41")).calls
    assert {c.started_at[:7] for c in calls} == {"2026-11", "2026-12"}


def scanned(url: str, where: replay.CallFilter, **settings: str) -> tuple[set[str], set[str]]:
    """The tables and indexes the plan of ``calls_from(where)`` reads."""
    sql, params = reports.calls_query(where)
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"SET {name} = {value}")
        [(plan,)] = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
    tables: set[str] = set()
    indexes: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            tables.add(node["Relation Name"])
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    return tables, indexes


def test_a_time_window_reads_only_the_partitions_of_its_months(shipped: str) -> None:
    everything, _ = scanned(shipped, replay.CallFilter())
    assert everything == {"call_lines_2026_10", "call_lines_2026_11", "call_lines_2026_12"}
    for where, months in [
        (WINDOWS[0], {"call_lines_2026_12"}),
        (WINDOWS[1], {"call_lines_2026_10", "call_lines_2026_11"}),
        (WINDOWS[2], {"call_lines_2026_11", "call_lines_2026_12"}),
        (WINDOWS[3], {"call_lines_2026_10"}),
        (WINDOWS[4], set()),
    ]:
        assert scanned(shipped, where)[0] == months, where


def test_a_session_and_a_window_are_index_lookups(shipped: str) -> None:
    """On these few rows the planner rightly prefers a scan; without one, the indexes serve."""
    _, by_session = scanned(shipped, replay.CallFilter(session="s41"), enable_seqscan="off")
    assert by_session and all("session_id" in name for name in by_session)
    _, by_time = scanned(shipped, WINDOWS[0], enable_seqscan="off")
    assert by_time == {"call_lines_2026_12_started_ts_idx"}


def test_a_version_2_store_is_refused_with_a_reason_not_patched(
    paths: list[Path], pg_url: str
) -> None:
    """Version 2 held no leaves (nothing to prove from, no root to check): it is not upgraded
    in place, its call lines included; the next ship says why in one line."""
    assert replay.ship(paths[:1], pg_url).ok
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("UPDATE agentteam.store_meta SET value = '2' WHERE key = 'schema_version'")
    with pytest.raises(replay.StoreError, match="schema version 2 is older"):
        replay.ship(paths, pg_url)
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(
            "UPDATE agentteam.store_meta SET value = %s WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION),),
        )


def test_only_the_ingest_writes_the_lines(paths: list[Path], pg_url: str) -> None:
    assert replay.ship(paths[1:2], pg_url).ok
    name = f"ship_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {name} LOGIN IN ROLE agentteam_ship")
    shipper = pg_url.replace("postgresql://postgres@", f"postgresql://{name}@")
    with psycopg.connect(shipper, autocommit=True) as conn:
        for statement in [
            "UPDATE agentteam.call_lines SET status = 'result'",
            "INSERT INTO agentteam.call_counts VALUES ('months-0', 0)",
            "SELECT agentteam.fold_calls('months-0', 1, 10)",
            "TRUNCATE agentteam.call_lines_2026_12",
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(pg_url, autocommit=True) as owner:
        for statement in [
            "DELETE FROM agentteam.call_lines",
            "TRUNCATE agentteam.call_lines",
            "TRUNCATE agentteam.call_lines_2026_11",
            "TRUNCATE agentteam.call_counts",
        ]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                owner.execute(statement)
        owner.execute(f"DROP OWNED BY {name}")
        owner.execute(f"DROP ROLE {name}")


def test_a_calls_session_start_is_found_without_walking_its_session(shipped: str) -> None:
    """The last call of the longest session finds its session's start (and handshake) by an
    index on the session's own events: no event of the session is read and thrown away, so a
    call late in a long session costs the ingest what an early one does (it once walked back
    through every event before it, and forward through every event after the start)."""
    from agentteam_task_bridge.replay._fleet_store import SESSION_DOC, SESSION_STARTED_OF_CALL

    longest = """
SELECT journal_id, session_id, max(seq) FROM agentteam.events WHERE call_id IS NOT NULL
GROUP BY journal_id, session_id ORDER BY count(*) DESC LIMIT 1"""
    # As the fold finds it: the start's seq, then its document by that seq.
    lookup = f"""
EXPLAIN (ANALYZE, FORMAT JSON)
WITH started AS MATERIALIZED (
  SELECT f.journal_id, {SESSION_STARTED_OF_CALL} AS start_seq
  FROM (SELECT %s::text AS journal_id, %s::text AS session_id, %s::bigint AS first_seq) f)
SELECT {SESSION_DOC.format(s="st")} FROM agentteam.events st
WHERE (st.journal_id, st.seq) IN (SELECT x.journal_id, x.start_seq FROM started x)"""
    with psycopg.connect(shipped, autocommit=True) as conn:
        call = conn.execute(longest).fetchone()
        assert call is not None and call[2] > 50  # a session long enough for a walk to show
        [(plan,)] = conn.execute(lookup, call).fetchall()
    thrown_away: list[int] = []
    found: list[Any] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name", "").startswith("events"):
            thrown_away.append(int(node.get("Rows Removed by Filter", 0)))
            found.append(node.get("Index Name"))
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    assert found and all(name for name in found), found
    assert sum("session_id_kind_seq" in name for name in found) >= 2, found  # start, handshake
    assert sum(thrown_away) == 0, thrown_away
