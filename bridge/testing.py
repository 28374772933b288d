"""Test doubles for the bridge's seams: drive the real call flow without a process or a network.

Like ``trio.testing`` and httpx's ``MockTransport``, this module is public so that every user of
the bridge (its tests, ``agentteam-replay rerun``, the benchmarks) shares one set of fakes. What
is faked is only what sits at a seam: the journal port, the token source and the upstream
transport. The :class:`~bridge._call.Bridge` in the middle is always the real one.

The names, kept stable:

``MemoryJournal``
    A journal port keeping ``(event, durable)`` pairs in ``events``; ``kinds()`` lists their
    kinds. Set ``broken`` and every append raises ``JournalFailed`` (reason ``disk_full``),
    as a full disk does.
``ScriptedTokens``
    A token source answering from a list (the last one repeats) or from a function of the
    fetch number (1, 2, ...); ``fetched`` counts the fetches, ``kind`` is what is journaled.
``upstream_task(**fields)``
    One task as the Agent Runtime's DTO shapes it (camelCase), for scripted transports.
``launch_context(url, tokens, ...)``
    The launch context ``serve`` would read from the environment (same journaled sources).
``bridge_over(upstream, ...)``
    A :class:`Bridge` over ``upstream``: a handler ``request -> response`` (wrapped in an
    ``httpx.MockTransport``), any ``httpx`` transport, or the URL of a real runtime (the
    bridge's own HTTP/1.1 pool). The journal defaults to a ``MemoryJournal``.
``serve_in_memory(bridge, journal)``
    The session ``serve`` runs (session start and end journaled), with the real MCP server and
    the SDK's client joined by memory streams instead of stdio; yields the client session.

Example (the call flow against a scripted upstream, nothing written to disk)::

    import httpx
    from agentteam_task_bridge.bridge.testing import MemoryJournal, bridge_over, upstream_task

    journal = MemoryJournal()
    bridge = bridge_over(lambda request: httpx.Response(200, json={"task": upstream_task()}),
                         journal=journal)
    result = await bridge.call("task_get", {"channel": "general", "number": 1}, {}, 1)
    assert journal.kinds()[-1] == "call_result"
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import trio

from agentteam_task_bridge.journal import Event, SessionEnded

from ._call import Bridge, JournalPort, Session
from ._compat import Policy
from ._context import Credentials, LaunchContext, TokenSource
from ._cursor import Cursors
from ._exceptions import JournalFailed
from ._upstream import UpstreamClient

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client import ClientSession

__all__ = [
    "MemoryJournal",
    "ScriptedTokens",
    "bridge_over",
    "launch_context",
    "serve_in_memory",
    "upstream_task",
]

Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class MemoryJournal:
    """A journal port that keeps every event in memory, or fails like a full disk."""

    events: list[tuple[Event, bool]] = field(default_factory=list)
    broken: bool = False

    @property
    def healthy(self) -> bool:
        return not self.broken

    async def append(self, event: Event, *, durable: bool = False) -> None:
        if self.broken:
            raise JournalFailed("disk full", "disk_full")
        self.events.append((event, durable))

    def kinds(self) -> list[str]:
        return [e.kind for e, _ in self.events]

    def clear(self) -> None:
        self.events.clear()


@dataclass
class ScriptedTokens:
    """Tokens from a script: a list (the last repeats) or a function of the fetch number."""

    tokens: Sequence[str] | Callable[[int], str]
    kind: str = "test:tokens"
    refreshable: bool = True
    fetched: int = 0

    async def fetch(self) -> str:
        self.fetched += 1
        if callable(self.tokens):
            return self.tokens(self.fetched)
        return self.tokens[min(self.fetched, len(self.tokens)) - 1]


def upstream_task(**fields: Any) -> dict[str, Any]:
    """One task as the Agent Runtime answers it (camelCase DTO); `fields` override the defaults."""
    task: dict[str, Any] = {
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
    task.update(fields)
    return task


def launch_context(
    url: str,
    tokens: TokenSource,
    *,
    workspace_id: str = "ws_1",
    agent_id: str = "agt_1",
    sources: Mapping[str, str] | None = None,
) -> LaunchContext:
    """What `serve` reads from AGENTTEAM_API_URL, _WORKSPACE_ID, _AGENT_ID and a token source."""
    journaled = {
        "api_url": "env:AGENTTEAM_API_URL",
        "workspace_id": "env:AGENTTEAM_WORKSPACE_ID",
        "agent_id": "env:AGENTTEAM_AGENT_ID",
        "bearer_token": tokens.kind,
        **(sources or {}),
    }
    return LaunchContext(url.rstrip("/"), workspace_id, agent_id, tokens, journaled)


def bridge_over(
    upstream: Handler | httpx.AsyncBaseTransport | str,
    *,
    journal: JournalPort | None = None,
    tokens: TokenSource | None = None,
    launch: LaunchContext | None = None,
    credentials: Credentials | None = None,
    workspace_id: str = "ws_1",
    agent_id: str = "agt_1",
    session: Session | None = None,
    compat: Policy = "hint",
    timeout_seconds: float = 10.0,
    cursors: Cursors | None = None,
) -> Bridge:
    """The real call flow over a fake or real upstream (close it with ``bridge.upstream.aclose``
    when ``upstream`` is a URL: the bridge's pool holds connections)."""
    transport: httpx.AsyncBaseTransport | None = None
    if isinstance(upstream, httpx.AsyncBaseTransport):
        transport = upstream
    elif not isinstance(upstream, str):
        transport = httpx.MockTransport(upstream)
    tokens = tokens or ScriptedTokens(["tok-1", "tok-2", "tok-3"])
    if launch is None:
        url = upstream if isinstance(upstream, str) else "http://upstream.test"
        launch = launch_context(url, tokens, workspace_id=workspace_id, agent_id=agent_id)
    base_url = upstream if isinstance(upstream, str) else launch.api_url
    return Bridge(
        launch,
        credentials or Credentials(launch.token_source),
        UpstreamClient(base_url, timeout_seconds=timeout_seconds, transport=transport),
        journal or MemoryJournal(),
        session or Session("s_test"),
        compat,
        cursors=cursors,
    )


@asynccontextmanager
async def serve_in_memory(
    bridge: Bridge,
    journal: JournalPort,
    *,
    client_info: types.Implementation | None = None,
) -> AsyncIterator[ClientSession]:
    """One MCP session as `serve` runs it, over memory streams: the SDK's server on the real call
    flow, its client initialized; the session's start and end are journaled as `serve` does."""
    # Imported here: the MCP client is for tests; `rerun` uses the rest of this module.
    from mcp.client import ClientSession
    from mcp.shared.memory import create_client_server_memory_streams

    from ._server import _SessionLog, build_server

    session = bridge.session
    session_log = _SessionLog(journal, session, bridge.launch, bridge.compat)
    server = build_server(bridge, session_log)
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                server.run,
                server_streams[0],
                server_streams[1],
                server.create_initialization_options(),
            )
            async with ClientSession(*client_streams, client_info=client_info) as client:
                with trio.fail_after(30):  # bounds a hang only
                    await client.initialize()
                yield client
            nursery.cancel_scope.cancel()
    with trio.CancelScope(shield=True):
        await session_log.start(None)
        await journal.append(
            Event(
                session_id=session.session_id,
                payload=SessionEnded(reason="stdin closed", calls=session.calls),
            ),
            durable=True,
        )
