"""Drive `agentteam-bridge serve` as a real subprocess through the `mcp` SDK's stdio client."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import mcp_types as types
import trio
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from runtime import Runtime

CLIENT = types.Implementation(name="agentteam-tests", version="9.9.9")


@dataclass
class BridgeSession:
    session: ClientSession
    runtime: Runtime | None
    journal: Path
    errlog: IO[str]
    tools: list[types.Tool] = field(default_factory=list)

    async def call(
        self, name: str, arguments: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
    ) -> types.CallToolResult:
        return await self.session.call_tool(name, arguments or {}, meta=meta)

    async def ok(
        self, name: str, arguments: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        result = await self.call(name, arguments, meta)
        assert not result.is_error, result.structured_content
        assert result.structured_content is not None
        return result.structured_content

    async def fails(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        code: str,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        result = await self.call(name, arguments, meta)
        assert result.is_error, result.structured_content
        assert result.structured_content is not None
        error: dict[str, Any] = result.structured_content["error"]
        assert error["code"] == code, error
        return error

    def stderr(self) -> str:
        self.errlog.flush()
        self.errlog.seek(0)
        return self.errlog.read()


def bridge_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "bridge._cli", "serve", *extra]


@asynccontextmanager
async def open_bridge(
    env: Mapping[str, str], journal: Path, *extra: str, runtime: Runtime | None = None
) -> AsyncIterator[BridgeSession]:
    command = bridge_command("--journal", str(journal), *extra)
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={
            "XDG_CONFIG_HOME": str(journal.parent / "config"),
            "XDG_DATA_HOME": str(journal.parent / "data"),
            **env,
        },
    )
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, client_info=CLIENT) as session:
                with trio.fail_after(30):
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                yield BridgeSession(session, runtime, journal, errlog, tools)
