"""Read-only access to a journal: events in order, filtered, streamed with constant memory.

A reader opens the file with a ``mode=ro`` URI and never takes the write lock, so it can run
beside a live writer (each query sees one consistent snapshot).
"""

from __future__ import annotations

import functools
import itertools
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import msgspec

from ._canonical import COLUMNS, GENESIS_HASH, ROW_OF, Row, as_row, row_problem
from ._checkpoint import Checkpoint, checkpoint_of
from ._errors import JournalFormatError, undecodable
from ._events import ERASED_PAYLOAD, PAYLOAD_TYPES, Payload, Record
from ._schema import LEAF_STORE_KEY, LEAVES_IN_EVENTS, connect_reader
from ._segments import SegmentInfo
from ._tlog import Stored, leaf_bytes, stored_lookup, stored_of

__all__ = ["Reader", "decode_row", "open_reader"]

_SELECT: Final = f"SELECT {', '.join(COLUMNS)} FROM events"
# The rows with their leaf columns, by the file's leaf store (journal._tlog.leaf_store): a file
# made with them in the events row reads one table, an older one joins event_leaves.
_SELECT_LEAVES: Final = {
    "events": f"SELECT {', '.join(COLUMNS)}, salt, payload_sha256, tree_hashes FROM events e",
    "event_leaves": (
        f"SELECT {', '.join('e.' + c for c in COLUMNS)}, l.salt, l.payload_sha256, l.tree_hashes"
        " FROM events e LEFT JOIN event_leaves l ON l.seq = e.seq"
    ),
}
_DECODERS: Final[dict[tuple[str, int], msgspec.json.Decoder[Any]]] = {
    (kind, t.kind_version): msgspec.json.Decoder(t) for kind, t in PAYLOAD_TYPES.items()
}
_ANY_DECODER: Final = msgspec.json.Decoder()
# Where a row's payload text is: a Record holds the decoded payload just before it.
_PAYLOAD: Final = COLUMNS.index("payload")
# Why a payload nested deeper than the decoder's stack does not decode.
TOO_DEEP: Final = "payload is nested too deeply to decode"


def decode_payload(kind: str, kind_version: int, text: str) -> Payload | dict[str, Any]:
    """The typed payload of a known kind and version, else the JSON object; raises on bad JSON.
    An erased payload (:mod:`journal._erase`) is the object ``{"erased": true}``."""
    if text == ERASED_PAYLOAD:
        return {"erased": True}
    decoder = _DECODERS.get((kind, kind_version))
    try:
        if decoder is not None:
            payload: Payload = decoder.decode(text)
            return payload
        value = _ANY_DECODER.decode(text)
    except RecursionError as exc:  # a hostile file's [[[[…: bad JSON like any other
        raise msgspec.DecodeError(TOO_DEEP) from exc
    if not isinstance(value, dict):
        raise msgspec.ValidationError("payload is not a JSON object")
    return value


def decode_row(row: Row) -> Record:
    """A stored row as a Record; JournalFormatError if its payload won't decode."""
    try:
        payload = decode_payload(row.kind, row.kind_version, row.payload)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
        raise JournalFormatError(f"event {row.seq}: payload does not decode: {exc}") from exc
    return record_from_row(row, payload)


def record_from_row(row: Sequence[Any], payload: Any, *, checked: bool = True) -> Record:
    """A stored row (a Row, or a tuple in COLUMNS order) with its payload already decoded, as a
    Record; JournalFormatError if a column holds what no bridge writes (``row_problem``: the
    analyses compute with the columns; verify reports it as row_malformed). Not ``checked``:
    for a caller that has every row checked otherwise (``report``, by verify beside it)."""
    row = as_row(row)
    problem = row_problem(row) if checked else None
    if problem is not None:
        raise JournalFormatError(f"event {row.seq!r}: {problem} (verify: row_malformed)")
    # The columns in order, the decoded payload before its text (Record's field order).
    fields: tuple[Any, ...] = (*row[:_PAYLOAD], payload, *row[_PAYLOAD:])
    return Record(*fields)


class _Undecodable(bytes):
    """A text column's bytes that are not UTF-8 (see ``Reader._range``)."""


def _lenient_text(data: bytes) -> str | bytes:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return _Undecodable(data)


class Reader:
    """A journal opened read-only. Use as a context manager, or call close()."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
        self.journal_id: str | None = meta.get("journal_id")
        self.created_at: str | None = meta.get("created_at")
        # Where the file sits in a journal rolled over into several (see journal._segments).
        self.segment = SegmentInfo.from_meta(meta)
        (self.schema_version,) = conn.execute("PRAGMA user_version").fetchone()
        # A v2 journal: an RFC 6962 Merkle log besides the chain (journal._tlog); v1: chain only.
        self.merkle = meta.get("merkle_log") is not None
        # Where its leaf columns are: the events row ("events") or the side table.
        in_events = meta.get(LEAF_STORE_KEY) == LEAVES_IN_EVENTS
        self.leaf_store: str | None = (
            None if not self.merkle else "events" if in_events else "event_leaves"
        )
        self._select_leaves = _SELECT_LEAVES[self.leaf_store or "event_leaves"]
        columns = {
            name for (name,) in conn.execute("SELECT name FROM pragma_table_info('checkpoints')")
        }
        self._root_column = "root_hash" if "root_hash" in columns else "NULL"
        self._lookup: Callable[[int], bytes | None] | None = None

    @property
    def log_version(self) -> int:
        """2 for a Merkle log with proofs, 1 for a chain only."""
        return 2 if self.merkle else 1

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last event; (0, 64 zeros) when the journal is empty."""
        sql = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
        row = self._conn.execute(sql).fetchone()
        if row is None:
            return (0, GENESIS_HASH)
        seq, digest = row
        return (int(seq), str(digest))

    def count(self) -> int:
        (count,) = self._conn.execute("SELECT count(*) FROM events").fetchone()
        return int(count)

    def rows(self, *, since_seq: int = 0, until_seq: int | None = None) -> Iterator[Row]:
        """Raw rows (:class:`journal.Row`) with since_seq < seq <= until_seq, in seq order."""
        return map(ROW_OF, self._range(_SELECT, "seq", since_seq, until_seq))

    def stored_rows(
        self, *, since_seq: int = 0, until_seq: int | None = None, leaves: bool = True
    ) -> Iterator[Stored]:
        """The rows of :meth:`rows`, each with its leaf (salt, payload digest, stored hashes) as
        :class:`journal._tlog.TreeCheck` reads them: None in a v1 journal, where a leaf is
        missing, or without ``leaves``."""
        values = self.stored_values(since_seq=since_seq, until_seq=until_seq, leaves=leaves)
        return map(functools.partial(stored_of, None), values)  # NULL leaf columns: no leaf

    def stored_values(
        self, *, since_seq: int = 0, until_seq: int | None = None, leaves: bool = True
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of :meth:`stored_rows` as sqlite3 reads them: the 17 COLUMNS, then salt,
        payload digest and stored hashes (NULL where :meth:`stored_rows` gives no leaf), for
        :class:`journal.IntegrityPass`."""
        if not (leaves and self.merkle):
            select = f"SELECT {', '.join(COLUMNS)}, NULL, NULL, NULL FROM events e"
            return self._range(select, "e.seq", since_seq, until_seq)
        return self._range(self._select_leaves, "e.seq", since_seq, until_seq)

    def _range(
        self, select: str, seq: str, since_seq: int, until_seq: int | None
    ) -> Iterator[tuple[Any, ...]]:
        """The rows ``select`` reads with since_seq < seq <= until_seq, in seq order. A row
        with a text that is not UTF-8 (which sqlite3 refuses to read, quoting it) comes with
        that text as bytes, what a BLOB reads as and every check refuses there: a hostile
        file is read to its end, and no error quotes what it holds."""
        sql = f"{select} WHERE {seq} > ?" + ("" if until_seq is None else f" AND {seq} <= ?")
        sql += f" ORDER BY {seq}"
        since = since_seq
        while True:
            params = [since] if until_seq is None else [since, until_seq]
            try:  # through a chain: ``yield from`` would close the cursor on an early stop
                yield from itertools.chain(self._conn.execute(sql, params))
                return
            except sqlite3.OperationalError as exc:
                if not undecodable(exc):
                    raise
            # The rows before it were given: read on from ``since`` to it, texts leniently.
            self._conn.text_factory = _lenient_text
            try:
                bad = next(
                    row
                    for row in self._conn.execute(sql, params)
                    if any(type(v) is _Undecodable for v in row)
                )
            finally:
                self._conn.text_factory = str
            yield tuple(bytes(v) if type(v) is _Undecodable else v for v in bad)
            since, *_ = bad

    def leaf(self, seq: int) -> bytes | None:
        """The Merkle leaf of the event at ``seq`` (a v2 journal), or None."""
        cursor = self._conn.cursor()
        cursor.row_factory = stored_of
        found: Stored | None = cursor.execute(
            self._select_leaves + " WHERE e.seq = ?", (seq,)
        ).fetchone()
        if found is None or found.leaf is None or found.leaf.payload_sha256 is None:
            return None
        return leaf_bytes(found.event, found.leaf.payload_sha256)

    def stored_hash(self, index: int) -> bytes | None:
        """The stored Merkle hash at ``index`` (Go tlog's storage index), or None."""
        if not self.merkle:
            return None
        if self._lookup is None:
            self._lookup = stored_lookup(self._conn)
        return self._lookup(index)

    def call_seqs(self, call_id: str) -> list[int]:
        """The seqs of a call's events here, in order."""
        cursor = self._conn.execute(
            "SELECT seq FROM events WHERE call_id = ? ORDER BY seq", (call_id,)
        )
        return [int(seq) for (seq,) in cursor]

    def events(
        self,
        *,
        session_id: str | None = None,
        call_id: str | None = None,
        kind: str | Iterable[str] | None = None,
        tool: str | None = None,
        since_seq: int = 0,
        until_seq: int | None = None,
        decode: Callable[[Row], Record] = decode_row,
    ) -> Iterator[Record]:
        """Events in seq order matching every filter given (``tool`` is ``gen_ai_tool_name``);
        each row made a Record by ``decode`` (a caller that goes on past a payload that does
        not decode gives its own)."""
        clauses: list[str] = ["seq > ?"]
        params: list[object] = [since_seq]
        for column, value in (
            ("session_id", session_id),
            ("call_id", call_id),
            ("gen_ai_tool_name", tool),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if until_seq is not None:
            clauses.append("seq <= ?")
            params.append(until_seq)
        if kind is not None:
            kinds = [kind] if isinstance(kind, str) else list(kind)
            clauses.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        cursor = self._conn.execute(f"{_SELECT} WHERE {' AND '.join(clauses)} ORDER BY seq", params)
        for row in map(ROW_OF, cursor):
            yield decode(row)

    def checkpoints(self) -> list[Checkpoint]:
        """The checkpoints stored in the journal, oldest first."""
        cursor = self._conn.execute(
            "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature,"
            f" {self._root_column} FROM checkpoints ORDER BY id"
        )
        return [checkpoint_of(r) for r in cursor]

    def tree_checkpoints(
        self, *, seqs: Iterable[int] = (), latest: bool = False
    ) -> list[Checkpoint]:
        """A v2 journal's signed Merkle checkpoints: those at ``seqs``, and the latest stored
        here (``latest``); without reading the whole table (a prove's O(log n) reads)."""
        if self._root_column == "NULL":
            return []
        select = (
            "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash"
            " FROM checkpoints WHERE root_hash IS NOT NULL"
        )
        rows = []
        if latest:
            rows += self._conn.execute(f"{select} ORDER BY id DESC LIMIT 1").fetchall()
        for seq in set(seqs):
            rows += self._conn.execute(f"{select} AND seq = ? LIMIT 1", (seq,)).fetchall()
        return [checkpoint_of(r) for r in rows]

    def recorded_keys(self) -> list[tuple[int, str]]:
        """(seq, verifier key) of each signing key the journal names, oldest first: the
        ``signing_key`` it was created with (seq 0; a later segment's: the seq it follows),
        then each ``key_rotated`` event."""
        keys: list[tuple[int, str]] = []
        meta = self._conn.execute(
            "SELECT value FROM journal_meta WHERE key = 'signing_key'"
        ).fetchone()
        if meta is not None:
            # A later segment names the key in force when it was made, from its link on.
            at = self.segment.first_seq - 1 if self.segment.index > 1 else 0
            (named,) = meta
            keys.append((at, str(named)))
        cursor = self._conn.execute(
            "SELECT seq, payload FROM events WHERE kind = 'key_rotated' ORDER BY seq"
        )
        for seq, payload in cursor:
            try:
                keys.append((int(seq), str(msgspec.json.decode(payload)["vkey"])))
            except (msgspec.DecodeError, KeyError, TypeError, RecursionError):
                continue  # payload_invalid is reported by verify's payload check
        return keys

    def first_row(self) -> Row | None:
        """The file's first event as a raw row (a later segment's ``segment_started``)."""
        row = self._conn.execute(_SELECT + " ORDER BY seq LIMIT 1").fetchone()
        return None if row is None else ROW_OF(row)

    def hash_at(self, seq: int) -> str | None:
        """The stored hash of the event at seq (GENESIS for 0), or None if there is none.

        A later segment also knows the hash of the event just before its first (its link).
        """
        if seq == 0:
            return GENESIS_HASH
        if seq == self.segment.first_seq - 1 and self.segment.prev_hash is not None:
            return self.segment.prev_hash
        row = self._conn.execute("SELECT hash FROM events WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            return None
        (digest,) = row
        return str(digest)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_reader(path: str | os.PathLike[str]) -> Reader:
    """Open a journal read-only (FileNotFoundError if absent, JournalFormatError if not one)."""
    path = Path(path)
    conn = connect_reader(path)
    try:
        return Reader(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise JournalFormatError(f"cannot read {path} as a journal: {exc}") from exc
