"""Drive `agentteam-bridge serve` as a real subprocess through the `mcp` SDK's stdio client."""

from __future__ import annotations

import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import mcp_types as types
import trio
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

CLIENT = types.Implementation(name="agentteam-tests", version="9.9.9")

# The event grammar of one call (replay's `verify` checks the same).
CALL_GRAMMAR = re.compile(
    r"call_received (deprecated_usage )*"
    r"(call_rejected"
    r"|call_cancelled"
    r"|context_injected "
    r"(upstream_request (upstream_response (deprecated_usage )?"
    r"(token_refreshed (upstream_request (upstream_response (deprecated_usage )?)?)?)?)?)?"
    r"(call_result|call_error|call_cancelled))$"
)


def journal_calls(path: Path) -> dict[str, list[str]]:
    """Each call's event kinds, in order."""
    calls: dict[str, list[str]] = defaultdict(list)
    with journal.open_reader(path) as reader:
        for record in reader.events():
            if record.call_id:
                calls[record.call_id].append(record.kind)
    return calls


def assert_journal_sound(path: Path) -> None:
    """The journal verifies, and every call in it tells its whole story.

    The signatures are checked under the key the journal names (the test's own bridge wrote it;
    trusting a named key is for tests, never for an audit).
    """
    with journal.open_reader(path) as reader:
        report = journal.verify(reader, trust_recorded_keys=True)
    assert report.ok, report.findings
    for call_id, kinds in journal_calls(path).items():
        assert CALL_GRAMMAR.match(" ".join(kinds)), (call_id, kinds)


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

    async def cancel_in_flight(
        self, name: str, arguments: dict[str, Any], *, reached: Callable[[], bool] | None = None
    ) -> None:
        """Call, and cancel the call once `reached()` (default: the runtime has taken a fault
        the caller armed, so it holds the request); never a race against a clock."""
        runtime = self.runtime
        fired = runtime.faults.fired if runtime is not None else 0

        def upstream_holds() -> bool:
            assert runtime is not None
            return runtime.faults.fired > fired

        ready = reached or upstream_holds
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.call, name, arguments)
                with trio.fail_after(60):  # bounds a hang only
                    while not ready():  # noqa: ASYNC110 - state of another process
                        await trio.sleep(0.01)
                scope.cancel()
        assert scope.cancelled_caught

    def stderr(self) -> str:
        self.errlog.flush()
        self.errlog.seek(0)
        return self.errlog.read()


def bridge_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", *extra]


@asynccontextmanager
async def open_bridge(
    env: Mapping[str, str],
    journal_path: Path,
    *extra: str,
    runtime: Runtime | None = None,
    check_journal: bool = True,
) -> AsyncIterator[BridgeSession]:
    command = bridge_command("--journal", str(journal_path), *extra)
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={
            "XDG_CONFIG_HOME": str(journal_path.parent / "config"),
            "XDG_DATA_HOME": str(journal_path.parent / "data"),
            **env,
        },
    )
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, client_info=CLIENT) as session:
                with trio.fail_after(30):
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                yield BridgeSession(session, runtime, journal_path, errlog, tools)
    if check_journal:
        assert_journal_sound(journal_path)
