"""Default locations of the bridge's files, following the XDG base directory spec."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(base) / "agentteam-bridge"


def default_runtime_db() -> Path:
    return data_dir() / "runtime.db"


def default_journal() -> Path:
    return data_dir() / "journal.db"
