"""The journal as a Merkle transparency log (v2): leaves, stored hashes, and their checks.

A v2 journal (``journal_meta.merkle_log = 'rfc6962'``, set when the journal's first file is made)
is an RFC 6962 Merkle log besides its hash chain. Rules (stable; any script recomputes them):

* Leaf ``i`` is the canonical bytes of the event with ``seq = i + 1``: one JSON object, keys
  sorted, compact, UTF-8, holding every column of ``journal.COLUMNS`` except ``payload``,
  ``prev_hash`` and ``hash``, plus ``payload_sha256``: lowercase hex ``SHA-256(salt ||
  payload)``, where ``salt`` is 16 fresh random bytes per event and ``payload`` the stored
  canonical text (UTF-8). Salt and digest are stored with the event (its leaf columns, below):
  the leaf commits to the payload, not to its bytes, so a payload can be erased later with every
  proof intact, and a leaf shown to a third party reveals nothing of the payload.
* Leaf and node hashes, the tree hash and the proofs are :mod:`journal._merkle`'s (RFC 6962).
  The stored hashes are Go tlog's (storage index = its ``StoredHashIndex``): the hashes the
  append of event ``seq`` stores (its leaf hash, then each subtree it completes; about two per
  event) are the ``tree_hashes`` of that seq's leaf columns, 32 bytes each, from index
  :func:`stored_index_of` ``(seq)`` on, in the event's own transaction. A later segment also
  holds the border of the tree it continues (``journal_meta.tlog_border``: hex of one hash per
  set bit of its first seq - 1, largest subtree first), so a proof about its events needs no
  earlier file.
* Where a file keeps its leaf columns (``salt``, ``payload_sha256``, ``tree_hashes``) is its
  *leaf store*, fixed when the file is made: a file made with ``journal_meta.leaf_store =
  'events'`` (schema 10 on) holds them in the ``events`` row itself, one B-tree insert per
  event; a file made before (schemas 6 to 9) keeps them in the side table ``event_leaves``, one
  row per event, whoever writes it later (a segment it rolls over into is a new file, made
  with them in the row). Both are read the same way (:func:`leaf_store`,
  :func:`stored_lookup`, ``Reader.stored_rows``); the other store's columns stay empty.
* A v2 checkpoint signs the tree hash at its size (``checkpoints.root_hash``; the note's third
  line, as c2sp.org/tlog-checkpoint defines it); ``head_hash`` still names the chain head.

A v1 journal (written before, or continuing a file written before) is chain only: no proofs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from ._canonical import COLUMNS, ROW_OF, Row, as_row, canonical_bytes
from ._checkpoint import Checkpoint
from ._events import ERASED_PAYLOAD
from ._merkle import (
    Frontier,
    HashReader,
    ProofError,
    frontier_indexes,
    stored_hash_index,
)
from ._schema import INSERT_EVENT, INSERT_EVENT_LEAF, LEAF_STORE_KEY, LEAVES_IN_EVENTS

__all__ = [
    "BORDER_KEY",
    "INSERT_LEAF",
    "LEAF_SALT_BYTES",
    "MERKLE_LOG",
    "Leaf",
    "LeafRow",
    "Stored",
    "border_text",
    "checkpoint_row",
    "insert_stored",
    "leaf_bytes",
    "leaf_extras",
    "leaf_store",
    "load_border",
    "payload_digest",
    "record_of_index",
    "start_tree",
    "stored_lookup",
    "stored_of",
    "tree_checkpoint",
    "tree_rows",
]

MERKLE_LOG: Final = "rfc6962"  # journal_meta.merkle_log of a v2 journal
LEAF_SALT_BYTES: Final = 16
INSERT_LEAF: Final = (
    "INSERT INTO event_leaves (seq, salt, payload_sha256, tree_hashes) VALUES (?, ?, ?, ?)"
)
BORDER_KEY: Final = "tlog_border"  # journal_meta: a later segment's copy of the tree's border
LeafRow = tuple[int, str, str, bytes]  # (seq, salt hex, payload_sha256 hex, stored hashes)


class Leaf(NamedTuple):
    """A v2 event's leaf columns: its salt, salted payload digest (both hex) and the
    Merkle hashes its append stored (32 bytes each, joined)."""

    salt: str
    payload_sha256: str
    tree_hashes: bytes


class Stored(NamedTuple):
    """An event row with its leaf (None: a v1 journal's, or a v2 row whose leaf is missing), as
    the writer builds it and :meth:`journal.Reader.stored_rows` reads it."""

    event: Row
    leaf: Leaf | None


_WIDTH: Final = len(COLUMNS)
# Made in C, like ROW_OF (no Python frame per row read: verify reads every one).
_LEAF_OF: Final[Callable[[Iterable[Any]], Leaf]] = functools.partial(tuple.__new__, Leaf)
_STORED_OF: Final[Callable[[tuple[Row, Leaf | None]], Stored]] = functools.partial(
    tuple.__new__, Stored
)


def stored_of(_cursor: sqlite3.Cursor | None, values: tuple[Any, ...]) -> Stored:
    """A ``row_factory`` for the events row with its leaf columns: the 17 COLUMNS, then salt,
    payload digest and stored hashes (:data:`journal._reader` selects them in this order);
    ``Reader.stored_rows`` maps it over ``Reader.stored_values`` with no cursor."""
    salt = values[_WIDTH]
    return _STORED_OF(
        (ROW_OF(values[:_WIDTH]), None if salt is None else _LEAF_OF(values[_WIDTH:]))
    )


class _Leaf(msgspec.Struct):
    """The leaf image of a row; fields in sorted key order, so encoding needs no sort."""

    call_id: str | None
    duration_ms: float | None
    error_type: str | None
    gen_ai_tool_name: str | None
    http_response_status_code: int | None
    journal_id: str
    jsonrpc_request_id: str | None
    kind: str
    kind_version: int
    mcp_method_name: str | None
    payload_sha256: str
    seq: int
    session_id: str
    ts_mono_ns: int
    ts_wall: str


_encoder: Final = msgspec.json.Encoder()
_sha256: Final = hashlib.sha256


def payload_digest(salt: bytes, payload: str | bytes) -> str:
    data = payload.encode() if isinstance(payload, str) else payload
    return hashlib.sha256(salt + data).hexdigest()


def leaf_bytes(row: Sequence[Any], digest: str) -> bytes:
    """The leaf of a row (a Row, or a tuple in COLUMNS order) whose payload digest is
    ``digest``."""
    row = as_row(row)
    return _encoder.encode(
        _Leaf(
            row.call_id,
            row.duration_ms,
            row.error_type,
            row.gen_ai_tool_name,
            row.http_response_status_code,
            row.journal_id,
            row.jsonrpc_request_id,
            row.kind,
            row.kind_version,
            row.mcp_method_name,
            digest,
            row.seq,
            row.session_id,
            row.ts_mono_ns,
            row.ts_wall,
        )
    )


def checkpoint_row(cp: Checkpoint) -> tuple[str, int, str, str, str, str, str | None]:
    """A checkpoint as ``journal._schema.INSERT_CHECKPOINT`` stores it."""
    return (cp.journal_id, cp.seq, cp.head_hash, cp.ts_wall, cp.key_id, cp.signature, cp.root_hash)


def record_of_index(index: int) -> int:
    """The record (0-based) whose append stored hash ``index`` (Go tlog's SplitStoredHashIndex)."""
    n = index // 2
    at = stored_hash_index(0, n)
    while True:
        following = at + 1 + ((n + 1) & -(n + 1)).bit_length() - 1
        if following > index:
            return n
        n, at = n + 1, following


_salts: list[bytes] = []


def _salt() -> bytes:
    """A fresh random salt, from a pool refilled 256 salts at a time (one syscall).

    Taken with one ``list.pop``, atomic under the GIL: the writer's thread and an erasure's
    (retention's) build rows at once, and a salt read, then cut from a shared buffer in two
    steps, was now and then given to both (7 in 400,000 salts from 8 threads). A refill races
    harmlessly: each thread's pool is fresh, and a salt is popped from one pool once."""
    global _salts
    try:
        return _salts.pop()
    except IndexError:
        pool = os.urandom(LEAF_SALT_BYTES * 256)
        salts = [pool[i : i + LEAF_SALT_BYTES] for i in range(0, len(pool), LEAF_SALT_BYTES)]
        salt = salts.pop()
        _salts = salts
        return salt


_PAYLOAD_KEY: Final = b',"payload":'
_PREV_KEY: Final = b',"prev_hash":'
_SEQ_KEY: Final = b',"seq":'
_DIGEST_KEY: Final = b',"payload_sha256":"'


def leaf_extras(row: Row, tree: Frontier, image: bytes | None = None) -> Leaf:
    """A v2 row's leaf columns, appended to ``tree`` (the built border): its salt (hex), salted
    payload digest (hex) and the hashes its append stores (from :func:`stored_index_of`).

    ``image`` is the row's canonical encoding (``journal.canonical_bytes``, which the writer
    has just hashed for the chain), else it is made here. The leaf is cut from it rather than
    encoded again: the two objects hold the same values in the same sorted order, but for the
    leaf's ``payload_sha256`` in place of ``payload`` and ``prev_hash`` (adjacent keys in both).
    Before ``,"payload":`` come only keys, numbers, ``null`` and JSON strings (in which a ``"``
    is always escaped), so its first occurrence is the key; after the payload come only such
    values too, so the last ``,"prev_hash":`` is that key and the first ``,"seq":`` after it
    the next one, whatever the values hold. The bytes between the payload's key and
    ``prev_hash``'s are the stored payload text, hashed here for the digest.
    """
    if image is None:
        image = canonical_bytes(row)
    start = image.index(_PAYLOAD_KEY)
    prev = image.rindex(_PREV_KEY)
    salt = _salt()
    digest = _sha256(salt + image[start + len(_PAYLOAD_KEY) : prev]).hexdigest()
    end = image.index(_SEQ_KEY, prev)
    node = b"".join((b"\x00", image[:start], _DIGEST_KEY, digest.encode(), b'"', image[end:]))
    # In C, like ROW_OF: no Python frame for the NamedTuple's __new__.
    return _LEAF_OF((salt.hex(), digest, b"".join(tree.append(_sha256(node).digest()))))


def stored_index_of(seq: int) -> int:
    """The storage index of the leaf hash of the event at ``seq``."""
    return stored_hash_index(0, seq - 1)


def leaf_store(conn: sqlite3.Connection) -> str:
    """The table holding the leaf columns of the file ``conn`` opens (``events`` for a file made
    with them in the events row, else ``event_leaves``)."""
    row = conn.execute("SELECT value FROM journal_meta WHERE key = ?", (LEAF_STORE_KEY,)).fetchone()
    return "events" if row is not None and tuple(row) == (LEAVES_IN_EVENTS,) else "event_leaves"


def insert_stored(conn: sqlite3.Connection, rows: Sequence[Stored], store: str) -> None:
    """Insert built rows with their leaves (a v1 journal's: none) into a file whose leaf store
    is ``store`` (:func:`leaf_store`): one statement per row in the events row's store."""
    if store == "events" and rows and rows[0].leaf is not None:
        conn.executemany(
            INSERT_EVENT_LEAF, [event + leaf for event, leaf in rows if leaf is not None]
        )
        return
    conn.executemany(INSERT_EVENT, [event for event, _ in rows])
    leaves = tree_rows(rows)
    if leaves:
        conn.executemany(INSERT_LEAF, leaves)


def tree_rows(rows: Sequence[Stored]) -> list[LeafRow]:
    """The ``event_leaves`` rows of built v2 rows (their leaves as :func:`leaf_extras` gave
    them)."""
    return [
        (event.seq, leaf.salt, leaf.payload_sha256, leaf.tree_hashes)
        for event, leaf in rows
        if leaf is not None
    ]


def border_text(tree: Frontier) -> str:
    """The border of a tree as ``journal_meta.tlog_border`` holds it (hex, largest first)."""
    return b"".join(tree.hashes).hex()


def stored_lookup(conn: sqlite3.Connection) -> Callable[[int], bytes | None]:
    """The stored hash at a storage index in one file (None when not here): from the leaf
    columns of the event that stored it, else from the file's border copy."""
    border: dict[int, bytes] | None = None
    select = f"SELECT tree_hashes FROM {leaf_store(conn)} WHERE seq = ?"

    def lookup(index: int) -> bytes | None:
        nonlocal border
        record = record_of_index(index)
        offset = index - stored_hash_index(0, record)
        (hashes,) = conn.execute(select, (record + 1,)).fetchone() or (None,)
        if hashes is not None:
            found = bytes(hashes)[32 * offset : 32 * offset + 32]
            return found if len(found) == 32 else None
        if border is None:
            border = _border(conn)
        return border.get(index)

    return lookup


def _border(conn: sqlite3.Connection) -> dict[int, bytes]:
    """A later segment's border copy, by storage index ({} for a first segment)."""
    meta = dict(
        conn.execute(
            "SELECT key, value FROM journal_meta WHERE key IN (?, 'segment_first_seq')",
            (BORDER_KEY,),
        ).fetchall()
    )
    if BORDER_KEY not in meta:
        return {}
    try:
        size = int(meta.get("segment_first_seq", 1)) - 1
        raw = bytes.fromhex(str(meta[BORDER_KEY]))
    except ValueError:
        return {}
    indexes = [index for _, index in frontier_indexes(size)]
    return {index: raw[32 * i : 32 * i + 32] for i, index in enumerate(indexes)}


def load_border(conn: sqlite3.Connection, size: int) -> Frontier:
    return Frontier.read(size, files_reader([(1, stored_lookup(conn))]))


def files_reader(files: Sequence[tuple[int, Callable[[int], bytes | None]]]) -> HashReader:
    """A HashReader over a journal's segment files, ``(first seq, stored-hash lookup)`` in seq
    order: a hash is read from the file holding the event that stored it, else from a later
    file's copy of the border (a pruned segment's hashes survive there)."""
    firsts = [first for first, _ in files]

    def read(indexes: Sequence[int]) -> list[bytes]:
        out: list[bytes] = []
        for index in indexes:
            seq = record_of_index(index) + 1
            owner = max((i for i, first in enumerate(firsts) if first <= seq), default=0)
            for _, lookup in files[owner:]:
                found = lookup(index)
                if found is not None:
                    out.append(found)
                    break
            else:
                raise ProofError(
                    f"the stored hash of event {seq} is in none of the journal's files here"
                )
        return out

    return read


Report = Callable[[int | None, Any, str], None]


def tree_checkpoint(cp: Checkpoint, stored_hash: str | None) -> Checkpoint:
    """A checkpoint given as a bare signed note for a v2 journal, whose root line is not the
    chain head there (``stored_hash``): it claims the tree hash, and is checked as such (the
    journal's chain head stands in for the head hash it does not name)."""
    if cp.root_hash is not None or cp.scheme != "ed25519" or cp.head_hash == stored_hash:
        return cp
    return msgspec.structs.replace(
        cp, root_hash=cp.head_hash, head_hash=stored_hash or cp.head_hash
    )


def start_tree(
    report: Report,
    first_seq: int,
    start_seq: int,
    lookup: Callable[[int], bytes | None],
    checkpoints: Sequence[tuple[str, Checkpoint]],
    journal_id: str | None,
) -> TreeCheck:
    """A :class:`TreeCheck` from ``start_seq`` (the tree's border there read from the file
    whose first event is ``first_seq``), checking the signed roots of the journal's
    ``checkpoints`` (another journal's are the chain verifier's finding)."""
    roots = [
        (label, cp.seq, cp.root_hash)
        for label, cp in checkpoints
        if cp.root_hash is not None and cp.seq >= start_seq and cp.journal_id == journal_id
    ]
    try:
        frontier = Frontier.read(start_seq, files_reader([(first_seq, lookup)]))
        broken = False
    except ProofError:
        report(start_seq + 1, "tree_hash_mismatch", "the tree's stored border is missing here")
        frontier, broken = Frontier(), True
    tree = TreeCheck(report, frontier, roots)
    tree.broken = broken
    if not broken:
        tree.check_roots_at(start_seq)
    return tree


class TreeCheck:
    """Verifies a v2 journal's tree beside :class:`journal.ChainVerifier`, in one pass.

    ``feed(row, leaf)`` takes a row with its leaf columns (``Reader.stored_rows(leaves=True)``:
    salt, payload digest and stored hashes): the digest must be the salted payload's, the
    leaf must exist, and the hashes its append stored must be the recomputed ones; a
    checkpoint's signed root must be the tree hash at its size. Rules: ``leaf_missing``,
    ``payload_digest_mismatch``, ``tree_hash_mismatch``, ``checkpoint_root_mismatch``.
    """

    def __init__(
        self, report: Report, frontier: Frontier, roots: Sequence[tuple[str, int, str]]
    ) -> None:
        self._report = report
        self.frontier = frontier
        self._roots: dict[int, list[tuple[str, str]]] = {}
        for label, seq, root in roots:
            self._roots.setdefault(seq, []).append((root, label))
        self._stored: dict[int, bytes] = {}
        self._pending: list[tuple[int, bytes]] = []
        self.broken = False  # a leaf could not be recomputed: later roots are not comparable

    def check_roots_at(self, seq: int) -> None:
        for root, label in self._roots.get(seq, ()):
            if self.broken:
                continue
            if self.frontier.root().hex() != root:
                self._report(
                    seq,
                    "checkpoint_root_mismatch",
                    f"{label}: its signed Merkle root is not the tree hash of the journal at "
                    f"size {seq}",
                )

    def feed(self, row: Row, leaf: Leaf | None) -> None:
        if self.broken:
            return
        seq = row.seq
        frontier = self.frontier
        if not isinstance(seq, int) or seq != frontier.size + 1:
            self.broken = True  # the chain reports the gap; later roots are not comparable
            return
        if leaf is None or leaf.payload_sha256 is None or not isinstance(leaf.tree_hashes, bytes):
            self._report(seq, "leaf_missing", "a v2 journal's event has no leaf (salt, digest)")
            self.broken = True
            return
        salt, digest, stored = leaf
        try:
            text = row.payload
            data = text.encode() if isinstance(text, str) else text
            if _sha256(bytes.fromhex(salt) + data).hexdigest() != digest and not (
                salt == "" and text == ERASED_PAYLOAD  # see journal._erase
            ):
                self._report(
                    seq,
                    "payload_digest_mismatch",
                    "the payload is not the one its leaf commits to (sha256(salt || payload))",
                )
            image = _encoder.encode(  # leaf_bytes, inlined: this runs for every event verified
                _Leaf(
                    row.call_id,
                    row.duration_ms,
                    row.error_type,
                    row.gen_ai_tool_name,
                    row.http_response_status_code,
                    row.journal_id,
                    row.jsonrpc_request_id,
                    row.kind,
                    row.kind_version,
                    row.mcp_method_name,
                    digest,
                    seq,
                    row.session_id,
                    row.ts_mono_ns,
                    row.ts_wall,
                )
            )
        except (TypeError, ValueError, AttributeError, msgspec.EncodeError):
            self._report(seq, "leaf_missing", "the event's leaf cannot be encoded")
            self.broken = True
            return
        computed = frontier.append(_sha256(b"\x00" + image).digest())
        if b"".join(computed) != stored:
            self._report(
                seq,
                "tree_hash_mismatch",
                "the stored Merkle hashes of this event are not the recomputed ones (its leaf "
                "changed, or proofs made from them would fail)",
            )
            if len(stored) == 32 * len(computed):
                # Go on from the stored hashes, so one edited row is one finding, at its seq; a
                # rewrite of the stored tree too shows at the next signed root. (The subtrees the
                # append merged are the border's own: only its new top differs.)
                frontier.hashes[-1] = stored[-32:]
        if seq in self._roots:
            self.check_roots_at(seq)
