"""The writer's guard against a WAL index it can no longer write, which would crash the process.

SQLite maps the live segment's ``-shm`` file (the WAL index) into memory. Once that file cannot be
written (``chattr +i``), the next access through the mapping (a commit, a read, the connection's
close, the close at interpreter exit) kills the process with SIGBUS; measured with SQLite 3.46:
the first commit after ``chattr +i`` did. A vanished or replaced ``-shm`` does not crash the
writer, but a reader then builds a second index that the writer never updates.

:class:`ShmGuard` is asked before each use of the writer's connection (a commit, a reconnect, the
close): it raises ``JournalUnavailable("io_error")`` (the degraded mode: reads answered, mutations
refused, the writer re-probes) when the ``-shm`` is not writable or not the file the connection
mapped. A connection whose ``-shm`` became unwritable is *abandoned*: never used nor closed again
(closing touches the mapping), kept from finalisation at exit, and no new connection is opened in
this process while the ``-shm`` stays unwritable (SQLite would share the same mapping with it).
A check between the stat and the commit cannot be atomic: a ``chattr`` inside that window
(microseconds) still crashes.

Not taken: ``PRAGMA locking_mode=EXCLUSIVE`` keeps the WAL index in the writer's heap (no
``-shm`` at all), but then the writer holds the file exclusively and readers (``agentteam-replay``,
``ship --follow``, Datasette) cannot read a live journal (``database is locked``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ._errors import JournalUnavailable

__all__ = ["ShmGuard"]


class ShmGuard:
    """Whether the writer's connection may still touch its ``-shm`` mapping."""

    __slots__ = ("_seen", "unwritable")

    def __init__(self) -> None:
        self._seen: tuple[str, int, int] | None = None  # the -shm the connection mapped
        self.unwritable = False  # the connection's mapping can no longer be written

    def check(self, database: Path) -> None:
        """Raise JournalUnavailable("io_error") unless the connection to `database` may be used
        (two system calls: a stat and an access check)."""
        shm = f"{database}-shm"
        try:
            status = os.stat(shm)
        except FileNotFoundError:
            raise JournalUnavailable(
                "io_error", f"{shm} (the WAL index) vanished while the journal was open"
            ) from None
        except OSError as exc:
            raise JournalUnavailable("io_error", f"{shm}: {exc.strerror}") from None
        seen = (shm, status.st_dev, status.st_ino)
        if self._seen is None or self._seen[0] != shm:
            self._seen = seen  # the first use of this connection (or of a new segment)
        elif self._seen != seen:
            raise JournalUnavailable(
                "io_error", f"{shm} (the WAL index) was replaced while the journal was open"
            )
        if not os.access(shm, os.W_OK):
            self.unwritable = True
            raise JournalUnavailable(
                "io_error", f"{shm} (the WAL index) cannot be written (read-only or immutable)"
            )

    def release(self, conn: sqlite3.Connection, database: Path) -> None:
        """Close the connection, or abandon it if its mapping cannot be written (see module)."""
        if self.unwritable and not os.access(f"{database}-shm", os.W_OK):
            _abandon(conn)
        else:
            conn.close()
        self._seen = None
        self.unwritable = False

    def may_reopen(self, database: Path) -> None:
        """Raise JournalUnavailable("io_error") while an abandoned mapping of `database`'s
        ``-shm`` would be shared by a new connection."""
        if self.unwritable and not os.access(f"{database}-shm", os.W_OK):
            raise JournalUnavailable(
                "io_error", f"{database}-shm (the WAL index) still cannot be written"
            )


_abandoned: list[sqlite3.Connection] = []


def _abandon(conn: sqlite3.Connection) -> None:
    """Keep `conn` alive to the end of the process: its close would crash it."""
    import ctypes

    _abandoned.append(conn)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))  # not even finalised at exit
