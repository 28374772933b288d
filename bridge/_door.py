"""The session's one front door: every frame in, every answer out, one table of requests.

A `Door` sits between a `Wire` (stdio in `serve`, memory in `bridge.testing.serve_in_memory`,
so the in-process tests run this same path) and the SDK's server. Each line the wire reads is
screened (`_stdio.FrameScreen`), then routed here, once:

* a plain `tools/call` (no field the SDK would interpret: `progressToken`, `task`, a 2026
  envelope, a wrong type) on a session whose handshake negotiated a version of
  `DIRECT_VERSIONS`, when the door was made with ``direct=True`` (never with tracing: the SDK's
  middleware makes the spans), runs the call flow here, decoded once, its answer written as one
  line (a pydantic validation, a dump and five task hand-offs fewer per call: a third of the
  bridge's CPU per call);
* everything else goes to the SDK, whose messages come back through `_pump_out`.

Invariants:

* every request id the client sends is in `_flights` from its frame until its answer is written
  or the client cancels it; a second request with an id in flight is refused (-32600). Ids are
  keyed as the SDK correlates them (`"7"` and `7` are one id);
* a call whose outcome the journal holds (`Unanswered`) is answered exactly as journaled while
  the wire is open, whichever route it took, or is left for `serve` to journal as
  `answer_undelivered`; it is never answered -32000 "Connection closed";
* at the end of input (stdin's end or `Shutdown`), calls in flight may finish until the drain
  deadline; what still runs is then cut (the call flow journals `call_cancelled`) and answered
  -32000 "Connection closed", as the SDK's dispatcher answers a request cut by shutdown; a call
  the client cancelled is never answered.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol

import mcp_types as types
import msgspec
import trio
from mcp.shared._context_streams import ContextSendStream, create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types import PROTOCOL_VERSION_META_KEY

from ._answer import Answer
from ._lifecycle import STDIN_CLOSED, Shutdown, Unanswered, request_key
from ._stdio import FrameScreen, stdio_wire

log = logging.getLogger("agentteam.bridge")

# Protocol versions whose `tools/call` result schema keeps every field of `Answer.wire()` and
# adds none (checked against the SDK by tests/test_bridge_direct.py).
DIRECT_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
_PARAMS: Final = frozenset({"name", "arguments", "_meta"})
_encode: Final = msgspec.json.Encoder().encode
_validate: Final = types.jsonrpc_message_adapter.validate_json

_ToSdk = ContextSendStream[SessionMessage | Exception]
# (client name, client version, protocol version): awaited before `initialize` is answered.
Handshake = Callable[[str | None, str | None, str | None], Awaitable[None]]
Answerer = Callable[[str, Any, Mapping[str, Any] | None, str | int | None], Awaitable[Answer]]


class Wire(Protocol):
    """Where frames come from and answers go: whole lines each way."""

    def __aiter__(self) -> AsyncIterator[str]: ...

    async def send(self, data: bytes) -> bool:
        """Write one whole frame; whether it was written (False once the peer is gone)."""
        ...

    def stop(self, write_deadline: float) -> None:
        """Read nothing more; no write outlasts `write_deadline`."""
        ...


class _Flight:
    __slots__ = ("answer", "direct", "method", "params", "peer_cancelled", "rid", "scope")

    def __init__(self, rid: int | str, method: str, direct: bool, params: Any = None) -> None:
        self.rid = rid
        self.method = method
        self.direct = direct
        self.params = params  # an `initialize` request's (who the client is)
        self.answer: Answer | None = None  # the call flow's answer, once it returned
        self.peer_cancelled = False
        self.scope = trio.CancelScope()


class Door:
    """One session's requests from frame to answer (see the module)."""

    def __init__(
        self,
        answer: Answerer | None = None,
        *,
        shutdown: Shutdown | None = None,
        unanswered: Unanswered | None = None,
        direct: bool = True,
        on_handshake: Handshake | None = None,
    ) -> None:
        self._answer = answer
        self._on_handshake = on_handshake
        self._shutdown = shutdown or Shutdown()
        self._unanswered = unanswered or Unanswered()
        self._direct_allowed = direct and answer is not None
        self._screen = FrameScreen()
        self._flights: dict[int | str, _Flight] = {}
        self._emptied: trio.Event | None = None
        self._version: str | None = None  # the protocol version the SDK's handshake answered
        self._initialized = False  # the client's `notifications/initialized` came
        self._direct = False  # plain tools/call are served here (handshake done, version fits)
        self._calls: trio.Nursery | None = None
        self._wire: Wire | None = None

    async def call(
        self, name: str, arguments: Any, meta: Mapping[str, Any] | None, rid: str | int | None
    ) -> types.CallToolResult:
        """The SDK route's `tools/call`: the call flow's answer, kept with its flight so that
        a cut after it is answered as journaled."""
        assert self._answer is not None
        answer = await self._answer(name, arguments, meta, rid)
        flight = self._flights.get(request_key(rid)) if rid is not None else None
        if flight is not None:
            flight.answer = answer
        return answer.result()

    @asynccontextmanager
    async def streams(self, wire: Wire) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK's (read_stream, write_stream) over `wire`, through this door. The caller runs
        the SDK's server on them; it ends once input has ended and the calls are drained."""
        self._wire = wire
        shutdown = self._shutdown
        shutdown.on_request(lambda: wire.stop(shutdown.write_deadline))
        to_sdk, sdk_in = create_context_streams[SessionMessage | Exception](0)
        sdk_out, from_sdk = create_context_streams[SessionMessage](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump_in, wire, to_sdk)
            nursery.start_soon(self._pump_out, from_sdk)
            yield sdk_in, sdk_out
        with trio.CancelScope(shield=True):
            await self._close_flights()

    # --- frames in ------------------------------------------------------------------------

    async def _pump_in(self, wire: Wire, to_sdk: _ToSdk) -> None:
        async with to_sdk, trio.open_nursery() as calls:
            self._calls = calls
            async for text in wire:
                await self._frame(to_sdk, text)
            self._shutdown.request(STDIN_CLOSED)  # a no-op when a signal came first
            with trio.move_on_at(self._shutdown.drain_deadline):
                await self._drained()
            calls.cancel_scope.cancel()  # the direct calls still running are cut (answered below)
        self._calls = None

    async def _frame(self, to_sdk: _ToSdk, text: str) -> None:
        try:
            refusal = self._screen.screen(text)
        except Exception:  # the screen must never stop the reader; the SDK still decides
            log.exception("frame screen failed; passing the frame on")
            refusal = None
        if refusal is not None:
            await self._send(refusal.encode())
            return
        frame = self._screen.decoded  # a request or a notification, as the screen decoded it
        if isinstance(frame, dict):
            rid = frame.get("id")
            if rid is not None:  # a request (the screen passed it: its id and method are valid)
                key = request_key(rid)
                if key in self._flights:
                    log.warning("refused a request whose id is already in flight")
                    await self._send(
                        _error(rid, -32600, "Invalid Request: a request with this id is in flight")
                    )
                    return
                taken = self._direct and self._take_call(frame, key)
                if not taken:
                    method = frame["method"]
                    params = frame.get("params") if method == "initialize" else None
                    self._flights[key] = _Flight(rid, method, direct=False, params=params)
                    await _to_sdk(to_sdk, text)
                return
            method = frame.get("method")
            if method == "notifications/cancelled":
                self._peer_cancelled(frame)
            elif method == "notifications/initialized":
                self._initialized = True
                self._direct = self._direct_allowed and self._version in DIRECT_VERSIONS
        await _to_sdk(to_sdk, text)

    def _take_call(self, frame: dict[str, Any], key: int | str) -> bool:
        """Start a plain `tools/call` here; False for the SDK to validate, interpret or refuse."""
        params = frame.get("params")
        if frame.get("method") != "tools/call" or not isinstance(params, dict):
            return False
        name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        if (
            not params.keys() <= _PARAMS
            or not isinstance(name, str)
            or not (arguments is None or isinstance(arguments, dict))
            or not (meta is None or isinstance(meta, dict))
            or (meta is not None and ("progressToken" in meta or PROTOCOL_VERSION_META_KEY in meta))
            or self._calls is None
        ):
            return False
        flight = _Flight(frame["id"], "tools/call", direct=True)
        self._flights[key] = flight
        self._calls.start_soon(self._serve_direct, flight, name, arguments, meta)
        return True

    def _peer_cancelled(self, frame: dict[str, Any]) -> None:
        # A request the client cancels is never answered (MCP): its id is free again.
        params = frame.get("params")
        rid = params.get("requestId") if isinstance(params, dict) else None
        if not isinstance(rid, int | str) or isinstance(rid, bool):
            return
        flight = self._flights.get(request_key(rid))
        if flight is not None:
            flight.peer_cancelled = True
            flight.scope.cancel()  # a direct call's; the SDK cancels its own handler
            self._release(flight)

    async def _serve_direct(
        self,
        flight: _Flight,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None,
    ) -> None:
        assert self._answer is not None
        try:
            with flight.scope:
                flight.answer = await self._answer(name, arguments, meta, flight.rid)
        except trio.Cancelled:
            if not flight.peer_cancelled:
                with trio.CancelScope(shield=True):
                    await self._reply(flight)  # cut by the end: journaled answer, or closed
            raise
        except Exception as exc:  # the call flow answers every failure itself; this is a bug
            log.error("direct tools/call failed: %s", type(exc).__name__)
            if not flight.peer_cancelled:
                await self._reply(flight, _error(flight.rid, -32603, "Internal error"))
            return
        if not flight.peer_cancelled:
            await self._reply(flight)

    # --- frames out -----------------------------------------------------------------------

    async def _pump_out(self, from_sdk: Any) -> None:
        async with from_sdk:
            async for message in from_sdk:
                await self._from_sdk(message.message)

    async def _from_sdk(self, message: Any) -> None:
        rid = getattr(message, "id", None)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and rid is not None:
            flight = self._flights.get(request_key(rid))
            if flight is not None and not flight.direct:
                if flight.method == "initialize" and isinstance(message, types.JSONRPCResponse):
                    await self._handshake(flight, message.result.get("protocolVersion"))
                if isinstance(message, types.JSONRPCError) and (
                    flight.answer is not None or self._journaled(flight)
                ):
                    await self._reply(flight)  # the SDK cut a call whose outcome is journaled
                    return
                self._release(flight)
                if await self._send(_dump(message)):
                    self._unanswered.delivered(flight.rid)
                return
        await self._send(_dump(message))

    async def _handshake(self, flight: _Flight, version: Any) -> None:
        """The SDK answered `initialize`: its version decides the direct path; who the client
        is goes to the journal before the answer does."""
        self._version = version if isinstance(version, str) else None
        self._direct = (
            self._direct_allowed and self._initialized and self._version in DIRECT_VERSIONS
        )
        if self._on_handshake is None:
            return
        info = flight.params.get("clientInfo") if isinstance(flight.params, dict) else None
        info = info if isinstance(info, dict) else {}
        name, client_version = info.get("name"), info.get("version")
        await self._on_handshake(
            name[:256] if isinstance(name, str) else None,
            client_version[:256] if isinstance(client_version, str) else None,
            self._version,
        )

    async def _reply(self, flight: _Flight, error: bytes | None = None) -> None:
        """Answer a flight: the call flow's answer, else nothing if the journal holds an outcome
        (then `answer_undelivered`), else `error` or -32000 "Connection closed"."""
        if self._flights.get(request_key(flight.rid)) is not flight:
            return  # already answered, or cancelled by the client
        self._release(flight)
        if flight.answer is not None:
            data = self._answer_line(flight.rid, flight.answer)
        elif self._journaled(flight):
            return
        else:
            data = error or _error(flight.rid, -32000, "Connection closed")
        if await self._send(data):
            self._unanswered.delivered(flight.rid)

    def _answer_line(self, rid: int | str, answer: Answer) -> bytes:
        if self._version in DIRECT_VERSIONS or self._version is None:
            result = answer.wire()
        else:  # a version whose result schema differs: as the SDK writes it
            result = answer.result().model_dump(mode="json", by_alias=True, exclude_none=True)
        return _encode({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n"

    def _journaled(self, flight: _Flight) -> bool:
        return request_key(flight.rid) in self._unanswered.calls

    async def _send(self, data: bytes) -> bool:
        assert self._wire is not None
        if await self._wire.send(data):
            return True
        self._unanswered.stdout_closed = True
        return False

    # --- the table ------------------------------------------------------------------------

    def _release(self, flight: _Flight) -> None:
        key = request_key(flight.rid)
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not self._flights and self._emptied is not None:
            self._emptied.set()

    async def _drained(self) -> None:
        """Return once no request is in flight (each answered, or cancelled by the client)."""
        while self._flights:
            self._emptied = trio.Event()
            await self._emptied.wait()
        self._emptied = None

    async def _close_flights(self) -> None:
        """After the SDK and the direct calls ended: answer what is left (see `_reply`)."""
        for flight in list(self._flights.values()):
            await self._reply(flight)


async def _to_sdk(to_sdk: _ToSdk, text: str) -> None:
    try:
        message: SessionMessage | Exception = SessionMessage(_validate(text, by_name=False))
    except Exception as exc:  # as the SDK's stdio transport: its server logs it
        message = exc
    await to_sdk.send(message)


def _dump(message: Any) -> bytes:
    # As the SDK's stdio transport writes a message.
    text: str = message.model_dump_json(by_alias=True, exclude_unset=True)
    return (text + "\n").encode()


def _error(rid: int | str | None, code: int, message: str) -> bytes:
    frame = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return _encode(frame) + b"\n"


class MemoryWire:
    """A wire over memory channels (`bridge.testing.serve_in_memory`, the door's tests): lines
    go in by `feed` until `close`; frames written come out of `frames` (closed by `end`)."""

    def __init__(self) -> None:
        self._lines_in, self._lines = trio.open_memory_channel[str](math.inf)
        self._frames_in, self.frames = trio.open_memory_channel[bytes](math.inf)
        self._stopped = False

    async def feed(self, line: str) -> None:
        await self._lines_in.send(line)

    def close(self) -> None:
        """The peer sends nothing more (stdin's end)."""
        self._lines_in.close()

    def end(self) -> None:
        """Nothing more is written (the session is over)."""
        self._frames_in.close()

    def __aiter__(self) -> MemoryWire:
        return self

    async def __anext__(self) -> str:
        if self._stopped:
            raise StopAsyncIteration
        try:
            return await self._lines.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def send(self, data: bytes) -> bool:
        try:
            self._frames_in.send_nowait(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    def stop(self, write_deadline: float) -> None:
        self._stopped = True
        self._lines_in.close()


@asynccontextmanager
async def trio_stdio(door: Door | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read_stream, write_stream) over trio-native standard streams, through `door`
    (by default one without a call flow: every frame goes to the SDK)."""
    async with stdio_wire() as wire, (door or Door()).streams(wire) as streams:
        yield streams
