"""The journal's SQLite schema: tables, append-only triggers, views, migrations and connections.

Migrations are sqlite-utils ``Migrations`` and additive only: a migration may add a table, a
nullable column, an index, a view, a kind (a row of ``event_kinds``), or replace a trigger with
one that refuses at least what it refused in every file written before (0004: the append trigger
learns where a later segment starts); it never rewrites or drops data. ``PRAGMA user_version``
holds :data:`SCHEMA_VERSION`; ``_sqlite_migrations`` lists what ran.
Each migration's last statement sets ``user_version`` to its number, so a journal at
:data:`SCHEMA_VERSION` has run them all: opening it needs neither sqlite-utils nor its import
(a fifth of the bridge's own start-up), which only a new or older journal pays for.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from ._canonical import COLUMNS, GENESIS_HASH, format_wall
from ._errors import (
    JournalFormatError,
    JournalUnavailable,
    classify_os_error,
    classify_sqlite_error,
)
from ._events import ERASED_PAYLOAD, PAYLOAD_TYPES
from ._files import open_private
from ._views import VIEWS

if TYPE_CHECKING:
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

__all__ = [
    "INSERT_CHECKPOINT",
    "INSERT_EVENT",
    "INSERT_EVENT_LEAF",
    "LEAF_STORE_KEY",
    "LEAVES_IN_EVENTS",
    "SCHEMA_VERSION",
    "VIEWS",
    "connect_reader",
    "connect_writer",
    "create_private_file",
    "ensure_identity",
    "migrations",
]

SCHEMA_VERSION: Final = 10
BUSY_TIMEOUT_S: Final = 5.0

# The writer's two statements (a row as journal._canonical.Row, a signed checkpoint).
INSERT_EVENT: Final = (
    "INSERT INTO events (seq, journal_id, session_id, call_id, ts_mono_ns, ts_wall, kind,"
    " kind_version, mcp_method_name, gen_ai_tool_name, jsonrpc_request_id,"
    " http_response_status_code, error_type, duration_ms, payload, prev_hash, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A v2 row with its leaf columns, in a file that keeps them in the events row (0010).
INSERT_EVENT_LEAF: Final = (
    "INSERT INTO events (seq, journal_id, session_id, call_id, ts_mono_ns, ts_wall, kind,"
    " kind_version, mcp_method_name, gen_ai_tool_name, jsonrpc_request_id,"
    " http_response_status_code, error_type, duration_ms, payload, prev_hash, hash,"
    " salt, payload_sha256, tree_hashes)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# journal_meta.leaf_store of a file made with its leaf columns in the events row (0010): set
# when the file is made, never later (an older file keeps them in event_leaves).
LEAF_STORE_KEY: Final = "leaf_store"
LEAVES_IN_EVENTS: Final = "events"
INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)

_V1_KINDS: Final = (
    "session_started",
    "session_ended",
    "call_received",
    "call_rejected",
    "context_injected",
    "upstream_request",
    "upstream_response",
    "token_refreshed",
    "deprecated_usage",
    "call_result",
    "call_error",
    "call_cancelled",
)

_EVENT_COLUMNS: Final[dict[str, type]] = {
    "seq": int,
    "journal_id": str,
    "session_id": str,
    "call_id": str,
    "ts_mono_ns": int,
    "ts_wall": str,
    "kind": str,
    "kind_version": int,
    "mcp_method_name": str,
    "gen_ai_tool_name": str,
    "jsonrpc_request_id": str,
    "http_response_status_code": int,
    "error_type": str,
    "duration_ms": float,
    "payload": str,
    "prev_hash": str,
    "hash": str,
}
assert tuple(_EVENT_COLUMNS) == COLUMNS

_EVENTS_APPEND_ONLY: Final = f"""
CREATE TRIGGER journal_events_append BEFORE INSERT ON events
BEGIN
  SELECT RAISE(ABORT, 'journal: seq must continue the stream (previous seq + 1)')
    WHERE NEW.seq IS NOT (SELECT IFNULL(MAX(seq), 0) + 1 FROM events)
       OR typeof(NEW.seq) != 'integer';
  SELECT RAISE(ABORT, 'journal: prev_hash must equal the hash of the previous event')
    WHERE NEW.prev_hash IS NOT
      IFNULL((SELECT hash FROM events WHERE seq = NEW.seq - 1), '{GENESIS_HASH}');
  SELECT RAISE(ABORT, 'journal: hash must be 64 lowercase hex digits')
    WHERE typeof(NEW.hash) != 'text' OR length(NEW.hash) != 64
       OR NEW.hash GLOB '*[^0-9a-f]*';
  SELECT RAISE(ABORT, 'journal: event belongs to another journal')
    WHERE NEW.journal_id IS NOT (SELECT value FROM journal_meta WHERE key = 'journal_id');
  SELECT RAISE(ABORT, 'journal: unknown event kind or kind_version')
    WHERE NOT EXISTS (SELECT 1 FROM event_kinds
                      WHERE kind = NEW.kind AND kind_version = NEW.kind_version);
END
"""

_CHECKPOINTS_LINKED: Final = f"""
CREATE TRIGGER journal_checkpoints_append BEFORE INSERT ON checkpoints
BEGIN
  SELECT RAISE(ABORT, 'journal: REPLACE refused, rows are immutable')
    WHERE EXISTS (SELECT 1 FROM checkpoints WHERE id = NEW.id);
  SELECT RAISE(ABORT, 'journal: checkpoint must name a stored event and its hash')
    WHERE NEW.head_hash IS NOT (CASE WHEN NEW.seq = 0 THEN '{GENESIS_HASH}'
                                ELSE (SELECT hash FROM events WHERE seq = NEW.seq) END);
  SELECT RAISE(ABORT, 'journal: checkpoint belongs to another journal')
    WHERE NEW.journal_id IS NOT (SELECT value FROM journal_meta WHERE key = 'journal_id');
END
"""

# Tables whose rows are keyed: a REPLACE would delete the old row without firing DELETE
# triggers (SQLite fires them only with recursive_triggers on), so INSERT refuses existing keys.
_KEYED_TABLES: Final = {
    "journal_meta": "key = NEW.key",
    "event_kinds": "kind = NEW.kind AND kind_version = NEW.kind_version",
    "_sqlite_migrations": "id = NEW.id OR (migration_set = NEW.migration_set AND name = NEW.name)",
}


def _immutable_triggers(table: str) -> list[str]:
    refuse = "SELECT RAISE(ABORT, 'journal is append-only: {} on " + table + " refused')"
    return [
        f"CREATE TRIGGER journal_{table.strip('_')}_no_update BEFORE UPDATE ON {table}"
        f" BEGIN {refuse.format('UPDATE')}; END",
        f"CREATE TRIGGER journal_{table.strip('_')}_no_delete BEFORE DELETE ON {table}"
        f" BEGIN {refuse.format('DELETE')}; END",
    ]


def _no_replace_trigger(table: str, match: str) -> str:
    return (
        f"CREATE TRIGGER journal_{table.strip('_')}_no_replace BEFORE INSERT ON {table} BEGIN"
        f" SELECT RAISE(ABORT, 'journal: REPLACE refused, rows are immutable')"
        f" WHERE EXISTS (SELECT 1 FROM {table} WHERE {match}); END"
    )


@cache
def migrations() -> Migrations:
    """The journal's migrations, in order (imports sqlite-utils: call only to migrate)."""
    from sqlite_utils.migrations import Migrations

    registry = Migrations("agentteam_journal")
    registry(name="0001_initial")(_initial)
    registry(name="0002_journal_gap")(_journal_gap)
    registry(name="0003_key_rotated")(_key_rotated)
    registry(name="0004_segments")(_segments)
    registry(name="0005_segments_pruned")(_segments_pruned)
    registry(name="0006_merkle_log")(_merkle_log)
    registry(name="0007_answer_undelivered")(_answer_undelivered)
    registry(name="0008_session_handshake")(_session_handshake)
    registry(name="0009_payload_erased")(_payload_erased)
    registry(name="0010_leaf_columns")(_leaf_columns)
    return registry


def _initial(db: Database) -> None:
    db.table("journal_meta").create({"key": str, "value": str}, pk="key", not_null={"value"})
    db.table("event_kinds").create(
        {"kind": str, "kind_version": int, "kind_set_version": int, "description": str},
        pk=("kind", "kind_version"),
        not_null={"kind_set_version"},
    )
    db.table("event_kinds").insert_all(
        {
            "kind": kind,
            "kind_version": PAYLOAD_TYPES[kind].kind_version,
            "kind_set_version": 1,
            "description": PAYLOAD_TYPES[kind].description,
        }
        for kind in _V1_KINDS
    )
    nullable = {
        "call_id",
        "mcp_method_name",
        "gen_ai_tool_name",
        "jsonrpc_request_id",
        "http_response_status_code",
        "error_type",
        "duration_ms",
    }
    events = db.table("events")
    events.create(_EVENT_COLUMNS, pk="seq", not_null=set(COLUMNS) - nullable)
    for column in ("session_id", "call_id", "kind", "gen_ai_tool_name"):
        events.create_index([column], index_name=f"events_{column}")
    db.table("checkpoints").create(
        {
            "id": int,
            "journal_id": str,
            "seq": int,
            "head_hash": str,
            "ts_wall": str,
            "key_id": str,
            "signature": str,
        },
        pk="id",
        not_null={"journal_id", "seq", "head_hash", "ts_wall", "key_id", "signature"},
    )
    statements = [_EVENTS_APPEND_ONLY, _CHECKPOINTS_LINKED]
    for table in ("events", "checkpoints", *_KEYED_TABLES):
        statements += _immutable_triggers(table)
    statements += [_no_replace_trigger(t, match) for t, match in _KEYED_TABLES.items()]
    for statement in statements:
        db.execute(statement)
    for name, sql in VIEWS.items():
        db.create_view(name, sql.strip())
    db.execute("PRAGMA user_version = 1")


def _add_kind(db: Database, kind: str, kind_set_version: int) -> None:
    """Register an event kind of the payload types in ``event_kinds``, in its kind set."""
    db.table("event_kinds").insert(
        {
            "kind": kind,
            "kind_version": PAYLOAD_TYPES[kind].kind_version,
            "kind_set_version": kind_set_version,
            "description": PAYLOAD_TYPES[kind].description,
        }
    )


def _journal_gap(db: Database) -> None:
    """Kind set 2: ``journal_gap`` (what a failed journal lost, written once it recovers)."""
    _add_kind(db, "journal_gap", 2)
    db.execute("PRAGMA user_version = 2")


def _key_rotated(db: Database) -> None:
    """Kind set 3: ``key_rotated`` (Ed25519 checkpoints: a change of signing key is an event in
    the chain)."""
    _add_kind(db, "key_rotated", 3)
    db.execute("PRAGMA user_version = 3")


# Segments (0004): a segment after the first starts at journal_meta's segment_first_seq, chained
# to segment_prev_hash (the previous segment's head); a segment that names its successor
# (segment_next) takes no more events.
_SEGMENT_EVENTS_APPEND: Final = f"""
CREATE TRIGGER journal_events_append BEFORE INSERT ON events
BEGIN
  SELECT RAISE(ABORT, 'journal: this segment is closed, the journal goes on in the next one')
    WHERE EXISTS (SELECT 1 FROM journal_meta WHERE key = 'segment_next');
  SELECT RAISE(ABORT, 'journal: seq must continue the stream (previous seq + 1)')
    WHERE NEW.seq IS NOT IFNULL((SELECT MAX(seq) + 1 FROM events),
            IFNULL((SELECT CAST(value AS INTEGER) FROM journal_meta
                    WHERE key = 'segment_first_seq'), 1))
       OR typeof(NEW.seq) != 'integer';
  SELECT RAISE(ABORT, 'journal: prev_hash must equal the hash of the previous event')
    WHERE NEW.prev_hash IS NOT IFNULL((SELECT hash FROM events WHERE seq = NEW.seq - 1),
            IFNULL((SELECT value FROM journal_meta WHERE key = 'segment_prev_hash'),
                   '{GENESIS_HASH}'));
  SELECT RAISE(ABORT, 'journal: hash must be 64 lowercase hex digits')
    WHERE typeof(NEW.hash) != 'text' OR length(NEW.hash) != 64
       OR NEW.hash GLOB '*[^0-9a-f]*';
  SELECT RAISE(ABORT, 'journal: event belongs to another journal')
    WHERE NEW.journal_id IS NOT (SELECT value FROM journal_meta WHERE key = 'journal_id');
  SELECT RAISE(ABORT, 'journal: unknown event kind or kind_version')
    WHERE NOT EXISTS (SELECT 1 FROM event_kinds
                      WHERE kind = NEW.kind AND kind_version = NEW.kind_version);
END
"""


def _segments(db: Database) -> None:
    """Kind set 4: ``segment_started``; the append trigger learns where a segment starts.

    The trigger is replaced, not loosened: a file without segment rows in ``journal_meta`` (every
    journal before this version, and every first segment) still starts at seq 1 from genesis.
    """
    _add_kind(db, "segment_started", 4)
    db.execute("DROP TRIGGER journal_events_append")
    db.execute(_SEGMENT_EVENTS_APPEND)
    db.execute("PRAGMA user_version = 4")


def _segments_pruned(db: Database) -> None:
    """Kind set 5: ``segments_pruned`` (the only removal of journal data, journaled first)."""
    _add_kind(db, "segments_pruned", 5)
    db.execute("PRAGMA user_version = 5")


def _merkle_log(db: Database) -> None:
    """The Merkle log (see :mod:`journal._tlog`): ``event_leaves``, one row per event beside it
    (its salt, salted payload digest, and the tree hashes its append stored), and
    ``checkpoints.root_hash`` (the signed tree hash; NULL for a v1 checkpoint). Append-only like
    the rest. A journal is v2 only when its first file was made with them
    (``journal_meta.merkle_log``): an older file gains the table and stays v1."""
    db.table("event_leaves").create(
        {"seq": int, "salt": str, "payload_sha256": str, "tree_hashes": bytes},
        pk="seq",
        not_null={"salt", "payload_sha256", "tree_hashes"},
    )
    db.execute("ALTER TABLE checkpoints ADD COLUMN root_hash TEXT")
    for statement in [
        *_immutable_triggers("event_leaves"),
        _no_replace_trigger("event_leaves", "seq = NEW.seq"),
    ]:
        db.execute(statement)
    db.execute("PRAGMA user_version = 6")


def _answer_undelivered(db: Database) -> None:
    """Kind set 6: ``answer_undelivered`` (a journaled outcome the client never received)."""
    _add_kind(db, "answer_undelivered", 6)
    db.execute("PRAGMA user_version = 7")


def _session_handshake(db: Database) -> None:
    """Kind set 7: ``session_handshake`` (who the client is, journaled when it says so; the
    session starts before), and the ``sessions`` view reading the client from it."""
    _add_kind(db, "session_handshake", 7)
    db.execute("DROP VIEW IF EXISTS sessions")
    db.create_view("sessions", VIEWS["sessions"].strip())
    db.execute("PRAGMA user_version = 8")


# Erasure (0009): the one update the journal takes. An events row may have its payload replaced
# by the erased marker, and its leaf its salt emptied, only for a seq listed in ``erased_seqs``
# (written in the same transaction as, or after, the ``payload_erased`` event naming it), and
# only when nothing else of the row changes; a ``payload_erased`` event itself is never erased.
_ERASE_EVENTS: Final = f"""
CREATE TRIGGER journal_events_no_update BEFORE UPDATE ON events
BEGIN
  SELECT RAISE(ABORT, 'journal is append-only: UPDATE on events refused')
    WHERE NOT (NEW.payload IS '{ERASED_PAYLOAD}' AND OLD.payload IS NOT '{ERASED_PAYLOAD}'
               AND OLD.kind IS NOT 'payload_erased'
               AND EXISTS (SELECT 1 FROM erased_seqs WHERE seq = OLD.seq)
               AND {" AND ".join(f"NEW.{c} IS OLD.{c}" for c in COLUMNS if c != "payload")});
END
"""
_ERASE_LEAVES: Final = """
CREATE TRIGGER journal_event_leaves_no_update BEFORE UPDATE ON event_leaves
BEGIN
  SELECT RAISE(ABORT, 'journal is append-only: UPDATE on event_leaves refused')
    WHERE NOT (NEW.salt IS '' AND OLD.salt IS NOT ''
               AND EXISTS (SELECT 1 FROM erased_seqs WHERE seq = OLD.seq)
               AND NEW.seq IS OLD.seq AND NEW.payload_sha256 IS OLD.payload_sha256
               AND NEW.tree_hashes IS OLD.tree_hashes);
END
"""


def _payload_erased(db: Database) -> None:
    """Kind set 8: ``payload_erased``, the ``erased_seqs`` table (append-only: which seqs of
    this file were erased, and the seq of the event that named them), and the two update
    triggers replaced by ones that allow exactly an erasure (see :mod:`journal._erase`)."""
    _add_kind(db, "payload_erased", 8)
    db.table("erased_seqs").create({"seq": int, "erased_by": int}, pk="seq", not_null={"erased_by"})
    db.execute("DROP TRIGGER journal_events_no_update")
    db.execute("DROP TRIGGER journal_event_leaves_no_update")
    for statement in [
        _ERASE_EVENTS,
        _ERASE_LEAVES,
        *_immutable_triggers("erased_seqs"),
        _no_replace_trigger("erased_seqs", "seq = NEW.seq"),
    ]:
        db.execute(statement)
    db.execute("PRAGMA user_version = 9")


# Leaf columns in the events row (0010): an erasure may also empty the salt (and must, where the
# row holds one); the digest and stored hashes never change. A row of a file that keeps its
# leaves in event_leaves has NULL there, and keeps it.
_ERASE_EVENTS_WITH_LEAF: Final = f"""
CREATE TRIGGER journal_events_no_update BEFORE UPDATE ON events
BEGIN
  SELECT RAISE(ABORT, 'journal is append-only: UPDATE on events refused')
    WHERE NOT (NEW.payload IS '{ERASED_PAYLOAD}' AND OLD.payload IS NOT '{ERASED_PAYLOAD}'
               AND OLD.kind IS NOT 'payload_erased'
               AND EXISTS (SELECT 1 FROM erased_seqs WHERE seq = OLD.seq)
               AND {" AND ".join(f"NEW.{c} IS OLD.{c}" for c in COLUMNS if c != "payload")}
               AND NEW.salt IS (CASE WHEN OLD.salt IS NULL THEN NULL ELSE '' END)
               AND NEW.payload_sha256 IS OLD.payload_sha256
               AND NEW.tree_hashes IS OLD.tree_hashes);
END
"""


def _leaf_columns(db: Database) -> None:
    """The leaf columns in the events row: ``salt``, ``payload_sha256`` and ``tree_hashes``
    (nullable), so a v2 append is one B-tree insert, not two. Only a file made from now on uses
    them (``journal_meta.leaf_store = 'events'``, see :func:`ensure_identity`); an older file
    keeps ``event_leaves``. The events update trigger is replaced by one refusing the same and
    any change of the new columns but an erasure's emptied salt."""
    for column, kind in (("salt", "TEXT"), ("payload_sha256", "TEXT"), ("tree_hashes", "BLOB")):
        db.execute(f"ALTER TABLE events ADD COLUMN {column} {kind}")
    db.execute("DROP TRIGGER journal_events_no_update")
    db.execute(_ERASE_EVENTS_WITH_LEAF)
    db.execute("PRAGMA user_version = 10")


def create_private_file(path: Path) -> int:
    """Create (or open) the journal file with mode 0600 before SQLite sees it; return its fd.

    The mode is set with fchmod as well, so a permissive umask cannot widen it; SQLite gives the
    ``-wal`` and ``-shm`` files the database file's mode, and stale ones are tightened here.
    """
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)  # a regular file only is chmodded
        try:
            for suffix in ("-wal", "-shm"):
                sidecar = Path(f"{path}{suffix}")
                if sidecar.exists():
                    os.chmod(sidecar, 0o600)
        except BaseException:
            os.close(fd)
            raise
    except OSError as exc:
        raise classify_os_error(exc) from exc
    return fd


def connect_writer(
    path: Path, *, max_bytes: int | None = None, busy_timeout: float = BUSY_TIMEOUT_S
) -> sqlite3.Connection:
    """Open the writer's connection: WAL, synchronous=FULL, busy timeout, schema migrated.

    The connection runs in autocommit mode; the writer issues ``BEGIN IMMEDIATE`` itself.
    """
    try:
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
    except sqlite3.Error as exc:
        raise classify_sqlite_error(exc) from exc
    try:
        (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode != "wal":
            raise JournalUnavailable("io_error", f"WAL mode unavailable (journal_mode={mode})")
        conn.execute("PRAGMA synchronous=FULL")
        if max_bytes is not None:
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA max_page_count={max(1, max_bytes // page_size)}")
        _migrate(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise classify_sqlite_error(exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise JournalFormatError(
            f"journal schema version {version} is newer than this code's ({SCHEMA_VERSION})"
        )
    tables = {
        name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if tables and "_sqlite_migrations" not in tables:
        raise JournalFormatError("the file is an SQLite database but not a journal")
    if tables and version == SCHEMA_VERSION:
        return  # every migration ran (see the module docstring)
    from sqlite_utils import Database

    db = Database(conn, execute_plugins=False)
    # The writer's file lock serialises writers, so pending() cannot race another migration.
    registry = migrations()
    if registry.pending(db):
        registry.apply(db)


def ensure_identity(
    conn: sqlite3.Connection, journal_id: str | None, *, merkle: bool = True
) -> str:
    """Record the journal's id on first open (and, with ``merkle``, that it is a v2 Merkle
    log: ``journal_meta.merkle_log``, keeping its leaf columns in the events row:
    ``journal_meta.leaf_store``); refuse a different id later."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT value FROM journal_meta WHERE key = 'journal_id'").fetchone()
        if row is None:
            stored = journal_id or str(uuid.uuid4())
            conn.executemany(
                "INSERT INTO journal_meta (key, value) VALUES (?, ?)",
                [
                    ("journal_id", stored),
                    ("created_at", format_wall(datetime.now(UTC))),
                    ("canonical_encoding", "sorted-key compact JSON, sha256 chain, v1"),
                    *(
                        [("merkle_log", "rfc6962"), (LEAF_STORE_KEY, LEAVES_IN_EVENTS)]
                        if merkle
                        else []
                    ),
                ],
            )
        else:
            (stored,) = row
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if journal_id is not None and journal_id != stored:
        raise JournalFormatError(f"the journal's id is {stored!r}, not {journal_id!r}")
    return str(stored)


def connect_reader(path: Path) -> sqlite3.Connection:
    """Open a read-only connection (``mode=ro`` URI) that never takes the write lock."""
    if not path.exists():
        raise FileNotFoundError(f"no journal at {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA query_only=1")
        tables = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    except sqlite3.Error as exc:
        raise JournalFormatError(f"cannot read {path} as a journal: {exc}") from exc
    if "events" not in tables or "journal_meta" not in tables:
        conn.close()
        raise JournalFormatError(f"{path} is not an initialised journal")
    return conn
