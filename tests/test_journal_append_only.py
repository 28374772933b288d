"""SQLite itself refuses UPDATE, DELETE and REPLACE on every journal table, and broken appends."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentteam_task_bridge import journal

from .journal_helpers import KEY, all_kinds, event_leaves_file, write_journal

TABLES_AND_KEYS = {
    "events": "seq = 1",
    "checkpoints": "id = 1",
    "journal_meta": "key = 'journal_id'",
    "event_kinds": "kind = 'call_result'",
    "_sqlite_migrations": "id = 1",
    "event_leaves": "seq = 1",  # the Merkle log's (v2): each event's salt, digest, tree hashes
    "erased_seqs": "seq = (SELECT MIN(seq) FROM erased_seqs)",  # erasure's list (0009)
}
# A file made since 0010 keeps its leaf columns in the events row (event_leaves stays empty);
# one made before keeps them in event_leaves: both are checked.
CASES = [
    (layout, table, where)
    for layout in ("events", "event_leaves")
    for table, where in TABLES_AND_KEYS.items()
    if (layout, table) != ("events", "event_leaves")
]


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    yield from _raw(tmp_path, "events")


def _raw(tmp_path: Path, layout: str) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection (recursive_triggers off, as any tool's) to a written journal
    whose leaf columns are in ``layout`` (the events row, or event_leaves)."""
    path = tmp_path / "j.db"
    if layout == "event_leaves":
        event_leaves_file(path)
    write_journal(path, all_kinds())
    # An erasure too, so erased_seqs has rows, and the rows it erased are guarded as the rest.
    erased = journal.erase_payloads(
        path,
        journal.EraseSelector(call_id="call-1"),
        reason="test",
        key=journal.SigningKey("agentteam-bridge/seed", KEY),
    )
    assert erased.seqs
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _copy_row_sql(conn: sqlite3.Connection, table: str, where: str) -> str:
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    names = ", ".join(columns)
    return f"INSERT OR REPLACE INTO {table} ({names}) SELECT {names} FROM {table} WHERE {where}"


@pytest.mark.parametrize(("layout", "table", "where"), CASES)
@pytest.mark.parametrize("verb", ["UPDATE", "DELETE", "REPLACE", "UPSERT"])
def test_sqlite_refuses_to_change_a_row(
    tmp_path: Path, layout: str, table: str, where: str, verb: str
) -> None:
    opened = _raw(tmp_path, layout)
    raw = next(opened)
    try:
        _refuses(raw, table, where, verb)
    finally:
        opened.close()


def _refuses(raw: sqlite3.Connection, table: str, where: str, verb: str) -> None:
    assert raw.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0] == 1
    first_column = next(r[1] for r in raw.execute(f"PRAGMA table_info({table})"))
    before = raw.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    sql = {
        "UPDATE": f"UPDATE {table} SET {first_column} = {first_column} WHERE {where}",
        "DELETE": f"DELETE FROM {table} WHERE {where}",
        "REPLACE": _copy_row_sql(raw, table, where),
        "UPSERT": _copy_row_sql(raw, table, where).replace("INSERT OR REPLACE", "INSERT")
        + f" AND 1 ON CONFLICT DO UPDATE SET {first_column} = excluded.{first_column}",
    }[verb]
    with pytest.raises(sqlite3.IntegrityError, match="journal"):
        raw.execute(sql)
    assert raw.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() == before


def test_every_table_is_protected(raw: sqlite3.Connection) -> None:
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == set(TABLES_AND_KEYS)
    triggers = {
        r[0] for r in raw.execute("SELECT tbl_name FROM sqlite_master WHERE type='trigger'")
    }
    assert triggers == tables


def _next_row(conn: sqlite3.Connection) -> list[object]:
    cols = ", ".join(journal.COLUMNS)
    last = list(conn.execute(f"SELECT {cols} FROM events ORDER BY seq DESC LIMIT 1").fetchone())
    row = [*last[:15], last[16], ""]
    row[0] = last[0] + 1
    row[16] = journal.row_hash(tuple(row))
    return row


INSERT = f"INSERT INTO events ({', '.join(journal.COLUMNS)}) VALUES ({', '.join('?' * 17)})"


def test_a_well_formed_next_row_is_accepted(raw: sqlite3.Connection) -> None:
    raw.execute(INSERT, _next_row(raw))


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (0, 100, "seq must continue"),  # a gap
        (0, 3, "seq must continue"),  # an existing seq (REPLACE would need this)
        (0, None, "seq must continue"),  # let SQLite pick
        (15, "f" * 64, "prev_hash must equal"),  # chain linkage broken
        (16, "not-a-hash", "hash must be 64"),
        (1, "another-journal", "another journal"),
        (6, "made_up_kind", "unknown event kind"),
        (7, 2, "unknown event kind"),
    ],
)
def test_an_append_that_breaks_sequence_or_chain_is_refused(
    raw: sqlite3.Connection, column: int, value: object, message: str
) -> None:
    row = _next_row(raw)
    row[column] = value
    with pytest.raises(sqlite3.IntegrityError, match=message):
        raw.execute(INSERT, row)
    with pytest.raises(sqlite3.IntegrityError, match="seq must continue"):
        raw.execute(INSERT.replace("INSERT", "INSERT OR REPLACE"), [3, *row[1:]])


def test_a_checkpoint_must_name_a_stored_head(raw: sqlite3.Connection) -> None:
    journal_id = raw.execute("SELECT value FROM journal_meta WHERE key='journal_id'").fetchone()[0]
    with pytest.raises(sqlite3.IntegrityError, match="checkpoint must name"):
        raw.execute(
            "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature)"
            " VALUES (?, 3, ?, 'x', 'k', 's')",
            (journal_id, "a" * 64),
        )
