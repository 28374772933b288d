"""The test stand: a reference runtime on a database file, and bridges launched against it.

The runtime runs in the caller's trio loop (its fault injection and storage are at hand); each
bridge is a real subprocess with a clean environment and its own journal file.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from agentteam_task_bridge.runtime import FaultSpec, Runtime, RuntimeConfig, open_runtime

from .wire import RawBridge, bridge_env, open_raw_bridge

MARKER = "rel-"  # every task title and checkpoint summary the suite writes starts with it


@dataclass
class Stand:
    runtime: Runtime
    directory: Path
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def runtime_db(self) -> Path:
        return Path(self.runtime.db_path)

    def env(self, **overrides: str) -> dict[str, str]:
        """The bridge environment: the runtime's (a token command), with overrides."""
        env = bridge_env(self.runtime.bridge_env(), self.directory)
        env.update(overrides)
        return {k: v for k, v in env.items() if v}

    def bridge(
        self,
        journal: Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        client_name: str | None = None,
        initialize: bool = True,
    ) -> AbstractAsyncContextManager[RawBridge]:
        name = client_name or f"reliability-{next(self._names)}"
        return open_raw_bridge(
            journal,
            self.env() if env is None else env,
            *extra,
            client_name=name,
            initialize=initialize,
        )

    def arm(self, kind: str, op: str = "*", **options: Any) -> None:
        self.runtime.faults.arm(FaultSpec(kind=kind, op=op, **options))  # type: ignore[arg-type]

    @property
    def faults_fired(self) -> int:
        return self.runtime.faults.fired


@asynccontextmanager
async def open_stand(directory: Path) -> AsyncIterator[Stand]:
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    config = RuntimeConfig(db_path=str(directory / "runtime.db"))
    async with open_runtime(config) as runtime:
        yield Stand(runtime, directory)
