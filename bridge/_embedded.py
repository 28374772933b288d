"""`serve --embedded`: the reference runtime in-process on an ephemeral loopback port.

Its database is shared: every embedded session of one user opens the same file (SQLite WAL, one
transaction per operation, a busy timeout), so they all see one board. The file is created 0600
in a 0700 directory whatever the umask, and a file that is not the runtime's is refused untouched.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agentteam_task_bridge.runtime import Runtime, RuntimeConfig, open_runtime

from ._context import ConfigError, LaunchContext
from ._journaling import sqlite_tables
from ._paths import make_private_dir

_FIX = "pass --runtime-db another path"
_RUNTIME_TABLES = frozenset({"schema_migrations", "workspaces", "boards", "tasks", "tokens"})


@dataclass
class EmbeddedToken:
    """Tokens minted by the in-process runtime itself; refreshable like a token command."""

    runtime: Runtime
    kind: str = "embedded:reference-runtime"

    async def fetch(self) -> str:
        return self.runtime.mint_token()

    @property
    def refreshable(self) -> bool:
        return True


@asynccontextmanager
async def open_embedded(db_path: Path) -> AsyncIterator[LaunchContext]:
    prepare_runtime_db(db_path)
    async with AsyncExitStack() as stack:
        try:
            rt = await stack.enter_async_context(
                open_runtime(RuntimeConfig(db_path=str(db_path), admin_token=None))
            )
        except (OSError, sqlite3.Error, RuntimeError) as exc:
            raise ConfigError(
                f"cannot open the embedded runtime's database {db_path} "
                f"({getattr(exc, 'strerror', None) or exc}); {_FIX}"
            ) from None
        sources = {
            "api_url": "embedded",
            "workspace_id": "embedded",
            "agent_id": "embedded",
            "bearer_token": EmbeddedToken.kind,
        }
        yield LaunchContext(rt.url, rt.workspace_id, rt.agent_id, EmbeddedToken(rt), sources)


def prepare_runtime_db(db_path: Path) -> None:
    """Create the database file 0600 (SQLite gives its -wal and -shm the same mode), or refuse
    an existing file that is not the runtime's, before the runtime opens (and migrates) it."""
    try:
        make_private_dir(db_path.parent)
        fd = os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        # Another session may be creating it right now: only a file with other tables (or not
        # a file) is refused; one with none yet is the runtime's to initialise.
        tables = sqlite_tables(db_path) if db_path.is_file() else {"(a directory)"}
        if tables and not tables & _RUNTIME_TABLES:
            raise ConfigError(
                f"{db_path} is not the embedded runtime's database; it was left untouched; {_FIX}"
            ) from None
        return
    except OSError as exc:
        raise ConfigError(
            f"cannot create the embedded runtime's database {db_path} "
            f"({exc.strerror or exc}); {_FIX}"
        ) from None
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
