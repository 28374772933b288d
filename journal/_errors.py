"""The journal's exception tree; every failure a caller can act on has one class and one reason.

JournalError
 ├── JournalUnavailable   the journal cannot be written now (reason: a JournalUnavailableReason)
 ├── JournalFormatError   the file is not a journal this code can use (not a journal, newer
 │                        schema, another journal's id, a row that does not decode)
 └── EventEncodeError     an event cannot be encoded (not JSON-representable); a caller's bug
"""

from __future__ import annotations

import errno
import re
import sqlite3
from typing import Final, Literal

__all__ = [
    "LASTING_UNAVAILABLE",
    "EventEncodeError",
    "JournalError",
    "JournalFormatError",
    "JournalUnavailable",
    "JournalUnavailableReason",
]

JournalUnavailableReason = Literal[
    "disk_full",  # SQLITE_FULL / ENOSPC, or the journal reached its max_bytes cap
    "read_only",  # the file, its directory or the filesystem refuses writes
    "locked",  # another writer holds the journal, or SQLite stayed busy past the timeout
    "io_error",  # the OS reported an I/O failure
    "cannot_open",  # the path cannot be opened or created
    "corrupt",  # SQLite reports a malformed database
    "chain_conflict",  # the schema refused an append (sequence or hash linkage): another writer?
    "closed",  # the writer was closed
    "replaced",  # the path no longer names the file the writer holds: unlinked, renamed, replaced
]
# The reasons a writer never recovers from by itself (its re-probe finds the same): a call
# refused for one of them is not worth retrying in this session.
LASTING_UNAVAILABLE: frozenset[str] = frozenset({"replaced", "closed"})


class JournalError(Exception):
    """Base class of every error raised by the journal package."""


class JournalUnavailable(JournalError):
    """The journal cannot record events; callers must not act as if it did (fail closed).

    ``reason`` is one of :data:`JournalUnavailableReason`; ``detail`` is a human-readable cause
    (an SQLite or OS error name), never a payload.
    """

    def __init__(self, reason: JournalUnavailableReason, detail: str = "") -> None:
        self.reason: JournalUnavailableReason = reason
        self.detail = detail
        super().__init__(f"journal unavailable ({reason})" + (f": {detail}" if detail else ""))


class JournalFormatError(JournalError):
    """The file is not a journal this code can read or write."""


class EventEncodeError(JournalError, ValueError):
    """An event could not be encoded as canonical JSON."""


_SQLITE_REASONS: Final[dict[int, JournalUnavailableReason]] = {
    sqlite3.SQLITE_FULL: "disk_full",
    sqlite3.SQLITE_READONLY: "read_only",
    sqlite3.SQLITE_PERM: "read_only",
    sqlite3.SQLITE_BUSY: "locked",
    sqlite3.SQLITE_LOCKED: "locked",
    sqlite3.SQLITE_IOERR: "io_error",
    sqlite3.SQLITE_CANTOPEN: "cannot_open",
    sqlite3.SQLITE_CORRUPT: "corrupt",
    sqlite3.SQLITE_NOTADB: "corrupt",
    sqlite3.SQLITE_CONSTRAINT: "chain_conflict",
}

_ERRNO_REASONS: Final[dict[int, JournalUnavailableReason]] = {
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EROFS: "read_only",
    errno.EACCES: "read_only",
    errno.EPERM: "read_only",
    errno.EWOULDBLOCK: "locked",
}


def classify_sqlite_error(exc: sqlite3.Error) -> JournalUnavailable:
    """Map an SQLite error to a JournalUnavailable with its reason (primary result code)."""
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    reason = _SQLITE_REASONS.get(code & 0xFF, "io_error") if isinstance(code, int) else "io_error"
    return JournalUnavailable(reason, f"{name}: {sqlite_reason(exc)}")


# sqlite3's words for a text it cannot read as UTF-8; they go on to quote the text whole.
_UNDECODABLE: Final = re.compile(r"Could not decode to UTF-8 column '([^']*)' with text ")


def undecodable(exc: sqlite3.Error) -> bool:
    """Whether sqlite3 refused a row because a text in it is not UTF-8."""
    return _UNDECODABLE.match(str(exc)) is not None


def sqlite_reason(exc: sqlite3.Error) -> str:
    """What an SQLite error says, without a journal's text it may quote: for a text that is
    not UTF-8, its column, not the text (which may hold anything: a secret, a terminal's
    controls)."""
    found = _UNDECODABLE.match(str(exc))
    if found is None:
        return str(exc)
    return f"a text in column {found.group(1)!r} is not UTF-8 (a row no bridge writes)"


def classify_os_error(exc: OSError) -> JournalUnavailable:
    """Map an OS error met while creating or locking the journal file."""
    reason = _ERRNO_REASONS.get(exc.errno or 0, "cannot_open")
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return JournalUnavailable(reason, f"{name}: {exc.strerror}")
