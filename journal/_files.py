"""Owner-only creation of the files and folders our commands make, whatever the umask.

Every package of ours creates through here (the reference runtime, which imports nothing of
ours, keeps its own copy in ``runtime._store``): a journal, its checkpoint export, the signing
key, an embedded runtime's folder, an audit's CSV files, an export, a client's config.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def make_private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents mode 0700 whatever the umask.

    Only directories created here are chmodded: a directory that already exists is not ours
    to change.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # another process made it first
        os.chmod(directory, 0o700)
    if not path.is_dir():  # a file (or a link to one) where a folder is wanted
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def private_opener(path: str, flags: int) -> int:
    """``open(path, mode, opener=private_opener)``: the file object of :func:`open_private`
    (its ``name`` is the path)."""
    return open_private(Path(path), flags)


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """Open ``path`` (created 0600 in folders made 0700 where missing) and return the fd; a
    regular file's mode is set with fchmod as well, so a permissive umask cannot widen it. Only
    a regular file: ``-o /dev/null`` or a FIFO is written to, never chmodded (a 0600 /dev/null
    breaks every other user of the machine)."""
    make_private_dir(path.parent)
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small(path: Path, limit: int) -> tuple[os.stat_result, bytes]:
    """What stands at ``path`` (links followed) and, when it is a regular file, its first
    ``limit + 1`` bytes (more than ``limit``: longer than the caller reads); b"" for anything
    else. Opened without blocking, so a FIFO does not wait for a writer, and a device is not
    read: the caller names what is wrong (``stat.S_ISREG`` of the result). FileNotFoundError
    when nothing is there."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        data = os.read(fd, limit + 1) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)
    return info, data
