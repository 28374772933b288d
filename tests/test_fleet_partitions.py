"""A shipping login cannot flood the store with partitions (``ts_ahead``, ``<table>_early``).

The month of each row's ``ts_wall`` picks its partition, and the chain hashes any time: a login
that shipped 1,000 chain-valid rows a month apart from 1900 made 1,000 partitions of ``events``
and of ``call_lines``, and every report over the fleet planned over all of them (``audit
--from`` from 0.03 s to 75 s; an honest ``ship`` 21 s). Now a row more than a day past the
server's clock is refused, and rows before FIRST_PARTITION_MONTH share one DEFAULT partition:
whatever times a login ships, it makes no partition an honest fleet would not make.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._fleet_schema import FIRST_PARTITION_MONTH
from agentteam_task_bridge.replay._fleet_ship import send_batch

from .fleet_helpers import write_fleet_journal

TABLES = ("events", "call_lines")


def _wall(moment: datetime) -> str:
    """As the writer formats ts_wall, the year in four digits (strftime drops them before 1000)."""
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%S.%fZ")


def _rows(journal_id: str, walls: list[str]) -> list[tuple[Any, ...]]:
    """A chain-valid v1 journal, one call's event at each wall time (so each makes a line)."""
    prev, rows = journal.GENESIS_HASH, []
    for seq, wall in enumerate(walls, 1):
        row: list[Any] = [seq, journal_id, "s", f"c{seq}", seq, wall, "call_received", 1]
        row += [None, "task_get", None, None, None, None, '{"reason": "x"}', prev, ""]
        row[16] = prev = journal.row_hash(tuple(row))
        rows.append(tuple(row))
    return rows


def _partitions(conn: psycopg.Connection[Any], table: str) -> set[str]:
    return {
        str(name)
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = %s::regclass",
            (f"agentteam.{table}",),
        )
    }


def _register(conn: psycopg.Connection[Any]) -> str:
    journal_id = f"m-{uuid.uuid4().hex[:8]}"
    conn.execute("SELECT agentteam.register_journal(%s, NULL, 'x', NULL)", (journal_id,))
    return journal_id


@pytest.mark.parametrize("seed", [1, 2])
def test_rows_at_any_time_make_no_partition_an_honest_fleet_would_not(
    pg_url: str, mallory: str, tmp_path: Path, seed: int
) -> None:
    honest = tmp_path / "honest.db"
    write_fleet_journal(honest, seed, 3)
    assert replay.ship([honest], pg_url).ok
    now = datetime.now(UTC)
    first = date.fromisoformat(FIRST_PARTITION_MONTH)
    # Months a fleet running since FIRST_PARTITION_MONTH makes, up to next month, and one early.
    allowed = {f"{t}_early" for t in TABLES}
    month = first
    while month <= (now + timedelta(days=1)).date():
        allowed |= {f"{t}_{month:%Y_%m}" for t in TABLES}
        month = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    # 300 times from year 1 to a day ahead, in order (a chain's times need not be, but a flood
    # by month steps is the cheap one), some on the edges of the first month.
    rng = random.Random(seed)
    start, end = datetime(1, 1, 1, tzinfo=UTC), now + timedelta(hours=23)
    span = (end - start).total_seconds()
    moments = [start + timedelta(seconds=rng.uniform(0, span)) for _ in range(296)]
    edge = datetime.combine(first, datetime.min.time(), UTC)
    moments += [start, edge - timedelta(microseconds=1), edge, end]
    walls = [_wall(m) for m in sorted(moments)]
    with psycopg.connect(mallory, autocommit=True) as conn:
        journal_id = _register(conn)
        with conn.transaction():
            assert send_batch(conn, journal_id, _rows(journal_id, walls)) == len(walls)
        for table in TABLES:
            made = _partitions(conn, table)
            assert made <= allowed, sorted(made - allowed)[:5]
            assert f"{table}_early" in made
        # Every row is held and read where its time says: the early ones too.
        held = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE ts < %s::timestamptz)"
            " FROM agentteam.events WHERE journal_id = %s",
            (FIRST_PARTITION_MONTH, journal_id),
        ).fetchone()
        early = sum(1 for w in walls if w < FIRST_PARTITION_MONTH)
        assert held == (len(walls), early)
    # The month partitions made after early rows are held do not clash with them.
    with psycopg.connect(pg_url, autocommit=True) as owner:
        assert owner.execute(
            "SELECT count(*) FROM agentteam.call_lines_early WHERE journal_id = %s", (journal_id,)
        ).fetchone() == (early,)
        owner.execute("SELECT agentteam.ensure_partition('2031-07-01')")
        owner.execute("SELECT agentteam.ensure_call_partition('2031-07-01')")
        for table in TABLES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                owner.execute(f"TRUNCATE agentteam.{table}_early")
    assert reports.audit_from(pg_url)


@pytest.mark.parametrize(
    ("ahead", "refused"),
    [
        (timedelta(hours=23), False),
        (timedelta(days=1, minutes=5), True),
        (timedelta(days=400), True),
        (timedelta(days=365 * 7000), True),
    ],
)
def test_a_row_more_than_a_day_past_the_servers_clock_is_refused(
    mallory: str, ahead: timedelta, refused: bool
) -> None:
    now = datetime.now(UTC)
    walls = [_wall(now - timedelta(minutes=2)), _wall(now + ahead), _wall(now + ahead)]
    with psycopg.connect(mallory, autocommit=True) as conn:
        journal_id = _register(conn)
        before = {t: _partitions(conn, t) for t in TABLES}
        if not refused:
            with conn.transaction():
                assert send_batch(conn, journal_id, _rows(journal_id, walls)) == 3
            return
        with pytest.raises(psycopg.errors.CheckViolation) as caught, conn.transaction():
            send_batch(conn, journal_id, _rows(journal_id, walls))
        assert caught.value.diag.message_detail == "ts_ahead 2"
        assert {t: _partitions(conn, t) for t in TABLES} == before
        head = conn.execute("SELECT seq FROM agentteam.heads WHERE journal_id = %s", (journal_id,))
        assert head.fetchone() == (0,)


@pytest.mark.parametrize(
    "wall",
    [
        "2026-06-30T23:59:60.000000Z",  # a leap second: PostgreSQL reads July, the text June
        "2024-12-31T24:00:00.000000Z",  # end of day: 2025-01-01, the text the early partition's
        "2024-12-31T23:59:60.500000Z",
        "2025-03-31T24:00:00.000000Z",  # April's partition made by the batch's first row
        "2024-12-31T23:59:59.999oT9Z",  # letters read as a zone: 2025-01-01T08:59:59.999
        "2025-04-30T23:59:59.99KS99Z",  # 2025-05-05
        "2025-04-02T23:59:59.l00000Z",  # the same month, another hour
        "2025-04-0-T10:00:00.000000Z",  # read as the 0th... day 4
        "+026-12-04T10:00:00.000000Z",  # a sign: read as a time zone, not a year
        "-026-12-04T10:00:00.000000Z",
        "2026-1a-04T10:00:00.000000Z",
    ],
)
def test_a_ts_wall_the_writer_could_not_have_written_is_row_malformed(
    mallory: str, wall: str
) -> None:
    """A ts_wall must be the writer's text of its instant (what Python's `verify` reads), not
    only its shape: PostgreSQL also reads `24:00`, `:60`, letters (zone names) and signs within
    the shape, as another instant than the text says, often of another month than the text's,
    which picked the partition (a CHECK or no-partition error, whose DETAIL the shipper took for
    a rule, or a sign's uncaught error), or accepted the row where `verify` says row_malformed."""
    walls = ["2025-04-01T00:00:00.000000Z", wall]
    with psycopg.connect(mallory, autocommit=True) as conn:
        journal_id = _register(conn)
        with pytest.raises(psycopg.errors.CheckViolation) as caught, conn.transaction():
            send_batch(conn, journal_id, _rows(journal_id, walls))
        # With its seq when PostgreSQL reads a time in it, else the batch's.
        assert caught.value.diag.message_detail in ("row_malformed 2", "row_malformed")
        head = conn.execute("SELECT seq FROM agentteam.heads WHERE journal_id = %s", (journal_id,))
        assert head.fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM agentteam.events WHERE journal_id = %s", (journal_id,)
        ).fetchone() == (0,)
    rows = [journal.Row._make(r) for r in _rows(journal_id, walls)]
    assert journal.row_problem(rows[1]) is not None  # as verify finds it
