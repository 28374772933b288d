"""A witness tick visits only the journals with a checkpoint added since its last tick.

attack6 (session 21): each tick read every registered journal (about 0.1 ms each with nothing
new), so one shipping login registering journals without limit made every tick slow for the
whole fleet. The checkpoints are a queue (``agentteam.checkpoints.queued``, the adding
transaction's id, indexed); each witness login and key keeps where its last tick began
(``agentteam.witness_cursors``, moved only by that login). Against a real PostgreSQL, as the
logins that would act.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._fleet_cosign import cosign_once

from .fleet_helpers import write_fleet_journal
from .test_fleet_cosign import WITNESS, logins  # noqa: F401  (the fixture: logins(role) -> URL)

REGISTERED = 10_000


def _login(url: str) -> str:
    return url.split("//")[1].split("@")[0]


def _register_quiet_journals(pg_url: str, count: int) -> None:
    """``count`` journals, each with a checkpoint, registered by the owner in one statement."""
    with psycopg.connect(pg_url, autocommit=True) as owner, owner.transaction():
        owner.execute(
            "INSERT INTO agentteam.journals (journal_id) SELECT 'quiet-' || i"
            " FROM generate_series(1, %s) i",
            (count,),
        )
        owner.execute(
            "INSERT INTO agentteam.heads (journal_id, seq, hash)"
            " SELECT 'quiet-' || i, 1, repeat('a', 64) FROM generate_series(1, %s) i",
            (count,),
        )
        owner.execute(
            "INSERT INTO agentteam.checkpoints"
            " (journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash)"
            " SELECT 'quiet-' || i, 1, repeat('a', 64), '', 'k+1', 'sig', repeat('b', 64)"
            " FROM generate_series(1, %s) i",
            (count,),
        )


def _queued_since_cursor(pg_url: str, witness: str) -> int:
    """The checkpoint rows a tick of ``witness`` reads from the queue (its cursor on)."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agentteam.checkpoints c, agentteam.witness_cursors w"
            " WHERE w.login = %s AND w.key_id = %s AND c.queued >= w.settled",
            (_login(witness), WITNESS.key_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_tick_over_ten_thousand_quiet_journals_visits_only_the_new_ones(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    old = tmp_path / "old.db"
    write_fleet_journal(old, 1, 2)
    assert replay.ship([old], shipper).ok
    assert [j.outcome for j in cosign_once(witness, WITNESS).journals] == ["cosigned"]
    _register_quiet_journals(pg_url, REGISTERED)
    # The witness has seen them (as a full check, --all, would: 10,001 visits, seconds), so
    # nothing is new: its cursor moved past them, as its login moves it after a tick.
    with psycopg.connect(witness, autocommit=True) as conn:
        conn.execute(
            "SELECT agentteam.witness_moved(%s, pg_snapshot_xmin(pg_current_snapshot()))",
            (WITNESS.key_id,),
        )

    quiet = cosign_once(witness, WITNESS)
    assert quiet.journals == [] and quiet.ok
    assert _queued_since_cursor(pg_url, witness) == 0
    paths = [tmp_path / f"new-{i}.db" for i in range(3)]
    ids = sorted(write_fleet_journal(path, 10 + i, 2) for i, path in enumerate(paths))
    assert replay.ship(paths, shipper).ok
    assert _queued_since_cursor(pg_url, witness) == 3  # one checkpoint each: the rows read
    grown = cosign_once(witness, WITNESS)
    assert [(j.journal_id, j.outcome) for j in grown.journals] == [(i, "cosigned") for i in ids]
    assert cosign_once(witness, WITNESS).journals == []


def test_a_checkpoint_committed_after_a_tick_began_is_visited_by_the_next(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The queue is ordered by transaction id, not by commit: a checkpoint whose transaction was
    running when a tick began is read by a later tick, never skipped."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 3, 2)
    assert replay.ship([path], shipper).ok
    assert [j.outcome for j in cosign_once(witness, WITNESS).journals] == ["cosigned"]
    _register_quiet_journals(pg_url, 2)
    assert len(cosign_once(witness, WITNESS).journals) == 2  # new: visited (not verified)
    with psycopg.connect(pg_url) as slow:  # a transaction older than the next tick
        slow.execute(
            "INSERT INTO agentteam.checkpoints"
            " (journal_id, seq, head_hash, ts_wall, key_id, signature) VALUES"
            " ('quiet-1', 2, repeat('c', 64), '', 'k+1', 'sig')"
        )
        assert cosign_once(witness, WITNESS).journals == []  # not committed yet
        slow.commit()
    (late,) = cosign_once(witness, WITNESS).journals
    assert late.journal_id == "quiet-1"
    assert cosign_once(witness, WITNESS).journals == []
    assert jid not in {j.journal_id for j in cosign_once(witness, WITNESS).journals}


def test_only_a_witness_login_moves_its_own_cursor(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    shipper, witness, other = (
        logins("agentteam_ship"),
        logins("agentteam_witness"),
        logins("agentteam_witness"),
    )
    path = tmp_path / "a.db"
    write_fleet_journal(path, 4, 2)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).journals != []
    for login in (shipper, other):
        with psycopg.connect(login, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("UPDATE agentteam.witness_cursors SET settled = '999999999'::xid8")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO agentteam.witness_cursors (login, key_id, settled)"
                    " VALUES (%s, %s, '1'::xid8)",
                    (_login(witness), WITNESS.key_id),
                )
    with psycopg.connect(shipper, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT agentteam.witness_moved(%s, '999999999'::xid8)", (WITNESS.key_id,))
    # Another witness login moving "its" cursor for the same key moves only its own row.
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("SELECT agentteam.witness_moved(%s, '999999999'::xid8)", (WITNESS.key_id,))
    with psycopg.connect(pg_url) as conn:
        rows = dict(conn.execute("SELECT login, settled::text FROM agentteam.witness_cursors"))
    assert rows[_login(other)] == "999999999" and rows[_login(witness)] != "999999999"
    assert [j.outcome for j in cosign_once(other, WITNESS, every=True).journals] == ["current"]


def test_a_version_7_store_is_refused_not_patched(pg_url: str, tmp_path: Path) -> None:
    """Version 7 keeps no queue of checkpoints (nor a cap of journals per login): a new store."""
    path = tmp_path / "a.db"
    write_fleet_journal(path, 5, 1)
    assert replay.ship([path], pg_url).ok
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("UPDATE agentteam.store_meta SET value = '7' WHERE key = 'schema_version'")
    with pytest.raises(replay.StoreError, match="schema version 7 is older"):
        replay.ship([path], pg_url)


def test_the_queue_is_read_in_pages_along_its_index_whatever_the_statistics(
    pg_url: str,
    logins: Any,  # noqa: F811
) -> None:
    """Before its first ANALYZE the planner scanned the whole table for a range of ``queued``;
    read in the index's order with a limit, each page walks the index. Several checkpoints of
    one journal in one transaction straddle a page's end: every journal is found once."""
    from agentteam_task_bridge.replay._fleet_cosign import QUEUE_FIRST, QUEUE_NEXT, _queued_since

    logins("agentteam_ship")  # the store's schema
    with psycopg.connect(pg_url, autocommit=True) as owner:
        start = owner.execute("SELECT pg_current_xact_id()::text").fetchone()
        _register_quiet_journals(pg_url, 7)
        owner.execute(
            "INSERT INTO agentteam.checkpoints"
            " (journal_id, seq, head_hash, ts_wall, key_id, signature)"
            " SELECT 'quiet-' || i, s, repeat('a', 64), '', 'k+1', 's'"
            " FROM generate_series(1, 7) i, generate_series(2, 4) s"
        )
        assert start is not None
        for page in (1, 2, 3, 5, 100):
            assert _queued_since(owner, start[0], page) == {f"quiet-{i}" for i in range(1, 8)}
        owner.execute(  # a table of some size (the planner scans one of a few pages, rightly)
            "INSERT INTO agentteam.checkpoints"
            " (journal_id, seq, head_hash, ts_wall, key_id, signature)"
            " SELECT 'quiet-' || (i % 7 + 1), 10 + i, repeat('a', 64), '', 'k+1', 's'"
            " FROM generate_series(1, 20000) i"
        )
        plans = [
            "\n".join(r[0] for r in owner.execute(f"EXPLAIN {query}", args))
            for query, args in (
                (QUEUE_FIRST, (start[0], 5000)),
                (QUEUE_NEXT, (start[0], "quiet-1", 5000)),
            )
        ]
    assert all("checkpoints_queued" in plan and "Seq Scan" not in plan for plan in plans), plans
