"""The write path shared by both writers, and the synchronous writer for tools and tests.

``_Core`` owns the one connection, the chain head, the redactor and the checkpoint policy. Rows
are built (redacted, encoded, sequenced, hashed) in the caller's thread, in append order; they are
committed in batches, one ``BEGIN IMMEDIATE`` transaction per batch, ``synchronous=FULL`` when any
event in it must be durable (an fsync of the WAL also makes every earlier commit durable).
"""

from __future__ import annotations

import fcntl
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final

import msgspec

from ._canonical import GENESIS_HASH, Row, encode_payload, format_wall, row_hash, wall_now
from ._checkpoint import (
    SEED_KEY_NAME,
    Checkpoint,
    HmacKey,
    SigningKey,
    export_checkpoint,
    load_key,
    sign_checkpoint,
)
from ._errors import (
    EventEncodeError,
    JournalFormatError,
    JournalUnavailable,
    classify_os_error,
    classify_sqlite_error,
)
from ._events import PAYLOAD_TYPES, Event, KeyRotated, SegmentStarted, derived_columns
from ._redact import Redactor
from ._schema import BUSY_TIMEOUT_S, connect_writer, create_private_file, ensure_identity
from ._segments import (
    SegmentInfo,
    base_path,
    fsync_directory,
    live_segment,
    remove_temporary,
    segment_path,
    temporary_path,
)

__all__ = ["SyncWriter", "open_sync_writer"]

CHECKPOINT_EVERY: Final = 1000
CHECKPOINT_INTERVAL_S: Final = 30.0
ROLLOVER_RETRY_S: Final = 60.0  # after a successor could not be made, the live one goes on

_INSERT: Final = (
    "INSERT INTO events (seq, journal_id, session_id, call_id, ts_mono_ns, ts_wall, kind,"
    " kind_version, mcp_method_name, gen_ai_tool_name, jsonrpc_request_id,"
    " http_response_status_code, error_type, duration_ms, payload, prev_hash, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_PAYLOAD_CLASSES: Final = tuple(PAYLOAD_TYPES.values())


# The session id of the events the writer itself appends (a key rotation).
WRITER_SESSION: Final = "journal-writer"

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
        self._busy_timeout = busy_timeout
        self._synchronous_full = synchronous_full
        self._key = key
        self._max_bytes = max_bytes
        self._checkpoint_every = checkpoint_every
        self._checkpoint_interval = checkpoint_interval
        self._checkpoint_path = checkpoint_path
        self.redactor = Redactor(secrets)
        self.checkpoint_export_error: OSError | None = None
        self.base = base_path(path)
        self._segment_bytes = segment_bytes
        self._segment_age = segment_age
        self._successor: _Successor | None = None
        self._rollover_after = 0.0  # no roll-over is tried before (monotonic), after a failed one
        self._open_live(journal_id)
        self._synchronous = "FULL"
        self._unsynced = False  # a commit made with synchronous=NORMAL awaits an fsync
        # The chain head as built (may run ahead of the committed head while rows are queued).
        self.next_seq, self.next_prev_hash = self.committed_seq + 1, self.committed_hash
        try:
            self._record_key()
        except BaseException:
            self.close()
            raise

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
                "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature"
                " FROM checkpoints ORDER BY id DESC LIMIT 1"
            ).fetchone()
        except sqlite3.Error as exc:
            raise classify_sqlite_error(exc) from exc
        empty = (self.segment.first_seq - 1, self.segment.prev_hash or GENESIS_HASH)
        self.committed_seq: int = head[0] if head else empty[0]
        self.committed_hash: str = head[1] if head else empty[1]
        self.last_checkpoint: Checkpoint | None = (
            Checkpoint(
                journal_id=cp[0],
                seq=cp[1],
                head_hash=cp[2],
                ts_wall=cp[3],
                key_id=cp[4],
                signature=cp[5],
            )
            if cp
            else None
        )
        self._checkpoint_at = time.monotonic()

    # --- segments ---------------------------------------------------------------------

    def _open_live(self, journal_id: str | None) -> None:
        """Lock and open the journal's live segment (its highest-numbered file)."""
        for _ in range(16):
            path = live_segment(self.base)
            fd = create_private_file(path)
            try:
                _lock_exclusively(fd, path)
                conn = self._connect(path)
                try:
                    found_id = ensure_identity(conn, journal_id)
                    segment = _segment_info(conn)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                os.close(fd)
                raise
            if segment.next_file is None:
                self.path, self._lock_fd, self._conn = path, fd, conn
                self.journal_id, self.segment = found_id, segment
                try:
                    self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
                    self._load_head()
                    self._segment_created = _created_at(conn)
                except BaseException:
                    self.close()
                    raise
                self._seal_predecessor()
                return
            conn.close()  # rolled over from while we looked: its successor is live now
            os.close(fd)
            if not (path.parent / segment.next_file).exists():
                raise JournalFormatError(
                    f"{path} is closed and names {segment.next_file} as the journal's next "
                    "segment, which is missing"
                )
        raise JournalUnavailable("locked", f"{self.base} kept rolling over while it was opened")

    def _seal_predecessor(self) -> None:
        """Close the previous segment if a crash left it open after its successor was made
        (best effort: the successor's chain link is what counts, and a reader checks it)."""
        if self.segment.prev_file is None:
            return
        previous = self.path.parent / self.segment.prev_file
        try:
            fd = os.open(previous, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return  # pruned, or never here
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            conn = connect_writer(previous, busy_timeout=self._busy_timeout)
            try:
                if _segment_info(conn).next_file is None:
                    _insert_meta(conn, {"segment_next": self.path.name})
            finally:
                conn.close()
        except (OSError, sqlite3.Error, JournalUnavailable, JournalFormatError):
            pass
        finally:
            os.close(fd)

    def _connect(self, path: Path) -> sqlite3.Connection:
        return connect_writer(path, max_bytes=self._max_bytes, busy_timeout=self._busy_timeout)

    def rollover_due(self) -> str | None:
        """``size`` or ``age`` when the live segment should roll over now, else None.

        A segment rolls over only once it holds an event besides its ``segment_started``.
        """
        if self._segment_bytes is None and self._segment_age is None:
            return None
        if self._successor is not None or time.monotonic() < self._rollover_after:
            return None
        first_own = self.segment.first_seq + (1 if self.segment.index > 1 else 0)
        if self.committed_seq < first_own:
            return None
        age = time.time() - self._segment_created
        if self._segment_age is not None and age >= self._segment_age:
            return "age"
        if self._segment_bytes is not None:
            try:  # the database's size, the pages still only in the WAL included
                pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
            except sqlite3.Error:
                return None  # the next commit reports what is wrong
            if pages * self._page_size >= self._segment_bytes:
                return "size"
        return None

    def prepare_successor(self) -> bool:
        """Create the next segment under its temporary name, identity and key in place, no
        event yet (blocking I/O). False, and no retry for a while, when it cannot be made: the
        live segment goes on taking events."""
        final = segment_path(self.base, self.segment.index + 1)
        temp = temporary_path(final)
        try:
            if final.exists():
                raise JournalFormatError(f"{final} exists beside the live segment {self.path}")
            remove_temporary(final)
            fd = create_private_file(temp)
            try:
                _lock_exclusively(fd, temp)
                conn = self._connect(temp)
                try:
                    ensure_identity(conn, self.journal_id)
                    meta = {"segment_index": str(self.segment.index + 1)}
                    if isinstance(self._key, SigningKey):
                        meta["signing_key"] = self._key.verifier.to_text()
                    _insert_meta(conn, meta)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                os.close(fd)
                raise
        except (OSError, sqlite3.Error, JournalUnavailable, JournalFormatError):
            self._rollover_after = time.monotonic() + ROLLOVER_RETRY_S
            try:
                remove_temporary(final)
            except OSError:
                pass
            return False
        self._successor = _Successor(final, fd, conn)
        return True

    def discard_successor(self) -> None:
        """Drop a prepared successor that will not be used (the writer failed or closes)."""
        successor, self._successor = self._successor, None
        if successor is None:
            return
        try:
            successor.conn.close()
        finally:
            os.close(successor.fd)
            try:
                remove_temporary(successor.final)
            except OSError:
                pass

    def build_segment_started(self, reason: str) -> tuple[Row, Checkpoint]:
        """The successor's first row, sequenced after every row built so far, and the signed
        checkpoint of the head it follows (signed now: the signature covers only journal id,
        seq and head hash, all known)."""
        checkpoint = sign_checkpoint(
            self._key,
            journal_id=self.journal_id,
            seq=self.next_seq - 1,
            head_hash=self.next_prev_hash,
            ts_wall=format_wall(datetime.now(UTC)),
        )
        started = SegmentStarted(
            segment=self.segment.index + 1,
            reason=reason,
            previous_file=self.path.name,
            previous_seq=checkpoint.seq,
            previous_hash=checkpoint.head_hash,
            previous_checkpoint=checkpoint,
        )
        return self.build(Event(session_id=WRITER_SESSION, payload=started)), checkpoint

    def roll_over(self, row: Row, checkpoint: Checkpoint) -> None:
        """Close the live segment at ``checkpoint`` and go on in the prepared successor, whose
        first event is ``row`` (from :meth:`build_segment_started`; every row built before it
        is committed). Blocking I/O.

        In order, each step durable before the next: the closing checkpoint in the old segment;
        the successor's link and first event (and a checkpoint of it) under its temporary name;
        the rename into place; the old segment sealed. A crash before the rename leaves the old
        segment live (the hidden file is rebuilt next time); after it, the successor is live.
        Raises JournalUnavailable (the writer fails as for a failed commit) before the rename.
        """
        successor = self._successor
        if successor is None or self.committed_seq != row[0] - 1 or self.committed_hash != row[15]:
            self.discard_successor()
            raise JournalUnavailable("chain_conflict", "the roll-over does not follow the head")
        conn = self._conn
        try:
            self._set_synchronous("FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_INSERT_CHECKPOINT, _checkpoint_row(checkpoint))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            self.discard_successor()
            raise classify_sqlite_error(exc) from exc
        self.last_checkpoint = checkpoint
        first = sign_checkpoint(
            self._key,
            journal_id=self.journal_id,
            seq=row[0],
            head_hash=row[16],
            ts_wall=format_wall(datetime.now(UTC)),
        )
        new = successor.conn
        try:
            new.execute("BEGIN IMMEDIATE")
            link = {
                "segment_first_seq": str(row[0]),
                "segment_prev_hash": str(row[15]),
                "segment_prev_file": self.path.name,
            }
            new.executemany("INSERT INTO journal_meta (key, value) VALUES (?, ?)", link.items())
            new.execute(_INSERT, row)
            new.execute(_INSERT_CHECKPOINT, _checkpoint_row(first))
            new.execute("COMMIT")
            new.close()  # the last connection: the WAL is checkpointed into the file
            self._successor = None
            os.fsync(successor.fd)
            os.rename(temporary_path(successor.final), successor.final)
            fsync_directory(successor.final.parent)
        except (OSError, sqlite3.Error) as exc:
            self._successor = successor
            try:
                if new.in_transaction:
                    new.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self.discard_successor()
            raise (
                classify_sqlite_error(exc)
                if isinstance(exc, sqlite3.Error)
                else classify_os_error(exc)
            ) from exc
        # Published: from here on the successor is the live segment, whatever fails.
        old_path, old_fd = self.path, self._lock_fd
        self.path, self._lock_fd = successor.final, successor.fd
        self.segment = SegmentInfo(
            index=self.segment.index + 1,
            first_seq=row[0],
            prev_hash=row[15],
            prev_file=old_path.name,
        )
        self._segment_created = time.time()
        self.committed_seq, self.committed_hash = row[0], row[16]
        self.last_checkpoint = first
        self._checkpoint_at = time.monotonic()
        try:
            _insert_meta(conn, {"segment_next": successor.final.name})
        except (sqlite3.Error, JournalUnavailable):
            pass  # the next writer seals it (_seal_predecessor); the link is what counts
        finally:
            conn.close()
            os.close(old_fd)
        self._conn = connect_writer(
            self.path, max_bytes=self._max_bytes, busy_timeout=self._busy_timeout
        )
        self._synchronous = "FULL"
        self._unsynced = False
        self._export(first)

    def build(self, event: Event) -> Row:
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
        row: Row = (
            self.next_seq,
            self.journal_id,
            redact.redact_id(event.session_id),
            None if event.call_id is None else redact.redact_id(event.call_id),
            time.monotonic_ns(),
            wall_now(),
            payload.kind,
            payload.kind_version,
            event.mcp_method_name,
            event.gen_ai_tool_name,
            None if request_id is None else redact.redact_id(str(request_id)),
            None if status is None else int(status),
            error_type,
            _duration(duration),
            text,
            self.next_prev_hash,
            "",
        )
        digest = row_hash(row)
        self.next_seq += 1
        self.next_prev_hash = digest
        return (*row[:16], digest)

    @property
    def checkpoint_interval(self) -> float:
        return self._checkpoint_interval

    def rewind(self) -> None:
        """Forget built rows that were not committed (after a failed commit)."""
        self.next_seq, self.next_prev_hash = self.committed_seq + 1, self.committed_hash

    def checkpoint_due(self, last_seq: int) -> bool:
        since = last_seq - (self.last_checkpoint.seq if self.last_checkpoint else 0)
        if since <= 0:
            return False
        return (
            since >= self._checkpoint_every
            or time.monotonic() - self._checkpoint_at >= self._checkpoint_interval
        )

    def _set_synchronous(self, wanted: str) -> None:
        if wanted != self._synchronous:
            self._conn.execute(f"PRAGMA synchronous={wanted}")
            self._synchronous = wanted

    def commit(
        self, rows: Sequence[Row], *, durable: bool, checkpoint: bool = False
    ) -> Checkpoint | None:
        """Commit rows in one transaction, with a checkpoint if asked or due; blocking I/O.

        Raises JournalUnavailable (nothing of the batch is stored) when SQLite refuses.
        """
        last_seq, last_hash = (
            (rows[-1][0], rows[-1][16])
            if rows
            else (
                self.committed_seq,
                self.committed_hash,
            )
        )
        signed: Checkpoint | None = None
        if not rows and durable and self._unsynced and self._synchronous_full:
            checkpoint = True  # a checkpoint commits with FULL, which fsyncs all earlier frames
        if checkpoint or self.checkpoint_due(last_seq):
            if not rows and self.last_checkpoint and self.last_checkpoint.seq == last_seq:
                return None
            signed = sign_checkpoint(
                self._key,
                journal_id=self.journal_id,
                seq=last_seq,
                head_hash=last_hash,
                ts_wall=format_wall(datetime.now(UTC)),
            )
        if not rows and signed is None:
            return None
        conn = self._conn
        try:
            wanted = "FULL" if (durable or signed) and self._synchronous_full else "NORMAL"
            if wanted != self._synchronous:
                conn.execute(f"PRAGMA synchronous={wanted}")
                self._synchronous = wanted
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT, rows)
            if signed is not None:
                conn.execute(
                    _INSERT_CHECKPOINT,
                    (
                        signed.journal_id,
                        signed.seq,
                        signed.head_hash,
                        signed.ts_wall,
                        signed.key_id,
                        signed.signature,
                    ),
                )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise classify_sqlite_error(exc) from exc
        self.committed_seq, self.committed_hash = last_seq, last_hash
        self._unsynced = wanted == "NORMAL"
        if signed is not None:
            self._export(signed)  # before it is published: a reader of it finds the file
            self.last_checkpoint = signed
            self._checkpoint_at = time.monotonic()
        return signed

    def _export(self, checkpoint: Checkpoint) -> None:
        if self._checkpoint_path is None:
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
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        self._conn = connect_writer(
            self.path, max_bytes=self._max_bytes, busy_timeout=self._busy_timeout
        )
        self._synchronous = "FULL"
        self._unsynced = False
        self._load_head()
        self.rewind()

    def close(self) -> None:
        try:
            self.discard_successor()
            self._conn.close()
        finally:
            os.close(self._lock_fd)


def recorded_key(conn: sqlite3.Connection) -> str | None:
    """The verifier key the journal last named: its latest ``key_rotated`` event, else the
    ``signing_key`` it was created with (None for a journal from before Ed25519)."""
    row = conn.execute(
        "SELECT payload FROM events WHERE kind = 'key_rotated' ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    if row is not None:
        return str(msgspec.json.decode(row[0])["vkey"])
    meta = conn.execute("SELECT value FROM journal_meta WHERE key = 'signing_key'").fetchone()
    return None if meta is None else str(meta[0])


class _Successor:
    """The next segment, prepared under its temporary name: its lock and connection."""

    __slots__ = ("conn", "fd", "final")

    def __init__(self, final: Path, fd: int, conn: sqlite3.Connection) -> None:
        self.final, self.fd, self.conn = final, fd, conn


def _segment_info(conn: sqlite3.Connection) -> SegmentInfo:
    try:
        rows = conn.execute("SELECT key, value FROM journal_meta WHERE key LIKE 'segment%'")
        return SegmentInfo.from_meta({str(k): str(v) for k, v in rows})
    except sqlite3.Error as exc:
        raise classify_sqlite_error(exc) from exc


def _created_at(conn: sqlite3.Connection) -> float:
    """When the file was created (epoch seconds; now if it does not say)."""
    row = conn.execute("SELECT value FROM journal_meta WHERE key = 'created_at'").fetchone()
    try:
        return datetime.fromisoformat(str(row[0]).replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return time.time()


def _insert_meta(conn: sqlite3.Connection, rows: dict[str, str]) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO journal_meta (key, value) VALUES (?, ?)", rows.items())
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise classify_sqlite_error(exc) from exc


def _checkpoint_row(cp: Checkpoint) -> tuple[str, int, str, str, str, str]:
    return (cp.journal_id, cp.seq, cp.head_hash, cp.ts_wall, cp.key_id, cp.signature)


def _lock_exclusively(fd: int, path: Path) -> None:
    # One writer per journal: the sequence is assigned in memory, so a second writer would be
    # refused by the schema at its first append; refuse it at open instead.
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise JournalUnavailable("locked", f"another writer holds {path}") from exc


class SyncWriter:
    """A blocking writer: each append commits before it returns. For tools, tests and scripts.

    Not for the trio event loop (use :func:`journal.open_writer` there).
    """

    def __init__(self, core: _Core) -> None:
        self._core = core
        self._closed = False

    @property
    def journal_id(self) -> str:
        return self._core.journal_id

    @property
    def path(self) -> Path:
        return self._core.path

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last committed event; (0, 64 zeros) when empty."""
        return self._core.committed_seq, self._core.committed_hash

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        return self._core.last_checkpoint

    def add_secret(self, value: str) -> None:
        """Register a secret to be replaced wherever it occurs in later events."""
        self._core.redactor.add_secret(value)

    def append(self, event: Event, *, durable: bool = True) -> int:
        """Commit one event; return its seq."""
        return self.append_many([event], durable=durable)[0]

    def append_many(self, events: Iterable[Event], *, durable: bool = True) -> list[int]:
        """Commit events in one transaction (all or none); return their seqs."""
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        core = self._core
        try:
            rows = [core.build(event) for event in events]
            core.commit(rows, durable=durable)
        except BaseException:
            core.rewind()
            raise
        self._roll_over_if_due()
        return [row[0] for row in rows]

    def _roll_over_if_due(self) -> None:
        """Roll over after a commit when due; a roll-over that fails leaves the events where
        they are (committed) and the live segment live."""
        core = self._core
        reason = core.rollover_due()
        if reason is None or not core.prepare_successor():
            return
        try:
            row, checkpoint = core.build_segment_started(reason)
            core.roll_over(row, checkpoint)
        except JournalUnavailable:
            core.discard_successor()
            try:
                core.reconnect()
            except JournalUnavailable:
                pass  # the events are committed; the next append reports the journal's state

    def checkpoint(self) -> Checkpoint:
        """Sign and store a checkpoint of the current head now (durable); return it."""
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        self._core.commit([], durable=True, checkpoint=True)
        assert self._core.last_checkpoint is not None
        return self._core.last_checkpoint

    def close(self) -> None:
        """Write a final checkpoint (if events followed the last one) and close."""
        if self._closed:
            return
        self._closed = True
        try:
            self._core.commit([], durable=True, checkpoint=True)
        finally:
            self._core.close()

    def __enter__(self) -> SyncWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_core(
    path: str | os.PathLike[str],
    *,
    key: SignerLike,
    journal_id: str | None,
    max_bytes: int | None,
    checkpoint_every: int,
    checkpoint_interval: float,
    checkpoint_path: str | os.PathLike[str] | None,
    secrets: Iterable[str],
    synchronous_full: bool = True,
    busy_timeout: float = BUSY_TIMEOUT_S,
    segment_bytes: int | None = None,
    segment_age: float | None = None,
) -> _Core:
    if segment_bytes is not None and segment_bytes <= 0:
        raise ValueError("segment_bytes must be positive (None: no roll-over by size)")
    if segment_age is not None and segment_age <= 0:
        raise ValueError("segment_age must be positive (None: no roll-over by age)")
    return _Core(
        Path(path),
        key=resolve_key(key),
        journal_id=journal_id,
        max_bytes=max_bytes,
        checkpoint_every=checkpoint_every,
        checkpoint_interval=checkpoint_interval,
        checkpoint_path=None if checkpoint_path is None else Path(checkpoint_path),
        secrets=secrets,
        synchronous_full=synchronous_full,
        busy_timeout=busy_timeout,
        segment_bytes=segment_bytes,
        segment_age=segment_age,
    )


def open_sync_writer(
    path: str | os.PathLike[str],
    *,
    key: SignerLike = None,
    journal_id: str | None = None,
    secrets: Iterable[str] = (),
    max_bytes: int | None = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    checkpoint_interval: float = CHECKPOINT_INTERVAL_S,
    checkpoint_path: str | os.PathLike[str] | None = None,
    synchronous_full: bool = True,
    busy_timeout: float = BUSY_TIMEOUT_S,
    segment_bytes: int | None = None,
    segment_age: float | None = None,
) -> SyncWriter:
    """Open (creating and migrating if needed) a journal for blocking writes.

    Parameters are those of :func:`journal.open_writer`.
    """
    return SyncWriter(
        open_core(
            path,
            key=key,
            journal_id=journal_id,
            max_bytes=max_bytes,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            checkpoint_path=checkpoint_path,
            secrets=secrets,
            synchronous_full=synchronous_full,
            busy_timeout=busy_timeout,
            segment_bytes=segment_bytes,
            segment_age=segment_age,
        )
    )
