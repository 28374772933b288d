"""Test doubles for the bridge's seams: drive the real call flow without a process or a network.

Like ``trio.testing`` and httpx's ``MockTransport``, this module is public so that every user of
the bridge (its tests, ``agentteam-replay rerun``, the benchmarks) shares one set of fakes. What
is faked is only what sits at a seam: the journal port, the token source and the upstream
transport (the ``Transport`` of :mod:`bridge._upstream`, ``Http11Pool`` in production). The
:class:`~bridge._call.Bridge` in the middle is always the real one.

The names, kept stable:

``MemoryJournal``
    A journal port keeping ``(event, durable)`` pairs in ``events``; ``kinds()`` lists their
    kinds. Set ``broken`` and every append raises ``JournalFailed`` (reason ``disk_full``),
    as a full disk does.
``ScriptedTokens``
    A token source answering from a list (the last one repeats) or from a function of the
    fetch number (1, 2, ...); ``fetched`` counts the fetches, ``kind`` is what is journaled.
``ScriptedTransport(script)``
    A transport answering each request (a ``Sent``: method, target, headers, body) from a
    script: a function of the request, or a list used in order. An answer is a ``Recorded``
    exchange (status, headers, body) or a ``Fail``: a failure *kind*, one of the retry table's
    transport rows (``connect_refused``, ``dropped_before_send``, ``timeout_before_send``,
    ``timeout_after_send``, ``dropped_after_send`` for a reset, ``unusable_answer`` for a body
    over the size limit), with the reason the pool would give, raised as the pool raises it.
    ``transport_row(message)`` names the row a journaled error message was written for.
``HttpxTransport(base_url, upstream)``
    httpx as the transport: a handler ``httpx.Request -> httpx.Response`` or any ``httpx``
    transport, httpx's exceptions turned into the pool's failure kinds (httpx is the oracle the
    pool's own tests compare with).
``upstream_task(**fields)``
    One task as the Agent Runtime's DTO shapes it (camelCase), for scripted transports.
``launch_context(url, tokens, ...)``
    The launch context ``serve`` would read from the environment (same journaled sources).
``bridge_over(upstream, ...)``
    A :class:`Bridge` over ``upstream``: a handler ``request -> response`` (wrapped in an
    ``httpx.MockTransport``), any ``httpx`` transport, a ``ScriptedTransport``, or the URL of a
    real runtime (the bridge's own HTTP/1.1 pool). The journal defaults to a ``MemoryJournal``.
``serve_in_memory(bridge, journal)``
    The session ``serve`` runs (session start, handshake and end journaled): the SDK's client
    speaks JSON lines over memory to the same front door as stdio (direct path included) and
    the real MCP server behind it; yields the client session.

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

import math
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import parse_qsl

import httpx
import trio

from agentteam_task_bridge.journal import Event, SessionEnded

from ._call import Bridge, JournalPort, Session
from ._compat import Policy
from ._context import Credentials, LaunchContext, TokenSource
from ._cursor import Cursors
from ._errors import FAILURES
from ._exceptions import JournalFailed
from ._upstream import Transport, TransportFailure, UpstreamClient

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client import ClientSession

__all__ = [
    "Fail",
    "FailureKind",
    "HttpxTransport",
    "MemoryJournal",
    "Recorded",
    "ScriptedTokens",
    "ScriptedTransport",
    "Sent",
    "bridge_over",
    "launch_context",
    "serve_in_memory",
    "transport_row",
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

    @property
    def failure_reason(self) -> str | None:
        return "disk_full" if self.broken else None

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


# The retry table's rows for a request without an HTTP answer, and the pool's failure that is
# each (kind, sent): what `transport_error` (bridge._upstream_errors) reads back into the row.
FailureKind = Literal[
    "connect_refused",
    "dropped_before_send",
    "timeout_before_send",
    "timeout_after_send",
    "dropped_after_send",
    "unusable_answer",
]
_POOL_FAILURE: Final[dict[FailureKind, tuple[str, bool]]] = {
    "connect_refused": ("connect_failed", False),
    "dropped_before_send": ("closed", False),
    "timeout_before_send": ("connect_timeout", False),
    "timeout_after_send": ("timeout", True),
    "dropped_after_send": ("connection_dropped", True),  # a reset, or broken framing
    "unusable_answer": ("response_too_large", True),
}
_UNSAFE_VALUE: Final = re.compile(rb"[\r\n\0]")


def transport_row(message: str) -> FailureKind | None:
    """The transport row whose text a journaled error message starts with (None: another)."""
    for kind in _POOL_FAILURE:
        if message.startswith(FAILURES[kind]):
            return kind
    return None


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the transport received it."""

    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes | None

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.target.partition("?")[2], keep_blank_values=True))


@dataclass(frozen=True, slots=True)
class Recorded:
    """An HTTP answer: status, headers (any case), body."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fail:
    """No HTTP answer, of one kind, with the reason the pool gave (or none)."""

    kind: FailureKind
    reason: str | None = None

    def error(self) -> TransportFailure:
        kind, sent = _POOL_FAILURE[self.kind]
        return TransportFailure(kind, sent=sent, reason=self.reason)


class ScriptedTransport:
    """A Transport answering from a script (a function of the request, or a list in order);
    every request is kept in ``sent``. Header values are checked as the pool checks them."""

    def __init__(self, script: Callable[[Sent], Recorded | Fail] | Sequence[Recorded | Fail]):
        self._script = script
        self._next = 0
        self.sent: list[Sent] = []
        self.closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if self.closed:
            raise TransportFailure("closed", sent=False)
        if any(_UNSAFE_VALUE.search(value) for _, value in headers):
            raise TransportFailure("invalid_request", sent=False)
        sent = Sent(method, target, list(headers), body)
        self.sent.append(sent)
        if callable(self._script):
            answer = self._script(sent)
        else:
            answer = self._script[min(self._next, len(self._script) - 1)]
            self._next += 1
        await trio.lowlevel.checkpoint()
        if isinstance(answer, Fail):
            raise answer.error()
        fields = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()
        ]
        return answer.status, fields, answer.body

    async def aclose(self) -> None:
        self.closed = True


class HttpxTransport:
    """httpx as a Transport (a handler or an ``httpx`` transport under an ``AsyncClient``), its
    exceptions turned into the pool's failure kinds; a TransportFailure passes as raised."""

    def __init__(
        self,
        base_url: str,
        upstream: Handler | httpx.AsyncBaseTransport,
        *,
        timeout_seconds: float = 10.0,
    ) -> None:
        if not isinstance(upstream, httpx.AsyncBaseTransport):
            upstream = httpx.MockTransport(upstream)
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(timeout_seconds, connect=min(3.0, timeout_seconds)),
            headers={"user-agent": "agentteam-task-bridge", "accept": "application/json"},
            transport=upstream,
            trust_env=False,
        )

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        request = self._client.build_request(method, target, content=body, headers=headers)
        try:
            response = await self._client.send(request)
            content = response.content
        except httpx.ConnectError:
            raise TransportFailure("connect_failed", sent=False) from None
        except httpx.ConnectTimeout:
            raise TransportFailure("connect_timeout", sent=False) from None
        except httpx.PoolTimeout:
            raise TransportFailure("pool_timeout", sent=False) from None
        except httpx.TimeoutException:
            raise TransportFailure("timeout", sent=True) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise TransportFailure("connection_dropped", sent=True) from None
        fields = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers.multi_items()
        ]
        return response.status_code, fields, content

    async def aclose(self) -> None:
        await self._client.aclose()


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
    upstream: Handler | httpx.AsyncBaseTransport | Transport | str,
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
    tokens = tokens or ScriptedTokens(["tok-1", "tok-2", "tok-3"])
    if launch is None:
        url = upstream if isinstance(upstream, str) else "http://upstream.test"
        launch = launch_context(url, tokens, workspace_id=workspace_id, agent_id=agent_id)
    base_url = upstream if isinstance(upstream, str) else launch.api_url
    transport: Transport | None = None
    if isinstance(upstream, httpx.AsyncBaseTransport) or callable(upstream):
        transport = HttpxTransport(base_url, upstream, timeout_seconds=timeout_seconds)
    elif not isinstance(upstream, str):
        transport = upstream
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
    direct: bool = True,
) -> AsyncIterator[ClientSession]:
    """One MCP session as `serve` runs it, over memory instead of stdio: the SDK's client speaks
    JSON lines to the same front door (`bridge._door`: the direct path on unless `direct` is
    False or tracing is live) and the SDK's server on the real call flow; the session's start
    and end are journaled as `serve` does. Leaving the block is stdin's end: calls in flight are
    drained as `serve` drains them."""
    # Imported here: the MCP client is for tests; `rerun` uses the rest of this module.
    from mcp.client import ClientSession
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    from ._door import Door, MemoryWire
    from ._lifecycle import STDIN_CLOSED, Shutdown, Unanswered
    from ._server import _journal_undelivered, _SessionLog, build_server

    session = bridge.session
    if session.unanswered is None:
        session.unanswered = Unanswered()
    session_log = _SessionLog(journal, session, bridge.launch, bridge.compat)
    await session_log.start()
    shutdown = Shutdown()
    door = Door(
        bridge.answer,
        shutdown=shutdown,
        unanswered=session.unanswered,
        direct=direct and bridge.tracing is None,
        on_handshake=session_log.handshake,
    )
    server = build_server(bridge, door)
    wire = MemoryWire()
    to_client, client_read = create_context_streams[SessionMessage | Exception](math.inf)
    client_write, from_client = create_context_streams[SessionMessage](math.inf)

    async def run_server() -> None:
        async with door.streams(wire) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        wire.end()

    async def client_to_wire() -> None:
        async with from_client:
            async for message in from_client:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await wire.feed(line)
        wire.close()

    async def wire_to_client() -> None:
        async with to_client:
            async for data in wire.frames:
                # JSON lines end at `\n` only, as stdio's reader splits them: `splitlines`
                # would also cut a frame at a NEL or U+2028 inside a string.
                for line in filter(None, data.split(b"\n")):
                    parsed = jsonrpc_message_adapter.validate_json(line, by_name=False)
                    try:
                        await to_client.send(SessionMessage(parsed))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the client is gone: as a closed stdout, the frame is dropped

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_server)
        nursery.start_soon(client_to_wire)
        nursery.start_soon(wire_to_client)
        async with (
            client_read,
            ClientSession(client_read, client_write, client_info=client_info) as client,
        ):
            with trio.fail_after(30):  # bounds a hang only
                await client.initialize()
            yield client
        await client_write.aclose()  # stdin's end: the door drains what is in flight
    shutdown.request(STDIN_CLOSED)
    with trio.CancelScope(shield=True):
        await _journal_undelivered(journal, session)
        await journal.append(
            Event(
                session_id=session.session_id,
                payload=SessionEnded(reason=STDIN_CLOSED, calls=session.calls),
            ),
            durable=True,
        )
