"""The fleet store enforces its integrity itself: what a shipping login (or the owner) cannot do.

Each attack runs against a real PostgreSQL as the login that would run it: a shipping login
(a member of ``agentteam_ship``) writes only through the store's checked ingest (seq = head + 1,
the chain hash recomputed in SQL, only its own journals, keys only from the chain, checkpoints
only over rows the store holds), and no role, the owner included, truncates a partition.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._fleet_ship import send_batch
from agentteam_task_bridge.replay._fleet_witness import witness_findings

from .fleet_helpers import (
    append_calls,
    consolidated_copy,
    rewrite_payload,
    write_fleet_journal,
    write_v1_fleet_journal,
)
from .journal_helpers import KEY


@pytest.fixture
def login(pg_url: str) -> Iterator[Any]:
    """``login()``: the URL of a new shipping login (``IN ROLE agentteam_ship``) on the store."""
    made: list[str] = []

    def make() -> str:
        name = f"ship_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            replay.ship([], pg_url)  # the store's schema and roles, as its owner
            admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE agentteam_ship")
        made.append(name)
        return pg_url.replace("postgresql://postgres@", f"postgresql://{name}@")

    yield make
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


def rows_of(path: Path) -> list[tuple[Any, ...]]:
    """Its rows (COLUMNS order) with their leaf columns (salt, digest, stored hashes)."""
    with journal.open_reader(path) as reader:
        return [(*event, *(leaf or ())) for event, leaf in reader.stored_rows(leaves=True)]


def ingest(conn: psycopg.Connection[Any], journal_id: str, rows: list[tuple[Any, ...]]) -> Any:
    """The store's staging and ingest functions called directly, as a modified shipper would."""
    with conn.transaction():
        return send_batch(conn, journal_id, rows)


def checkpoint_row(cp: journal.Checkpoint) -> tuple[Any, ...]:
    return (cp.seq, cp.head_hash, cp.ts_wall, cp.key_id, cp.signature)


def store_rows(url: str, journal_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, hash FROM agentteam.events WHERE journal_id = %s ORDER BY seq, ts",
            (journal_id,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def test_a_forged_row_at_an_existing_seq_is_refused_whatever_its_ts(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 1, 6)
    assert replay.ship([path], alice).ok
    honest = store_rows(pg_url, jid)
    # The attack: the journal rewritten at seq 12 and re-chained, its row sent again.
    forged = consolidated_copy(path, tmp_path / "forged.db")
    rewrite_payload(forged, 12, '{"arguments":{"channel":"evil"},"meta_keys":[]}')
    row = rows_of(forged)[11][:17]
    with psycopg.connect(alice, autocommit=True) as conn:
        columns = ", ".join(("ts", *journal.COLUMNS))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                f"INSERT INTO agentteam.events ({columns}) VALUES"
                f" ('2000-01-01T00:00:00Z', {', '.join(['%s'] * len(row))})",
                row,
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.cursor() as cur:
            with cur.copy(f"COPY agentteam.events ({columns}) FROM STDIN") as copy:
                copy.write_row(("2000-01-01T00:00:00Z", *row))
        with pytest.raises(psycopg.errors.CheckViolation, match="sequence_gap"):
            ingest(conn, jid, rows_of(forged)[11:])
    assert store_rows(pg_url, jid) == honest, "one row per seq, the honest one"
    assert witness_findings(pg_url, [path]) == [], "the honest journal still agrees"
    assert [f.rule for f in witness_findings(pg_url, [forged])] == ["witness_rewritten"]


def test_a_row_whose_hash_does_not_recompute_is_refused(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 2, 3)
    rows = rows_of(path)
    assert replay.ship([path], alice).ok
    append_calls(path, jid, 30, 2)
    new = rows_of(path)[len(rows) :]
    edited = [list(r) for r in new]
    edited[1][14] = edited[1][14].replace("eng", "gne")  # the payload changed, hash kept
    broken = [list(r) for r in new]
    broken[1][15] = "f" * 64  # the chain cut
    with psycopg.connect(alice, autocommit=True) as conn:
        for bad, rule in ((edited, "hash_mismatch"), (broken, "chain_broken")):
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                ingest(conn, jid, [tuple(r) for r in bad])
            assert caught.value.diag.message_detail == f"{rule} {new[1][0]}"
    assert [s for s, _ in store_rows(pg_url, jid)] == [r[0] for r in rows], "the batch is whole"
    assert replay.ship([path], alice).ok, "the genuine rows go in"
    assert store_rows(pg_url, jid) == [(r[0], r[16]) for r in rows_of(path)]


def test_a_v1_row_dressed_as_erased_still_has_its_hash_checked(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    """Only a v2 row (a salt column, emptied) can arrive erased; a v1 row (no salt) whose
    payload is the erased marker is an edited payload like any other."""
    alice = login()
    path = tmp_path / "v1.db"
    jid = write_v1_fleet_journal(path, 1, 3)
    rows = rows_of(path)
    assert len(rows[0]) == 17, "a v1 journal: no leaf columns"
    assert replay.ship([path], alice).ok
    append_calls(path, jid, 30, 2)
    new = rows_of(path)[len(rows) :]
    dressed = [list(r) for r in new]
    dressed[1][14] = journal.ERASED_PAYLOAD  # the payload gone, its hash kept
    with psycopg.connect(alice, autocommit=True) as conn2:
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            ingest(conn2, jid, [tuple(r) for r in dressed])
    assert caught.value.diag.message_detail == f"hash_mismatch {new[1][0]}"
    assert replay.ship([path], alice).ok, "the genuine rows go in"


def test_another_login_cannot_write_or_move_the_head_of_a_journal(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    alice, mallory = login(), login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 3, 4)
    assert replay.ship([path], alice).ok
    honest = store_rows(pg_url, jid)
    # Mallory holds a copy and writes one more call into it: a valid row at head + 1.
    stolen = consolidated_copy(path, tmp_path / "stolen.db")
    append_calls(stolen, jid, 90, 1)
    extra = rows_of(stolen)[len(honest) :]
    report = replay.ship([stolen], mallory)
    refused = report.journals[0].refused
    assert refused is not None and refused.rule == "not_owner"
    with psycopg.connect(mallory, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="another login"):
            ingest(conn, jid, extra)
        for statement in (
            "UPDATE agentteam.heads SET seq = seq + 1",
            "INSERT INTO agentteam.heads (journal_id, seq, hash) VALUES ('x', 1, 'x')",
            "INSERT INTO agentteam.journals (journal_id) VALUES ('x')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert store_rows(pg_url, jid) == honest
    assert witness_findings(pg_url, [path]) == [], "the honest journal is not 'truncated'"
    calls = reports.calls_from(pg_url, replay.CallFilter()).calls
    assert not any(c.call_id.startswith("s90.") for c in calls), "no fake call in the reports"
    # Alice goes on shipping her journal.
    append_calls(path, jid, 40, 1)
    assert replay.ship([path], alice).ok


def test_keys_and_checkpoints_enter_only_through_the_checked_functions(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 4, 3, checkpoint_every=1000)
    assert replay.ship([path], alice).ok
    attacker = journal.SigningKey("agentteam-bridge/attacker", bytes(range(1, 33)))
    head_seq, head_hash = rows_of(path)[-1][0], rows_of(path)[-1][16]
    forged = journal.sign_checkpoint(
        attacker, journal_id=jid, seq=head_seq, head_hash=head_hash, ts_wall="2026-12-03T00:00:00Z"
    )
    with psycopg.connect(alice, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO agentteam.journal_keys (journal_id, seq, vkey) VALUES (%s, 1, %s)",
                (jid, attacker.verifier.to_text()),
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO agentteam.checkpoints"
                " (journal_id, seq, head_hash, ts_wall, key_id, signature)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (jid, *checkpoint_row(forged)),
            )
        add = "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s)"
        with pytest.raises(psycopg.errors.CheckViolation, match="registered key"):
            conn.execute(
                add,
                (jid, *checkpoint_row(forged)),
            )
        signed = journal.sign_checkpoint(
            journal.SigningKey("agentteam-bridge/seed", KEY),
            journal_id=jid,
            seq=head_seq,
            head_hash="e" * 64,
            ts_wall="2026-12-03T00:00:00Z",
        )
        with pytest.raises(psycopg.errors.CheckViolation, match="hash the checkpoint names"):
            conn.execute(
                add,
                (jid, *checkpoint_row(signed)),
            )
    keys = replay._fleet_witness.registered_keys(pg_url, [jid])
    assert [k.key_id for k in keys] == [journal.SigningKey("agentteam-bridge/seed", KEY).key_id]


def test_no_role_truncates_a_partition_not_even_the_owner(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 5, 2)
    assert replay.ship([path], alice).ok
    with psycopg.connect(pg_url, autocommit=True) as owner:
        partitions = [
            str(r[0])
            for r in owner.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'agentteam.events'::regclass"
            )
        ]
        assert partitions
        owner.execute("SELECT agentteam.ensure_partition('2031-07-01')")  # a month made later
        refused = [f"TRUNCATE agentteam.{name}" for name in [*partitions, "events_2031_07"]]
        refused += [f"DELETE FROM agentteam.{name}" for name in partitions]
        for statement in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                owner.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            owner.execute("TRUNCATE agentteam.heads")
    with psycopg.connect(alice, autocommit=True) as conn:
        for name in partitions:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"TRUNCATE agentteam.{name}")
    assert len(store_rows(pg_url, jid)) == len(rows_of(path))


def test_the_sql_hash_is_the_writers_for_every_shape_of_row(pg_url: str, tmp_path: Path) -> None:
    """Control characters, quotes, backslashes, every plane, NUL in a payload, integers and
    floats of every form, NULL columns: the store recomputes the writer's hash byte for byte."""
    path = tmp_path / "shapes.db"
    texts = ["", "\"'\\", "\b\f\n\r\t\x01\x1f\x7f", "\u2028\u2029 \ufeff\uffff", "𝄞漢✓🦀"]
    durations = [0.0, 1.0, 2.5, 0.001, 123456789012.345, 99999999999999.9, 1e14]
    with journal.open_sync_writer(path, key=KEY) as writer:
        for n, text in enumerate(texts):
            writer.append(
                journal.Event(
                    session_id=f"s{text}",
                    call_id=f"c{n}{text}",
                    gen_ai_tool_name=text or None,
                    mcp_method_name="tools/call",
                    jsonrpc_request_id=f"r{text}" if n % 2 else n,
                    payload=journal.CallReceived(arguments={"note": f"{text}\x00", "n": n}),
                )
            )
        for n, duration in enumerate(durations):
            writer.append(
                journal.Event(
                    session_id="s",
                    call_id=f"d{n}",
                    payload=journal.UpstreamResponse(status=200 + n, body={}, duration_ms=duration),
                )
            )
        jid = writer.journal_id
    report = replay.ship([path], pg_url)
    assert report.ok, report.journals[0].refused
    assert store_rows(pg_url, jid) == [(r[0], r[16]) for r in rows_of(path)]


def test_the_staging_table_is_the_stores_and_what_it_holds_is_checked(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    """A batch is COPYed into the session's staging table, which the owner makes: a relation of
    that name the login made itself (a view calling its own function, run as the owner if read)
    is refused; the login may only INSERT into the real one, and every row staged is checked."""
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 6, 2)
    assert replay.ship([path], alice).ok
    honest = store_rows(pg_url, jid)
    append_calls(path, jid, 60, 2)
    new = rows_of(path)[len(honest) :]
    with psycopg.connect(alice, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION pg_temp.grab() RETURNS bigint LANGUAGE sql"
            " AS 'SELECT count(*) FROM agentteam.heads'"
        )
        conn.execute("CREATE TEMP VIEW ship_batch AS SELECT pg_temp.grab() AS seq")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="staging table"):
            conn.execute("SELECT agentteam.stage_batch()")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="staging table"):
            conn.execute("SELECT agentteam.ingest(%s)", (jid,))
    with psycopg.connect(alice, autocommit=True) as conn:
        conn.execute("SELECT agentteam.stage_batch()")
        for statement in (
            "CREATE RULE r AS ON INSERT TO pg_temp.ship_batch DO INSTEAD NOTHING",
            "ALTER TABLE pg_temp.ship_batch ENABLE ROW LEVEL SECURITY",
            "DELETE FROM pg_temp.ship_batch",
            "SELECT * FROM pg_temp.ship_batch",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        twice = [new[0], new[0], *new[1:]]
        # A ts_wall that is not a time (its digits; then its shape), its hash recomputed over it.
        late = [list(new[0]), list(new[0])]
        late[0][5] = late[0][5].replace("2", "x", 1)
        late[1][5] = late[1][5].replace("T", " ", 1)
        for row in late:
            row[16] = journal.row_hash(tuple(row[:17]))
        for bad, rule, seq in (
            (twice, "sequence_gap", new[0][0]),
            ([*new[1:], new[0]][::-1][1:], "sequence_gap", new[1][0]),
            ([tuple(late[0])], "row_malformed", None),
            ([tuple(late[1])], "row_malformed", new[0][0]),
        ):
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                ingest(conn, jid, bad)
            detail = caught.value.diag.message_detail or ""
            assert detail.split(" ")[0] == rule, detail
            if seq is not None:
                assert detail == f"{rule} {seq}"
        assert conn.execute("SELECT agentteam.ingest(%s)", (jid,)).fetchone() == (honest[-1][0],)
    assert store_rows(pg_url, jid) == honest, "nothing of a refused batch is kept"
    assert replay.ship([path], alice).ok
    assert store_rows(pg_url, jid) == [(r[0], r[16]) for r in rows_of(path)]


def test_the_store_keeps_the_merkle_state_and_checks_each_checkpoints_root(
    pg_url: str, login: Any, tmp_path: Path
) -> None:
    """The ingest appends each leaf (recomputed in SQL from the row and its salted payload
    digest) to the journal's tree: its stored hashes are the writer's, the tree hash at every
    size is the local one, and a checkpoint is kept only when its root is the store's."""
    alice = login()
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 7, 9, checkpoint_every=7)
    assert replay.ship([path], alice).ok
    rows = rows_of(path)
    with journal.open_reader(path) as reader:
        roots = {
            n: journal._merkle.tree_hash(
                n, lambda ix: [reader.stored_hash(i) or b"" for i in ix]
            ).hex()
            for n in range(len(rows) + 1)
        }
        local_cps = {cp.seq: cp.root_hash for cp in reader.checkpoints()}
    with psycopg.connect(alice, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT seq, tree_hashes FROM agentteam.events WHERE journal_id = %s ORDER BY seq",
            (jid,),
        ).fetchall()
        assert [(s, bytes(t)) for s, t in stored] == [(r[0], r[19]) for r in rows]
        for n, root in roots.items():
            got = conn.execute("SELECT agentteam.tree_root(%s, %s)", (jid, n)).fetchone()
            assert got is not None and bytes(got[0]).hex() == root, n
        kept = conn.execute(
            "SELECT seq, root_hash FROM agentteam.checkpoints WHERE journal_id = %s", (jid,)
        ).fetchall()
        assert kept and all(root == roots[seq] == local_cps[seq] for seq, root in kept)
        head = rows[-1]
        lying = journal.sign_checkpoint(
            journal.SigningKey("agentteam-bridge/seed", KEY),
            journal_id=jid,
            seq=head[0],
            head_hash=head[16],
            ts_wall="2026-12-03T00:00:00Z",
            root_hash=roots[head[0] - 1],
        )
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(
                "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s, %s)",
                (jid, *checkpoint_row(lying), lying.root_hash),
            )
        assert caught.value.diag.message_detail == f"checkpoint_root_mismatch {head[0]}"
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(
                "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s)",
                (jid, *checkpoint_row(lying)),
            )
        assert caught.value.diag.message_detail == f"checkpoint_root_mismatch {head[0]}"
    append_calls(path, jid, 70, 1)
    new = [list(r) for r in rows_of(path)[len(rows) :]]
    other = list(new[0])
    other[17] = "00" * 16  # another salt: the digest no longer commits to the payload
    bare = [*new[0][:17], None, None, None]  # a v2 journal's event without its leaf
    with psycopg.connect(alice, autocommit=True) as conn:
        for bad, rule in (([other], "leaf_mismatch"), ([bare], "leaf_missing")):
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                ingest(conn, jid, [tuple(r) for r in bad])
            assert caught.value.diag.message_detail == f"{rule} {new[0][0]}"
    assert replay.ship([path], alice).ok
