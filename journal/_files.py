"""Owner-only creation of the files and folders our commands make, whatever the umask.

Every package of ours creates through here (the reference runtime, which imports nothing of
ours, keeps its own copy in ``runtime._store``): a journal, its checkpoint export, the signing
key, an embedded runtime's folder, an audit's CSV files, an export, a client's config.
"""

from __future__ import annotations

import errno
import os
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
    """Open ``path`` (created 0600 in folders made 0700 where missing) and return the fd; the
    mode is set with fchmod as well, so a permissive umask cannot widen it."""
    make_private_dir(path.parent)
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd
