"""The bridge's side of the journal: choose and open the session's file, register secrets, fail
closed.

A journal setting names either one file (used as is, refused when another session holds it) or a
pool directory (the default): the session takes the first ``journal-<n>.db`` that no live bridge
holds and creates the next one when all are held. The writer's exclusive lock on the file, held
for the session's life, is what "holds" means, so a crashed session's file is free again at once.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, NamedTuple
from urllib.parse import quote

import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Event

from ._exceptions import JournalFailed
from ._paths import is_pool, loose_mode, make_private_dir, pool_file

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
# Any one marks a journal (perhaps being created by another session right now).
_JOURNAL_TABLES: Final = frozenset({"_sqlite_migrations", "events", "journal_meta", "event_kinds"})
_FIX: Final = "pass --journal another file or a directory (or set AGENTTEAM_JOURNAL)"


def _open_failed(message: str) -> JournalFailed:
    """The journal cannot be used; the one-line message names the path, why, and what to change."""
    return JournalFailed(message, stage="open")


class JournalAdapter:
    """A JournalPort over `journal`'s writer: classified failures, health for fail-closed."""

    def __init__(
        self,
        writer: journal.JournalWriter,
        key_path: Path | None = None,
        created_key: journal.SigningKey | None = None,
    ) -> None:
        self._writer = writer
        self.key_path = key_path
        # The signing key this start created: serve names it once it has started, so a failed
        # start stays one line.
        self.created_key = created_key

    @property
    def path(self) -> Path:
        """The journal's name: its first segment's path, which stands for all its segments in
        `agentteam-replay` (the writer appends to the live one)."""
        return journal.base_path(self._writer.path)

    @property
    def healthy(self) -> bool:
        return not self._writer.failed

    @property
    def failure_reason(self) -> str | None:
        failed = self._writer.failed
        return None if failed is None else failed.reason

    def add_secret(self, value: str) -> None:
        self._writer.add_secret(value)

    def health(self) -> tuple[int, int, int, float]:
        """(events appended, committed, lost, seconds degraded) so far: the metrics' journal
        health, read from the exporter's thread (plain counters, no lock needed)."""
        stats = self._writer.stats
        return stats.appended, stats.committed, stats.lost, stats.degraded_seconds

    async def append(self, event: Event, *, durable: bool = False) -> None:
        try:
            await self._writer.append(event, durable=durable)
        except journal.JournalUnavailable as exc:
            raise JournalFailed(str(exc), exc.reason) from None


@asynccontextmanager
async def open_journal(
    setting: str | os.PathLike[str],
    *,
    durable: bool = True,
    max_bytes: int | None = None,
    key_path: Path | None = None,
    segment_bytes: int | None = None,
    segment_age: float | None = None,
) -> AsyncIterator[JournalAdapter]:
    """Open the session's journal: ``setting`` is one file, or a pool directory (see module).

    ``segment_bytes`` / ``segment_age``: when the journal rolls over into a new segment file
    (see :mod:`journal._segments`); a pool file's segments belong to it.
    """
    key_path = key_path or journal.default_key_path()
    target, pool, created = await trio.to_thread.run_sync(_prepare, setting, key_path)
    options = _Options(durable, max_bytes, key_path, segment_bytes, segment_age)
    if pool:
        writer_cm, writer = await _open_from_pool(target, options)
    else:
        opened = await _try_open(target, options, pool=False)
        assert opened is not None  # only a pool file is skipped
        writer_cm, writer = opened
    try:
        yield JournalAdapter(writer, key_path, created)
    finally:
        await writer_cm.__aexit__(None, None, None)


def _prepare(
    setting: str | os.PathLike[str], key_path: Path
) -> tuple[Path, bool, journal.SigningKey | None]:
    """Check (or create) the key and make the journal's directory: the file or pool directory,
    whether it is a pool, and the key if this start created it."""
    created = check_key_file(key_path)
    target = Path(setting).expanduser()
    pool = is_pool(setting)
    _make_dir(target if pool else target.parent)
    return target, pool, created


class _Options(NamedTuple):
    durable: bool
    max_bytes: int | None
    key_path: Path
    segment_bytes: int | None
    segment_age: float | None


async def _open_from_pool(directory: Path, options: _Options) -> tuple[Any, journal.JournalWriter]:
    """The first pool file no one holds, created when all are held (a race for a new file is
    settled by its lock: the loser moves on to the next number)."""
    number = 0
    while True:
        number += 1
        candidate = pool_file(directory, number)
        opened = await _try_open(candidate, options, pool=True)
        if opened is not None:
            return opened


async def _try_open(
    path: Path, options: _Options, *, pool: bool
) -> tuple[Any, journal.JournalWriter] | None:
    """The opened writer of ``path`` (its live segment) and its context; None for a pool file
    someone else holds."""
    await trio.to_thread.run_sync(refuse_foreign_file, path)
    key_path = options.key_path
    writer_cm = journal.open_writer(
        path,
        key=key_path,
        max_bytes=options.max_bytes,
        synchronous_full=options.durable,
        checkpoint_path=checkpoint_path(path),
        segment_bytes=options.segment_bytes,
        segment_age=options.segment_age,
    )
    try:
        writer = await writer_cm.__aenter__()
    except journal.JournalUnavailable as exc:
        if exc.reason == "locked" and pool:
            return None  # held by a live session (or another program): take the next
        raise _open_failed(_unavailable_message(path, exc)) from None
    except journal.JournalFormatError as exc:
        raise _open_failed(f"{path} is not a usable journal ({exc}); {_FIX}") from None
    except sqlite3.Error as exc:  # met before the journal could classify it
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise _open_failed(f"cannot open the journal {path} ({exc}); {_FIX}") from None
        if pool:
            return None
        busy = journal.JournalUnavailable("locked", "SQLite busy")
        raise _open_failed(_unavailable_message(path, busy)) from None
    except OSError as exc:
        raise _open_failed(
            f"cannot open the journal {path} ({exc.strerror or exc}); {_FIX}"
        ) from None
    except ValueError as exc:  # the key file's content
        raise _open_failed(
            f"the journal key file {key_path} is not a valid key ({exc}); restore it, or move it "
            "away and a new key is created"
        ) from None
    return writer_cm, writer


def _unavailable_message(path: Path, exc: journal.JournalUnavailable) -> str:
    if exc.reason == "locked" and exc.detail.startswith("another writer"):
        return (
            f"the journal {path} is in use by another agentteam-bridge session; give each "
            "session its own: pass --journal a directory (a pool, as the default is) or "
            "another file"
        )
    if exc.reason == "locked":
        return (
            f"the journal {path} is locked by another program (SQLite busy); close that "
            f"program, or {_FIX}"
        )
    if exc.reason in ("read_only", "cannot_open"):
        return f"cannot write the journal {path} ({exc.detail or exc.reason}); {_FIX}"
    return f"cannot open the journal {path} ({exc}); {_FIX}"


def _make_dir(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise _open_failed(f"{directory} is not a directory; {_FIX}")
    try:
        make_private_dir(directory)
    except OSError as exc:
        raise _open_failed(
            f"cannot create the journal directory {directory} ({exc.strerror or exc}); {_FIX}"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise _open_failed(f"the journal directory {directory} is not writable; {_FIX}")


def check_key_file(key_path: Path) -> journal.SigningKey | None:
    """Refuse a key file or key directory other users can reach (as ssh refuses a loose private
    key): a key that was readable may have been read, and tightening it would hide that. Creates
    the key when there is none, and returns it then (None when it existed)."""
    for path, directory in ((key_path.parent, True), (key_path, False)):
        fix = loose_mode(path, directory=directory)
        if fix is not None:
            what = "directory" if directory else "file"
            raise _open_failed(
                f"the journal key {what} {path} is open to other users; "
                f"run `{fix}` (and replace the key if others may have read it)"
            )
    if key_path.exists():
        if not key_path.is_file() or not os.access(key_path, os.R_OK):
            raise _open_failed(
                f"the journal key file {key_path} cannot be read; fix its owner or move it away "
                "and a new key is created"
            )
        return None
    try:
        make_private_dir(key_path.parent)
    except OSError as exc:
        raise _open_failed(
            f"cannot create the key directory {key_path.parent} ({exc.strerror or exc}); "
            "set XDG_CONFIG_HOME to a writable directory"
        ) from None
    return _create_key_atomically(key_path)


def _create_key_atomically(key_path: Path) -> journal.SigningKey | None:
    """Create the key whole under a temporary name, then link it into place.

    Sessions starting together in a fresh home race to create the key: written in place, one
    could read it half-written (empty) and refuse to start. A link appears complete or not at all,
    and the loser of the race uses the winner's key (and returns None: it created nothing).
    """
    temp = key_path.with_name(f".{key_path.name}.{os.getpid()}.tmp")
    try:
        temp.unlink(missing_ok=True)
        key = journal.load_key(temp, announce=False)  # creates it 0600, written and fsynced
        os.link(temp, key_path)
        return key
    except FileExistsError:
        return None
    except OSError as exc:
        raise _open_failed(
            f"cannot create the journal key {key_path} ({exc.strerror or exc}); "
            "set XDG_CONFIG_HOME to a writable directory"
        ) from None
    finally:
        temp.unlink(missing_ok=True)


def refuse_foreign_file(path: Path) -> None:
    """Refuse, before anything opens it for writing, a file that is positively not a journal.

    Nothing is changed on such a file (its mode included). A file this check cannot read is left
    to the writer, which reports why.
    """
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_MAGIC))
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return
    if not head:
        return  # empty: a journal about to be created
    if head != _SQLITE_MAGIC:
        raise _open_failed(f"{path} is not a journal (not an SQLite database); {_FIX}")
    tables = sqlite_tables(path)
    if tables and not tables & _JOURNAL_TABLES:
        raise _open_failed(
            f"{path} is an SQLite database but not a journal; it was left untouched; {_FIX}"
        )


def sqlite_tables(path: Path) -> set[str] | None:
    """The table names of an SQLite file, or None when it cannot be read.

    Read as immutable: no lock, no ``-wal`` or ``-shm`` created beside a file that may not be
    ours (tables still only in another program's WAL are not seen; the writer catches those).
    """
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=1.0)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return {row[0] for row in rows}


def checkpoint_path(journal_path: Path) -> Path:
    """Where the latest signed checkpoint is exported, outside the database file."""
    return journal_path.with_name(journal_path.name + ".checkpoint.json")
