"""Default locations of the bridge's files (XDG base directories) and owner-only creation.

The default journal location is a directory, a pool of journal files: each session takes the
first file no live bridge holds (the writer's exclusive lock, held for the session's life) and
creates ``journal-<n>.db`` when all are held. So any number of sessions start with the default
configuration, the file count stays at the peak concurrency, and every file stays one hash
chain with one writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

# The bridge's files are created as every package's are.
from agentteam_task_bridge.journal import make_private_dir as make_private_dir

POOL_PREFIX: Final = "journal-"
POOL_SUFFIX: Final = ".db"


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "agentteam-bridge"


def default_runtime_db() -> Path:
    return data_dir() / "runtime.db"


def default_journal_dir() -> Path:
    """The default journal pool: ``$XDG_DATA_HOME/agentteam-bridge/journals/``."""
    return data_dir() / "journals"


def legacy_journal() -> Path:
    """The single journal file of earlier versions (still read by `agentteam-replay`)."""
    return data_dir() / "journal.db"


def journal_setting(env: os._Environ[str] | dict[str, str] | None = None) -> str:
    """``$AGENTTEAM_JOURNAL`` or the default pool directory (with its trailing slash)."""
    environ = os.environ if env is None else env
    return environ.get("AGENTTEAM_JOURNAL") or f"{default_journal_dir()}{os.sep}"


def is_pool(setting: str | os.PathLike[str]) -> bool:
    """A journal setting names a pool when it is a directory or ends with a path separator."""
    text = os.fspath(setting)
    return text.endswith(("/", os.sep)) or Path(text).expanduser().is_dir()


def pool_file(directory: Path, number: int) -> Path:
    return directory / f"{POOL_PREFIX}{number}{POOL_SUFFIX}"


def loose_mode(path: Path, *, directory: bool) -> str | None:
    """The chmod that would make ``path`` owner-only, or None when it already is (or is absent)."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:  # absent, or under a file: whoever creates it reports that
        return None
    if mode & 0o077 == 0:
        return None
    return f"chmod {'700' if directory else '600'} {path}"
