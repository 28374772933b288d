"""Segment roll-over: the half of the writer's core that keeps the live file.

:class:`_LiveSegment` is a base of :class:`journal._core._Core`: it opens and locks the journal's
live segment (sealing a predecessor a crash left open), tells when that segment is due to roll
over (by size or age), prepares its successor under a temporary name off the event loop, and
moves the core into it (:meth:`_LiveSegment.roll_over`). The file layout and the chain link are
described in :mod:`journal._segments`; the core keeps the chain head, builds rows, commits them.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from ._canonical import Row, format_wall
from ._checkpoint import Checkpoint, HmacKey, SigningKey, sign_checkpoint
from ._errors import (
    JournalFormatError,
    JournalUnavailable,
    classify_os_error,
    classify_sqlite_error,
)
from ._events import WRITER_SESSION, Event, SegmentStarted
from ._merkle import Frontier
from ._schema import (
    INSERT_CHECKPOINT,
    INSERT_EVENT,
    connect_writer,
    create_private_file,
    ensure_identity,
)
from ._segments import (
    SegmentInfo,
    fsync_directory,
    live_segment,
    remove_temporary,
    segment_path,
    temporary_path,
)
from ._tlog import BORDER_KEY, INSERT_LEAF, border_text, checkpoint_row, tree_rows

__all__ = ["ROLLOVER_RETRY_S"]

_T = TypeVar("_T")

ROLLOVER_RETRY_S: Final = 60.0  # after a successor could not be made, the live one goes on
# A committed row grows the file by at most this many times its payload's characters plus its
# fixed columns (up to 4 UTF-8 bytes a character, its index entries, pages split half full):
# the size is measured again only once that bound could have reached segment_bytes.
_ROW_GROWTH: Final = 8
_ROW_FIXED: Final = 1280  # 1024, and a v2 row's leaf (salt, digest) and ~2 stored hashes


class _LiveSegment:
    """The live segment of a journal open for writing, and its roll-over into the next one."""

    # Kept by the core (the attributes and methods of journal._core._Core this half uses).
    base: Path
    path: Path
    journal_id: str
    segment: SegmentInfo
    committed_seq: int
    committed_hash: str
    next_seq: int
    next_prev_hash: str
    last_checkpoint: Checkpoint | None
    _key: SigningKey | HmacKey
    _max_bytes: int | None
    _busy_timeout: float
    _segment_bytes: int | None
    _segment_age: float | None
    _successor: _Successor | None
    _rollover_after: float
    _lock_fd: int
    _conn: sqlite3.Connection
    _page_size: int
    _size_known: int | None  # the live segment's bytes when last measured (None: measure)
    _size_grown: int  # a bound on what the commits since then added (see `note_growth`)
    _segment_created: float
    _synchronous: str
    _unsynced: bool
    _checkpoint_at: float
    tree: Frontier | None  # a v2 journal's Merkle border at the committed head (None: v1)
    next_tree: Frontier | None  # ... at the built head

    if TYPE_CHECKING:

        def build(self, event: Event) -> Row: ...
        def check_live_file(self) -> None: ...
        def close(self) -> None: ...
        def _load_head(self) -> None: ...
        def _set_synchronous(self, wanted: str) -> None: ...
        def _rollback(self) -> None: ...
        def _export(self, checkpoint: Checkpoint) -> None: ...

    def _open_live(self, journal_id: str | None) -> None:
        """Lock and open the journal's live segment (its highest-numbered file)."""
        for _ in range(16):
            path = live_segment(self.base)
            fd, conn, found_id, segment = self._open_locked(path, journal_id, _segment_info)
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

    def _open_locked(
        self,
        path: Path,
        journal_id: str | None,
        prepare: Callable[[sqlite3.Connection], _T],
        *,
        merkle: bool = True,
    ) -> tuple[int, sqlite3.Connection, str, _T]:
        """Create or open `path` owner-only, lock it, connect, settle its journal id and run
        `prepare` on the connection: (fd, connection, journal id, what `prepare` gave). On any
        failure nothing stays open."""
        fd = create_private_file(path)
        try:
            _lock_exclusively(fd, path)
            conn = self._connect(path)
            try:
                return fd, conn, ensure_identity(conn, journal_id, merkle=merkle), prepare(conn)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            os.close(fd)
            raise

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
            known = self._size_known
            if known is not None and known + self._size_grown < self._segment_bytes:
                return None  # cannot be due yet: no statement (and no read lock) per commit
            try:  # the database's size, the pages still only in the WAL included
                pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
            except sqlite3.Error:
                return None  # the next commit reports what is wrong
            self._size_known, self._size_grown = pages * self._page_size, 0
            if self._size_known >= self._segment_bytes:
                return "size"
        return None

    def note_growth(self, rows: Sequence[Row], checkpoints: int) -> None:
        """Count committed rows towards the next size check: each at most `_ROW_GROWTH` times
        its payload and fixed columns (its table and index entries, pages split half full)."""
        if self._segment_bytes is not None:
            grown = sum(len(row[14]) for row in rows) + _ROW_FIXED * (len(rows) + checkpoints)
            self._size_grown += _ROW_GROWTH * grown

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
            meta = {"segment_index": str(self.segment.index + 1)}
            if isinstance(self._key, SigningKey):
                meta["signing_key"] = self._key.verifier.to_text()
            fd, conn, _, _ = self._open_locked(
                temp,
                self.journal_id,
                lambda conn: _insert_meta(conn, meta),
                merkle=self.tree is not None,  # a v1 journal stays v1
            )
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
            root_hash=None if self.next_tree is None else self.next_tree.root().hex(),
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
        try:
            self.check_live_file()
        except JournalUnavailable:
            self.discard_successor()
            raise
        conn = self._conn
        try:
            self._set_synchronous("FULL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT_CHECKPOINT, checkpoint_row(checkpoint))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            self.discard_successor()
            raise classify_sqlite_error(exc) from exc
        self.last_checkpoint = checkpoint
        tree = self.tree
        after: Frontier | None = None
        if tree is not None:
            after = tree.copy()
            after.apply(row[19])
        first = sign_checkpoint(
            self._key,
            journal_id=self.journal_id,
            seq=row[0],
            head_hash=row[16],
            ts_wall=format_wall(datetime.now(UTC)),
            root_hash=None if after is None else after.root().hex(),
        )
        new = successor.conn
        try:
            new.execute("BEGIN IMMEDIATE")
            link = {
                "segment_first_seq": str(row[0]),
                "segment_prev_hash": str(row[15]),
                "segment_prev_file": self.path.name,
            }
            if tree is not None:  # the border of the tree it continues (journal._tlog)
                link[BORDER_KEY] = border_text(tree)
            new.executemany("INSERT INTO journal_meta (key, value) VALUES (?, ?)", link.items())
            new.execute(INSERT_EVENT, row[:17])
            if tree is not None:
                new.executemany(INSERT_LEAF, tree_rows([row]))
            new.execute(INSERT_CHECKPOINT, checkpoint_row(first))
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
        self._size_known = None
        self.committed_seq, self.committed_hash = row[0], row[16]
        self.tree = after
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


def _lock_exclusively(fd: int, path: Path) -> None:
    # One writer per journal: the sequence is assigned in memory, so a second writer would be
    # refused by the schema at its first append; refuse it at open instead.
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise JournalUnavailable("locked", f"another writer holds {path}") from exc
