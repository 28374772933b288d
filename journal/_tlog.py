"""The journal as a Merkle transparency log (v2): leaves, stored hashes, and their checks.

A v2 journal (``journal_meta.merkle_log = 'rfc6962'``, set when the journal's first file is made)
is an RFC 6962 Merkle log besides its hash chain. Rules (stable; any script recomputes them):

* Leaf ``i`` is the canonical bytes of the event with ``seq = i + 1``: one JSON object, keys sorted,
  compact, UTF-8, holding every column of ``events`` except ``payload``, ``prev_hash`` and
  ``hash``, plus ``payload_sha256``: lowercase hex ``SHA-256(salt || payload)``, where ``salt`` is
  16 fresh random bytes per event and ``payload`` the stored canonical text (UTF-8). Salt and
  digest are stored in ``event_leaves`` beside the event: the leaf commits to the payload, not to
  its bytes, so a payload can be erased later with every proof intact, and a leaf shown to a third
  party reveals nothing of the payload.
* Leaf and node hashes, the tree hash and the proofs are :mod:`journal._merkle`'s (RFC 6962); the
  stored hashes (``tlog_hashes``, id = Go tlog's storage index) are written in the same
  transaction as their events, about two per event; a later segment also holds the border of
  the tree it continues (one hash per set bit of its first seq - 1), so a proof about its events
  needs no earlier file.
* A v2 checkpoint signs the tree hash at its size (``checkpoints.root_hash``; the note's third
  line, as c2sp.org/tlog-checkpoint defines it); ``head_hash`` still names the chain head.

A v1 journal (written before, or continuing a file written before) is chain only: no proofs.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from ._canonical import Row
from ._checkpoint import Checkpoint
from ._merkle import (
    Frontier,
    HashReader,
    ProofError,
    frontier_indexes,
    leaf_hash,
    stored_hash_index,
)

__all__ = [
    "INSERT_HASH",
    "INSERT_LEAF",
    "LEAF_SALT_BYTES",
    "MERKLE_LOG",
    "LeafRow",
    "border_rows",
    "checkpoint_row",
    "leaf_bytes",
    "leaf_extras",
    "load_border",
    "payload_digest",
    "record_of_index",
    "start_tree",
    "table_reader",
    "tree_checkpoint",
    "tree_rows",
]

MERKLE_LOG: Final = "rfc6962"  # journal_meta.merkle_log of a v2 journal
LEAF_SALT_BYTES: Final = 16
INSERT_LEAF: Final = "INSERT INTO event_leaves (seq, salt, payload_sha256) VALUES (?, ?, ?)"
INSERT_HASH: Final = "INSERT INTO tlog_hashes (id, hash) VALUES (?, ?)"
LeafRow = tuple[int, str, str]  # (seq, salt hex, payload_sha256 hex)


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


def payload_digest(salt: bytes, payload: str | bytes) -> str:
    data = payload.encode() if isinstance(payload, str) else payload
    return hashlib.sha256(salt + data).hexdigest()


def leaf_bytes(row: Row, digest: str) -> bytes:
    """The leaf of a row (a tuple in COLUMNS order) whose payload digest is ``digest``."""
    return _encoder.encode(
        _Leaf(
            row[3],
            row[13],
            row[12],
            row[9],
            row[11],
            row[1],
            row[10],
            row[6],
            row[7],
            row[8],
            digest,
            row[0],
            row[2],
            row[4],
            row[5],
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


_salts = bytearray()


def _salt() -> bytes:
    """A fresh random salt, from a pool refilled 256 salts at a time (one syscall)."""
    global _salts
    if not _salts:
        _salts = bytearray(os.urandom(LEAF_SALT_BYTES * 256))
    salt = bytes(_salts[-LEAF_SALT_BYTES:])
    del _salts[-LEAF_SALT_BYTES:]
    return salt


def leaf_extras(row: Row, tree: Frontier) -> tuple[str, str, list[bytes]]:
    """A v2 row's leaf columns, appended to ``tree`` (the built border): its salt (hex), salted
    payload digest (hex) and the hashes its append stores (from :func:`stored_index_of`)."""
    salt = _salt()
    text = row[14]
    digest = hashlib.sha256(salt + (text.encode() if isinstance(text, str) else text)).hexdigest()
    return salt.hex(), digest, tree.append(leaf_hash(leaf_bytes(row, digest)))


def stored_index_of(seq: int) -> int:
    """The storage index of the leaf hash of the event at ``seq``."""
    return stored_hash_index(0, seq - 1)


def tree_rows(rows: Sequence[Row]) -> tuple[list[LeafRow], list[tuple[int, bytes]]]:
    """The ``event_leaves`` and ``tlog_hashes`` rows of built v2 rows (17 columns, then salt,
    digest and stored hashes as :func:`leaf_extras` gave them)."""
    leaves: list[LeafRow] = []
    hashes: list[tuple[int, bytes]] = []
    index = stored_index_of(rows[0][0]) if rows else 0
    for row in rows:
        leaves.append((row[0], row[17], row[18]))
        for h in row[19]:  # consecutive: a leaf's hashes follow the previous leaf's
            hashes.append((index, h))
            index += 1
    return leaves, hashes


def border_rows(tree: Frontier) -> list[tuple[int, bytes]]:
    """The border of a tree as stored-hash rows (what a new segment copies)."""
    indexes = [index for _, index in frontier_indexes(tree.size)]
    return list(zip(indexes, tree.hashes, strict=True))


def load_border(conn: sqlite3.Connection, size: int) -> Frontier:
    return Frontier.read(size, table_reader(conn))


def table_reader(conn: sqlite3.Connection) -> HashReader:
    """A HashReader over one file's ``tlog_hashes``."""

    def read(indexes: Sequence[int]) -> list[bytes]:
        out: list[bytes] = []
        for index in indexes:
            row = conn.execute("SELECT hash FROM tlog_hashes WHERE id = ?", (index,)).fetchone()
            if row is None:
                raise ProofError(f"stored hash {index} is not in this journal file")
            out.append(bytes(row[0]))
        return out

    return read


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

    ``feed(row)`` takes a row with its leaf columns (``Reader.rows(leaves=True)``: salt and
    payload digest after the 17 columns): the digest must be the salted payload's, the leaf must
    exist, and the hashes its append stored (read from ``stored``, an iterator over the file's
    ``tlog_hashes`` in id order) must be the recomputed ones; a checkpoint's signed root must be
    the tree hash at its size. Rules: ``leaf_missing``, ``payload_digest_mismatch``,
    ``tree_hash_mismatch``, ``checkpoint_root_mismatch``.
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

    def feed(self, row: Row, stored: Callable[[int], bytes | None]) -> None:
        seq = row[0]
        if self.broken:
            return
        if not isinstance(seq, int) or seq != self.frontier.size + 1:
            self.broken = True  # the chain reports the gap; later roots are not comparable
            return
        salt, digest = (row[17], row[18]) if len(row) > 18 else (None, None)
        if salt is None or digest is None:
            self._report(seq, "leaf_missing", "a v2 journal's event has no leaf (salt, digest)")
            self.broken = True
            self.frontier.append(b"\x00" * 32)
            return
        try:
            text = row[14]
            actual = payload_digest(bytes.fromhex(salt), text)
            if actual != digest:
                self._report(
                    seq,
                    "payload_digest_mismatch",
                    "the payload is not the one its leaf commits to (sha256(salt || payload))",
                )
            leaf = leaf_bytes(row, digest)
        except (TypeError, ValueError, AttributeError, msgspec.EncodeError):
            self._report(seq, "leaf_missing", "the event's leaf cannot be encoded")
            self.broken = True
            self.frontier.append(b"\x00" * 32)
            return
        index = stored_hash_index(0, self.frontier.size)
        before = self.frontier.copy()
        computed = self.frontier.append(leaf_hash(leaf))
        found = [stored(index + offset) for offset in range(len(computed))]
        if found != computed:
            self._report(
                seq,
                "tree_hash_mismatch",
                "the stored Merkle hashes of this event are not the recomputed ones (its leaf "
                "changed, or proofs made from them would fail)",
            )
            if all(h is not None for h in found):
                # Go on from the stored hashes, so one edited row is one finding, at its seq;
                # a rewrite of the stored tree too shows at the next signed root.
                before.apply([h for h in found if h is not None])
                self.frontier = before
        self.check_roots_at(seq)


class StoredHashes:
    """The stored hashes of one file in id order, read once as ids are asked in order."""

    def __init__(self, conn: sqlite3.Connection, from_index: int) -> None:
        self._cursor = conn.execute(
            "SELECT id, hash FROM tlog_hashes WHERE id >= ? ORDER BY id", (from_index,)
        )
        self._next: tuple[int, bytes] | None = None
        self._advance()

    def _advance(self) -> None:
        row = self._cursor.fetchone()
        self._next = None if row is None else (int(row[0]), bytes(row[1]))

    def __call__(self, index: int) -> bytes | None:
        while self._next is not None and self._next[0] < index:
            self._advance()
        if self._next is not None and self._next[0] == index:
            found = self._next[1]
            self._advance()
            return found
        return None
