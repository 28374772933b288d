"""An in-process bridge over a real journal and an httpx transport, for tables of fault cases.

The bridge, the journal writer and `replay.verify` are the real ones; only the upstream is a
test transport (`httpx.MockTransport` or a scripted one) and the MCP client is a direct call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types

import journal
import replay
from bridge._call import Bridge, Session
from bridge._context import Credentials, LaunchContext, TokenSource
from bridge._journaling import JournalAdapter
from bridge._upstream import UpstreamClient
from journal import Event, SessionEnded, SessionStarted

from .journal_helpers import KEY

SESSION = "s_inproc"


class StaticTokens:
    kind = "test:static"
    refreshable = False

    async def fetch(self) -> str:
        return "tok-inproc"


@asynccontextmanager
async def inprocess_bridge(
    path: Path,
    transport: httpx.AsyncBaseTransport | None,
    *,
    tokens: TokenSource | None = None,
    url: str = "http://upstream.test",
    workspace_id: str = "ws_1",
    agent_id: str = "agt_1",
    **writer_options: Any,
) -> AsyncIterator[tuple[Bridge, journal.AsyncWriter]]:
    """A bridge session journaling to `path`: session start and end included, so `verify`
    holds every call to its whole story. No transport: the bridge's own HTTP/1.1 pool to `url`."""
    source = tokens or StaticTokens()
    launch = LaunchContext(
        url,
        workspace_id,
        agent_id,
        source,
        {"api_url": "test", "workspace_id": "test", "agent_id": "test", "bearer_token": "test"},
    )
    upstream = UpstreamClient(url, transport=transport)
    async with journal.open_writer(path, key=KEY, **writer_options) as writer:
        adapter = JournalAdapter(writer)
        await writer.append(
            Event(
                session_id=SESSION,
                payload=SessionStarted(
                    bridge_version="test",
                    compat_policy="hint",
                    workspace_id=workspace_id,
                    agent_id=agent_id,
                ),
            )
        )
        bridge = Bridge(launch, Credentials(source), upstream, adapter, Session(SESSION))
        try:
            yield bridge, writer
        finally:
            await upstream.aclose()
            if writer.failed is None:
                await writer.append(
                    Event(session_id=SESSION, payload=SessionEnded(reason="test", calls=0))
                )


def verified(path: Path) -> replay.VerifyResult:
    result = replay.verify([path], key=KEY)
    assert result.ok, result.findings
    return result


def kinds_of(path: Path) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {}
    with journal.open_reader(path) as reader:
        for record in reader.events():
            if record.call_id:
                calls.setdefault(record.call_id, []).append(record.kind)
    return calls


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error and result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


# A task as the upstream DTO shapes it (camelCase), for scripted transports.
TASK = {
    "channel": "general",
    "number": 1,
    "scopeId": "tsk_1",
    "title": "t",
    "status": "todo",
    "priority": None,
    "assignee": None,
    "labels": [],
    "parent": None,
    "subtaskCount": 0,
    "updatedAt": "2026-12-02T00:00:00.000000Z",
}
