"""`serve --embedded`: the reference runtime in-process on an ephemeral loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from runtime import Runtime, RuntimeConfig, open_runtime

from ._context import LaunchContext


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
    async with open_runtime(RuntimeConfig(db_path=str(db_path), admin_token=None)) as rt:
        sources = {
            "api_url": "embedded",
            "workspace_id": "embedded",
            "agent_id": "embedded",
            "bearer_token": EmbeddedToken.kind,
        }
        yield LaunchContext(rt.url, rt.workspace_id, rt.agent_id, EmbeddedToken(rt), sources)
