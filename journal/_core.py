"""The write path both writers share: a journal open for writing, its chain head and checkpoints.

``_Core`` owns the chain head, the redactor and the checkpoint policy, and a
:class:`journal._rollover.LiveSegment` (``core.live``): the live file, its lock and its one
connection, and their roll-over into the next segment. Rows are
built (redacted, encoded, sequenced, hashed; a v2 journal's with their Merkle leaf and stored
hashes, on the built tree's border, :mod:`journal._tlog`) in the caller's thread, in append
order; they are committed in batches, one ``BEGIN IMMEDIATE`` transaction per batch (leaves and
hashes with their events), ``synchronous=FULL`` when any event in it must be durable (an fsync
of the WAL also makes every earlier commit durable).
Before every commit the core checks that the journal's path still names the file it holds (an
fstat and a stat): a journal unlinked or replaced under it fails closed (``replaced``).
:class:`journal.SyncWriter` (:mod:`journal._writer`) and :class:`journal.AsyncWriter` drive it.
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TypedDict, Unpack

import msgspec

from ._canonical import (
    GENESIS_HASH,
    ROW_OF,
    canonical_bytes,
    encode_payload,
    format_wall,
    wall_now,
)
from ._checkpoint import (
    SEED_KEY_NAME,
    Checkpoint,
    HmacKey,
    SigningKey,
    checkpoint_of,
    export_checkpoint,
    load_key,
    sign_checkpoint,
)
from ._erase import moved_on, rebase_rows
from ._errors import (
    EventEncodeError,
    JournalFormatError,
    JournalUnavailable,
    classify_sqlite_error,
)
from ._events import (
    PAYLOAD_TYPES,
    WRITER_SESSION,
    Event,
    KeyRotated,
    SegmentStarted,
    derived_columns,
)
from ._merkle import Frontier, ProofError
from ._redact import Redactor
from ._rollover import LiveSegment
from ._schema import BUSY_TIMEOUT_S, INSERT_CHECKPOINT
from ._segments import base_path
from ._shm import ShmGuard
from ._tlog import (
    MERKLE_LOG,
    Stored,
    checkpoint_row,
    insert_stored,
    leaf_extras,
    load_border,
)

__all__ = [
    "CHECKPOINT_EVERY",
    "CHECKPOINT_INTERVAL_S",
    "SignerLike",
    "WriterOptions",
    "open_core",
    "resolve_key",
]

CHECKPOINT_EVERY: Final = 1000
CHECKPOINT_INTERVAL_S: Final = 30.0

_PAYLOAD_CLASSES: Final = tuple(PAYLOAD_TYPES.values())


SignerLike = SigningKey | HmacKey | bytes | Path | None


def resolve_key(key: SignerLike) -> SigningKey | HmacKey:
    """The checkpoint signer: a :class:`SigningKey`, a 32-byte Ed25519 seed (named
    ``agentteam-bridge/seed``), a signing key file, or the default one (created if absent).
    An :class:`HmacKey` signs legacy HMAC checkpoints (fixtures of HMAC-era journals).
    """
    if isinstance(key, SigningKey | HmacKey):
        return key
    if isinstance(key, bytes):
        return SigningKey(SEED_KEY_NAME, key)
    return load_key(key)


def _duration(value: float | None) -> float | None:
    # Rounded, finite and bounded, so every JSON encoder renders it identically (no exponent).
    if value is None or not math.isfinite(value) or abs(value) >= 1e15:
        return None
    return round(float(value), 3)


class _Core:
    """One journal file opened for writing: lock, connection, chain head, checkpoints."""

    def __init__(
        self,
        path: Path,
        *,
        key: SigningKey | HmacKey,
        journal_id: str | None,
        max_bytes: int | None,
        checkpoint_every: int,
        checkpoint_interval: float,
        checkpoint_path: Path | None,
        secrets: Iterable[str],
        synchronous_full: bool = True,
        busy_timeout: float = BUSY_TIMEOUT_S,
        segment_bytes: int | None = None,
        segment_age: float | None = None,
    ) -> None:
        self._synchronous_full = synchronous_full
        self._key = key
        self._checkpoint_every = checkpoint_every
        self._checkpoint_interval = checkpoint_interval
        self._checkpoint_path = checkpoint_path
        self.redactor = Redactor(secrets)
        self.checkpoint_export_error: OSError | None = None
        self.live = live = LiveSegment(
            base_path(path),
            max_bytes=max_bytes,
            busy_timeout=busy_timeout,
            segment_bytes=segment_bytes,
            segment_age=segment_age,
        )
        self._shm = ShmGuard()
        self._rebasing = False
        live.open(journal_id)
        try:
            self._load_head()
        except BaseException:
            self.close()
            raise
        live.seal_predecessor()
        self._synchronous = "FULL"
        self._unsynced = False  # a commit made with synchronous=NORMAL awaits an fsync
        # The chain head as built (may run ahead of the committed head while rows are queued).
        self.next_seq, self.next_prev_hash = self.committed_seq + 1, self.committed_hash
        try:
            self._record_key()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        """The live segment's file."""
        return self.live.path

    @property
    def journal_id(self) -> str:
        return self.live.journal_id

    @property
    def _conn(self) -> sqlite3.Connection:
        return self.live.conn

    def _record_key(self) -> None:
        """Name the signing key in the journal: a new journal's ``journal_meta`` row
        ``signing_key``; a ``key_rotated`` event when the key differs from the one last named."""
        if not isinstance(self._key, SigningKey):
            return  # an HMAC fixture writer: the journal predates recorded keys
        verifier = self._key.verifier
        try:
            named = recorded_key(self._conn)
            if named == verifier.to_text():
                return
            if named is None and self.committed_seq == 0 and self.last_checkpoint is None:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute(
                    "INSERT INTO journal_meta (key, value) VALUES ('signing_key', ?)",
                    (verifier.to_text(),),
                )
                self._conn.execute("COMMIT")
                return
        except sqlite3.Error as exc:
            self._rollback()
            raise classify_sqlite_error(exc) from exc
        previous = named
        if previous is None and self.last_checkpoint is not None:
            previous = f"hmac:{self.last_checkpoint.key_id}"  # a journal from before Ed25519
        rotated = KeyRotated(
            vkey=verifier.to_text(), fingerprint=verifier.fingerprint, previous=previous
        )
        try:
            self.commit(
                [self.build(Event(session_id=WRITER_SESSION, payload=rotated))], durable=True
            )
        except BaseException:
            self.rewind()
            raise

    def _load_head(self) -> None:
        try:
            head = self._conn.execute(
                "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            cp = self._conn.execute(
                "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature, NULL"
                " FROM checkpoints ORDER BY id DESC LIMIT 1"
            ).fetchone()
        except sqlite3.Error as exc:
            raise classify_sqlite_error(exc) from exc
        segment = self.live.segment
        empty = (segment.first_seq - 1, segment.prev_hash or GENESIS_HASH)
        self.committed_seq: int
        self.committed_hash: str
        self.committed_seq, self.committed_hash = head if head else empty
        self.last_checkpoint: Checkpoint | None = checkpoint_of(cp) if cp else None
        self._checkpoint_at = time.monotonic()
        self.tree = self._load_tree()
        self.next_tree = None if self.tree is None else self.tree.copy()

    def _load_tree(self) -> Frontier | None:
        """The tree's border at the committed head (a v2 journal; None for v1)."""
        try:
            marked = self._conn.execute(
                "SELECT value FROM journal_meta WHERE key = 'merkle_log'"
            ).fetchone()
            if marked is None:
                return None
            (log,) = marked
            if log != MERKLE_LOG:
                raise JournalFormatError(f"unknown Merkle log format {log!r}")
            return load_border(self._conn, self.committed_seq)
        except sqlite3.Error as exc:
            raise classify_sqlite_error(exc) from exc
        except ProofError as exc:
            raise JournalFormatError(f"{self.path}: the Merkle log is incomplete ({exc})") from exc

    def build(self, event: Event) -> Stored:
        """Redact, encode, sequence and hash one event (no I/O); advances the built head."""
        payload = event.payload
        if not isinstance(payload, _PAYLOAD_CLASSES):
            raise EventEncodeError(f"not a journal payload: {type(payload).__name__}")
        redact = self.redactor
        try:
            # The Struct itself: the same sorted text as its `to_builtins` image, one pass less.
            text = encode_payload(payload)
            if redact.screen(text):  # rarely: only then walk the tree
                text = redact.redact_encoded(text, encode_payload)
        except (msgspec.EncodeError, TypeError, ValueError) as exc:
            raise EventEncodeError(f"{payload.kind} payload cannot be encoded: {exc}") from exc
        status, error_type, duration = derived_columns(payload)
        request_id = event.jsonrpc_request_id
        # The envelope's text columns get the rules too: a tool name is the model's free text.
        method, tool = event.mcp_method_name, event.gen_ai_tool_name
        columns = (  # every column but the hash, in COLUMNS order
            self.next_seq,
            self.journal_id,
            redact.redact_id(event.session_id),
            None if event.call_id is None else redact.redact_id(event.call_id),
            time.monotonic_ns(),
            wall_now(),
            payload.kind,
            payload.kind_version,
            None if method is None else redact.redact_id(method),
            None if tool is None else redact.redact_id(tool),
            None if request_id is None else redact.redact_id(str(request_id)),
            None if status is None else int(status),
            error_type,
            _duration(duration),
            text,
            self.next_prev_hash,
        )
        image = canonical_bytes(ROW_OF((*columns, "")))
        digest = hashlib.sha256(image).hexdigest()
        row = ROW_OF((*columns, digest))
        self.next_seq += 1
        self.next_prev_hash = digest
        if self.next_tree is None:
            return Stored(row, None)
        # A v2 journal: the leaf (salted payload digest) and its stored hashes, on the built
        # border, so a checkpoint signed before these rows commit knows the tree hash.
        return Stored(row, leaf_extras(row, self.next_tree, image))

    @property
    def checkpoint_interval(self) -> float:
        return self._checkpoint_interval

    def rewind(self) -> None:
        """Forget built rows that were not committed (after a failed commit)."""
        self.next_seq, self.next_prev_hash = self.committed_seq + 1, self.committed_hash
        self.next_tree = None if self.tree is None else self.tree.copy()

    def checkpoint_due(self, last_seq: int) -> bool:
        """Whether the commit that ends at ``last_seq`` signs: its first commit (a journal is
        never without a signed checkpoint over its events, so ``verify`` owes no exemption to
        an unsigned one: anyone could have stripped it), a commit that reaches a multiple of
        the checkpoint count (so no more than that many events go unsigned), or the interval."""
        last = self.last_checkpoint
        if last is None:
            return last_seq > 0
        if last_seq <= last.seq:
            return False
        every = self._checkpoint_every
        return (
            last_seq // every > last.seq // every
            or time.monotonic() - self._checkpoint_at >= self._checkpoint_interval
        )

    def _set_synchronous(self, wanted: str) -> None:
        if wanted != self._synchronous:
            self._conn.execute(f"PRAGMA synchronous={wanted}")
            self._synchronous = wanted

    def commit(
        self, rows: Sequence[Stored], *, durable: bool, checkpoint: bool = False
    ) -> Checkpoint | None:
        """Commit rows in one transaction, with a checkpoint if asked or due; blocking I/O.

        Raises JournalUnavailable (nothing of the batch is stored) when SQLite refuses.
        """
        if rows:
            last = rows[-1].event
            last_seq, last_hash = last.seq, last.hash
        else:
            last_seq, last_hash = self.committed_seq, self.committed_hash
        signed: Checkpoint | None = None
        if not rows and durable and self._unsynced and self._synchronous_full:
            checkpoint = True  # a checkpoint commits with FULL, which fsyncs all earlier frames
        if checkpoint or self.checkpoint_due(last_seq):
            if not rows and self.last_checkpoint and self.last_checkpoint.seq == last_seq:
                return None
            sign = True
        else:
            sign = False
        if not rows and not sign:
            return None
        tree = self.tree
        if tree is not None:  # a v2 journal: the border once these rows are in
            after = tree.copy()
            for _, leaf in rows:
                assert leaf is not None  # built on a v2 journal's tree
                after.apply(leaf.tree_hashes)
        if sign:
            signed = sign_checkpoint(
                self._key,
                journal_id=self.journal_id,
                seq=last_seq,
                head_hash=last_hash,
                ts_wall=format_wall(datetime.now(UTC)),
                root_hash=None if tree is None else after.root().hex(),
            )
        live = self.live
        live.check_file()
        self._shm.check(live.path)  # a -shm the mapping cannot write would crash the commit
        conn = live.conn
        try:
            wanted = "FULL" if (durable or signed) and self._synchronous_full else "NORMAL"
            if wanted != self._synchronous:
                conn.execute(f"PRAGMA synchronous={wanted}")
                self._synchronous = wanted
            conn.execute("BEGIN IMMEDIATE")
            if rows:
                insert_stored(conn, rows, live.leaf_store)
            if signed is not None:
                conn.execute(INSERT_CHECKPOINT, checkpoint_row(signed))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            if rows and moved_on(exc) and not self._rebasing:
                return self._commit_rebased(rows, durable=durable, checkpoint=checkpoint)
            raise classify_sqlite_error(exc) from exc
        if tree is not None:
            self.tree = after
        self.committed_seq, self.committed_hash = last_seq, last_hash
        live.note_growth(rows, signed is not None)
        self._unsynced = wanted == "NORMAL"
        if signed is not None:
            self._export(signed)  # before it is published: a reader of it finds the file
            self.last_checkpoint = signed
            self._checkpoint_at = time.monotonic()
        return signed

    def _commit_rebased(
        self, rows: Sequence[Stored], *, durable: bool, checkpoint: bool
    ) -> Checkpoint | None:
        """Commit rows again after another connection appended (an erasure, see
        :mod:`journal._erase`): reload the head, sequence the rows after it, commit once more."""
        self._rebasing = True
        try:
            self._load_head()
            tree = None if self.tree is None else self.tree.copy()
            rebased, head, tree = rebase_rows(rows, self.committed_seq, self.committed_hash, tree)
            self.next_seq, self.next_prev_hash = rebased[-1].event.seq + 1, head
            self.next_tree = tree
            return self.commit(rebased, durable=durable, checkpoint=checkpoint)
        finally:
            self._rebasing = False

    def _export(self, checkpoint: Checkpoint) -> None:
        if self._checkpoint_path is None:
            return
        try:
            self.live.check_file()  # never under the name of a journal moved into its place
        except JournalUnavailable as exc:
            self.checkpoint_export_error = OSError(exc.detail)
            return
        try:
            export_checkpoint(checkpoint, self._checkpoint_path)
            self.checkpoint_export_error = None
        except OSError as exc:  # the events are committed; the export is evidence, reported aside
            self.checkpoint_export_error = exc

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def reconnect(self) -> None:
        """Reopen the connection and reload the committed head (recovery after a failure)."""
        self._shm.may_reopen(self.path)
        try:
            self._shm.release(self._conn, self.path)
        except sqlite3.Error:
            pass
        self.live.check_file()  # never reopen the path onto a file that is not this journal
        self.live.reconnect()
        self._synchronous = "FULL"
        self._unsynced = False
        self._load_head()
        self.rewind()

    def close(self) -> None:
        live = self.live
        try:
            live.discard_successor()
            self._shm.release(live.conn, live.path)
        finally:
            os.close(live.lock_fd)

    # Roll-over: the live segment does the file work, the core keeps the chain head.

    def rollover_due(self) -> str | None:
        """``size`` or ``age`` when the live segment should roll over now, else None."""
        return self.live.rollover_due(self.committed_seq)

    def prepare_successor(self) -> bool:
        """Create the next segment under its temporary name (blocking I/O); False when it
        cannot be made (the live segment goes on; see LiveSegment.prepare_successor)."""
        return self.live.prepare_successor(self._key, merkle=self.tree is not None)

    def discard_successor(self) -> None:
        """Drop a prepared successor that will not be used (the writer failed or closes)."""
        self.live.discard_successor()

    def build_segment_started(self, reason: str) -> tuple[Stored, Checkpoint]:
        """The successor's first row, sequenced after every row built so far, and the signed
        checkpoint of the head it follows (signed now: the signature covers only journal id,
        seq and head hash, all known)."""
        checkpoint = sign_checkpoint(
            self._key,
            journal_id=self.journal_id,
            seq=self.next_seq - 1,
            head_hash=self.next_prev_hash,
            ts_wall=format_wall(datetime.now(UTC)),
            root_hash=None if self.next_tree is None else self.next_tree.root().hex(),
        )
        started = SegmentStarted(
            segment=self.live.segment.index + 1,
            reason=reason,
            previous_file=self.path.name,
            previous_seq=checkpoint.seq,
            previous_hash=checkpoint.head_hash,
            previous_checkpoint=checkpoint,
        )
        return self.build(Event(session_id=WRITER_SESSION, payload=started)), checkpoint

    def roll_over(self, built: Stored, checkpoint: Checkpoint) -> None:
        """Close the live segment at ``checkpoint`` and go on in the prepared successor, whose
        first event is ``row`` (from :meth:`build_segment_started`; every row built before it
        is committed). Blocking I/O.

        In order, each step durable before the next: the closing checkpoint in the old segment;
        the successor's link and first event (and a checkpoint of it) under its temporary name;
        the rename into place; the old segment sealed. A crash before the rename leaves the old
        segment live (the hidden file is rebuilt next time); after it, the successor is live.
        Raises JournalUnavailable (the writer fails as for a failed commit) before the rename.
        """
        live, (row, leaf) = self.live, built
        if not live.follows(self.committed_seq, self.committed_hash, row):
            live.discard_successor()
            raise JournalUnavailable("chain_conflict", "the roll-over does not follow the head")
        try:
            live.check_file()
        except JournalUnavailable:
            live.discard_successor()
            raise
        conn = live.conn
        try:
            self._set_synchronous("FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT_CHECKPOINT, checkpoint_row(checkpoint))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            live.discard_successor()
            raise classify_sqlite_error(exc) from exc
        self.last_checkpoint = checkpoint
        tree = self.tree
        after: Frontier | None = None
        if tree is not None:
            assert leaf is not None  # built on a v2 journal's tree
            after = tree.copy()
            after.apply(leaf.tree_hashes)
        first = sign_checkpoint(
            self._key,
            journal_id=self.journal_id,
            seq=row.seq,
            head_hash=row.hash,
            ts_wall=format_wall(datetime.now(UTC)),
            root_hash=None if after is None else after.root().hex(),
        )
        live.publish_successor(built, first, tree)
        self.committed_seq, self.committed_hash = row.seq, row.hash
        self.tree = after
        self.last_checkpoint = first
        self._checkpoint_at = time.monotonic()
        self._synchronous = "FULL"
        self._unsynced = False
        self._export(first)


def recorded_key(conn: sqlite3.Connection) -> str | None:
    """The verifier key the journal last named: its latest ``key_rotated`` event, else the
    ``signing_key`` it was created with (None for a journal from before Ed25519)."""
    row = conn.execute(
        "SELECT payload FROM events WHERE kind = 'key_rotated' ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    if row is not None:
        (payload,) = row
        return str(msgspec.json.decode(payload)["vkey"])
    meta = conn.execute("SELECT value FROM journal_meta WHERE key = 'signing_key'").fetchone()
    if meta is None:
        return None
    (named,) = meta
    return str(named)


class WriterOptions(TypedDict, total=False):
    """What every journal writer is opened with, each optional (the defaults are
    :func:`open_core`'s; :func:`journal.open_writer` says what each means). One list for
    :func:`journal.open_writer`, :func:`journal.open_sync_writer` and the core."""

    key: SignerLike
    journal_id: str | None
    secrets: Iterable[str]
    max_bytes: int | None
    checkpoint_every: int
    checkpoint_interval: float
    checkpoint_path: str | os.PathLike[str] | None
    synchronous_full: bool
    busy_timeout: float
    segment_bytes: int | None
    segment_age: float | None


def open_core(path: str | os.PathLike[str], **options: Unpack[WriterOptions]) -> _Core:
    segment_bytes, segment_age = options.get("segment_bytes"), options.get("segment_age")
    if segment_bytes is not None and segment_bytes <= 0:
        raise ValueError("segment_bytes must be positive (None: no roll-over by size)")
    if segment_age is not None and segment_age <= 0:
        raise ValueError("segment_age must be positive (None: no roll-over by age)")
    checkpoint_path = options.get("checkpoint_path")
    return _Core(
        Path(path),
        key=resolve_key(options.get("key")),
        journal_id=options.get("journal_id"),
        max_bytes=options.get("max_bytes"),
        checkpoint_every=options.get("checkpoint_every", CHECKPOINT_EVERY),
        checkpoint_interval=options.get("checkpoint_interval", CHECKPOINT_INTERVAL_S),
        checkpoint_path=None if checkpoint_path is None else Path(checkpoint_path),
        secrets=options.get("secrets", ()),
        synchronous_full=options.get("synchronous_full", True),
        busy_timeout=options.get("busy_timeout", BUSY_TIMEOUT_S),
        segment_bytes=segment_bytes,
        segment_age=segment_age,
    )
