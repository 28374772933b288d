"""Segment roll-over: the live file of a journal open for writing, owned by the writer's core.

:class:`LiveSegment` is held by :class:`journal._core._Core` (``core.live``): it opens and locks
the journal's live segment (sealing a predecessor a crash left open), holds its connection and
lock, tells when that segment is due to roll over (by size or age), prepares its successor under a
temporary name off the event loop, and publishes it (:meth:`LiveSegment.publish_successor`). It
knows no chain head: the core passes what it needs (the committed seq, the key, the rows) and keeps
the head, builds rows and commits them. The file layout and the chain link are described in
:mod:`journal._segments`.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Final, TypeVar

from ._canonical import Row
from ._checkpoint import Checkpoint, HmacKey, SigningKey
from ._errors import (
    JournalFormatError,
    JournalUnavailable,
    classify_os_error,
    classify_sqlite_error,
)
from ._merkle import Frontier
from ._schema import (
    INSERT_CHECKPOINT,
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
from ._tlog import BORDER_KEY, Stored, border_text, checkpoint_row, insert_stored, leaf_store

__all__ = ["ROLLOVER_RETRY_S", "LiveSegment", "held_by_a_writer"]

_T = TypeVar("_T")

ROLLOVER_RETRY_S: Final = 60.0  # after a successor could not be made, the live one goes on
# A committed row grows the file by at most this many times its payload's characters plus its
# fixed columns (up to 4 UTF-8 bytes a character, its index entries, pages split half full):
# the size is measured again only once that bound could have reached segment_bytes.
_ROW_GROWTH: Final = 8
_ROW_FIXED: Final = 1280  # 1024, and a v2 row's leaf (salt, digest) and ~2 stored hashes


class LiveSegment:
    """The live segment of a journal open for writing (its file, lock and connection), and its
    roll-over into the next one. ``open`` fills in the file; until then only the settings are
    set."""

    base: Path
    path: Path
    journal_id: str
    segment: SegmentInfo
    conn: sqlite3.Connection
    lock_fd: int
    created: float  # when the live segment was made (epoch seconds)
    leaf_store: str  # where the live file keeps its leaf columns (journal._tlog.leaf_store)

    def __init__(
        self,
        base: Path,
        *,
        max_bytes: int | None,
        busy_timeout: float,
        segment_bytes: int | None,
        segment_age: float | None,
    ) -> None:
        self.base = base
        self._max_bytes = max_bytes
        self._busy_timeout = busy_timeout
        self._segment_bytes = segment_bytes
        self._segment_age = segment_age
        self._successor: _Successor | None = None
        self._rollover_after = 0.0  # no roll-over is tried before (monotonic), after a failed one
        self._size_known: int | None = None  # the live segment's bytes when last measured
        self._size_grown = 0  # a bound on what the commits since then added (see `note_growth`)
        self._page_size = 0

    def open(self, journal_id: str | None) -> None:
        """Lock and open the journal's live segment (its highest-numbered file)."""
        for _ in range(16):
            path = live_segment(self.base)
            fd, conn, found_id, segment = self._open_locked(path, journal_id, _segment_info)
            if segment.next_file is None:
                try:
                    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
                    self._page_size = int(page_size)
                    self.created = _created_at(conn)
                    self.leaf_store = leaf_store(conn)
                except BaseException:
                    conn.close()
                    os.close(fd)
                    raise
                self.path, self.lock_fd, self.conn = path, fd, conn
                self.journal_id, self.segment = found_id, segment
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

    def seal_predecessor(self) -> None:
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

    def reconnect(self) -> None:
        """Open a new connection to the live file (the caller closed or abandoned the old)."""
        self.conn = self._connect(self.path)
        self._size_known = None

    def check_file(self) -> None:
        """Raise JournalUnavailable("replaced") when the journal's path no longer names the file
        this writer holds open: unlinked (``rm journal.db*``), renamed away, or replaced by a
        rename over it. Rows committed then would go to a file nobody can find, or the export
        would sign under another journal's name; the writer fails closed instead, and stays
        failed (a re-probe finds the same). Two system calls before every commit: an fstat of
        the held descriptor (its inode and link count) and a stat of the path."""
        held = os.fstat(self.lock_fd)
        try:
            named = os.stat(self.path)
        except OSError:
            named = None
        if (
            held.st_nlink == 0
            or named is None
            or named.st_ino != held.st_ino
            or named.st_dev != held.st_dev
        ):
            what = "unlinked" if held.st_nlink == 0 or named is None else "replaced by another file"
            raise JournalUnavailable("replaced", f"{self.path.name} was {what} under the writer")

    def rollover_due(self, committed_seq: int) -> str | None:
        """``size`` or ``age`` when the live segment should roll over now, else None.

        A segment rolls over only once it holds an event besides its ``segment_started``
        (``committed_seq`` is the core's committed head).
        """
        if self._segment_bytes is None and self._segment_age is None:
            return None
        if self._successor is not None or time.monotonic() < self._rollover_after:
            return None
        first_own = self.segment.first_seq + (1 if self.segment.index > 1 else 0)
        if committed_seq < first_own:
            return None
        age = time.time() - self.created
        if self._segment_age is not None and age >= self._segment_age:
            return "age"
        if self._segment_bytes is not None:
            known = self._size_known
            if known is not None and known + self._size_grown < self._segment_bytes:
                return None  # cannot be due yet: no statement (and no read lock) per commit
            try:  # the database's size, the pages still only in the WAL included
                (pages,) = self.conn.execute("PRAGMA page_count").fetchone()
            except sqlite3.Error:
                return None  # the next commit reports what is wrong
            self._size_known, self._size_grown = pages * self._page_size, 0
            if self._size_known >= self._segment_bytes:
                return "size"
        return None

    def note_growth(self, rows: Sequence[Stored], checkpoints: int) -> None:
        """Count committed rows towards the next size check: each at most `_ROW_GROWTH` times
        its payload and fixed columns (its table and index entries, pages split half full)."""
        if self._segment_bytes is not None:
            grown = sum(len(event.payload) for event, _ in rows) + _ROW_FIXED * (
                len(rows) + checkpoints
            )
            self._size_grown += _ROW_GROWTH * grown

    def prepare_successor(self, key: SigningKey | HmacKey, *, merkle: bool) -> bool:
        """Create the next segment under its temporary name, identity and key in place, no
        event yet (blocking I/O; ``merkle``: a v2 journal, a v1 journal stays v1). False, and no
        retry for a while, when it cannot be made: the live segment goes on taking events."""
        final = segment_path(self.base, self.segment.index + 1)
        temp = temporary_path(final)
        try:
            if final.exists():
                raise JournalFormatError(f"{final} exists beside the live segment {self.path}")
            remove_temporary(final)
            meta = {"segment_index": str(self.segment.index + 1)}
            if isinstance(key, SigningKey):
                meta["signing_key"] = key.verifier.to_text()
            fd, conn, _, _ = self._open_locked(
                temp, self.journal_id, lambda conn: _insert_meta(conn, meta), merkle=merkle
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

    def follows(self, committed_seq: int, committed_hash: str, row: Row) -> bool:
        """Whether a successor is prepared and ``row`` is sequenced right after the head."""
        return (
            self._successor is not None
            and committed_seq == row.seq - 1
            and committed_hash == row.prev_hash
        )

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

    def publish_successor(self, built: Stored, first: Checkpoint, border: Frontier | None) -> None:
        """Move into the prepared successor (see :meth:`follows`): its link to the live segment
        (and ``border``, the tree it continues, for a v2 journal), its first event ``row`` with
        that row's leaf, and ``first``, the checkpoint of it, under its temporary name; then the
        rename into place and the old segment sealed. Blocking I/O.

        Raises JournalUnavailable (the successor discarded, the live segment unchanged) before
        the rename; after it, the successor is the live segment, whatever fails.
        """
        successor, row = self._successor, built.event
        assert successor is not None
        new = successor.conn
        try:
            new.execute("BEGIN IMMEDIATE")
            link = {
                "segment_first_seq": str(row.seq),
                "segment_prev_hash": str(row.prev_hash),
                "segment_prev_file": self.path.name,
            }
            if border is not None:  # the border of the tree it continues (journal._tlog)
                link[BORDER_KEY] = border_text(border)
            new.executemany("INSERT INTO journal_meta (key, value) VALUES (?, ?)", link.items())
            store = leaf_store(new)
            insert_stored(new, [built], store)
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
        old_conn, old_path, old_fd = self.conn, self.path, self.lock_fd
        self.path, self.lock_fd = successor.final, successor.fd
        self.segment = SegmentInfo(
            index=self.segment.index + 1,
            first_seq=row.seq,
            prev_hash=row.prev_hash,
            prev_file=old_path.name,
        )
        self.created = time.time()
        self.leaf_store = store
        self._size_known = None
        try:
            _insert_meta(old_conn, {"segment_next": successor.final.name})
        except (sqlite3.Error, JournalUnavailable):
            pass  # the next writer seals it (seal_predecessor); the link is what counts
        finally:
            old_conn.close()
            os.close(old_fd)
        self.conn = self._connect(self.path)


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
        (created,) = row
        return datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
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


def held_by_a_writer(path: Path) -> bool:
    """Whether a writer holds ``path``'s lock now (the one ``_lock_exclusively`` takes: a live
    session). Linux: ``/proc/locks``, read only, so no writer is ever kept from its lock by the
    probe; elsewhere a non-blocking shared lock taken and let go at once. ``erase`` and
    ``agentteam-replay verify`` both ask here."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            return any("FLOCK" in line and wanted in line.split() for line in locks)
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing lets go of a lock it took
    return False
