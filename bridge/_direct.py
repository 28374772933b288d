"""`tools/call` answered straight from the stdio reader, without the SDK's per-message work.

Through the SDK, one call costs a pydantic validation of the frame, of its params and of the
result, a result dump, a response model and its JSON, and five task hand-offs; for the bridge's
small calls that was about a third of its CPU per call. Once the SDK has completed the
handshake of a connection whose protocol version's `tools/call` result is exactly
`Answer.wire()` (`DIRECT_VERSIONS`), the reader hands plain `tools/call` requests here: the
frame is decoded once (msgspec), the call flow runs in this module's nursery, and the answer is
written as one line. Everything else, and any `tools/call` with a field the SDK would interpret
(`progressToken`, `task`, a 2026 envelope, a wrong type), still goes through the SDK.

The SDK's dispatcher semantics are kept: a `notifications/cancelled` for a direct call cancels it
and nothing is written for it; a call still running when the session's drain ends (`_lifecycle`)
is answered with the JSON-RPC error -32000 "Connection closed" unless the peer cancelled it; the
call flow journals the cancellation either way. A call whose outcome is journaled is never cut:
its outcome is recorded shielded (`_Call`), so its answer is the journaled one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import msgspec
import trio
from mcp_types import PROTOCOL_VERSION_META_KEY

from ._answer import Answer

log = logging.getLogger("agentteam.bridge")

# Protocol versions whose `tools/call` result schema keeps every field of `Answer.wire()` and
# adds none (checked against the SDK by tests/test_bridge_direct.py).
DIRECT_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
_PARAMS: Final = frozenset({"name", "arguments", "_meta"})
_SHUTDOWN_WRITE_S: Final = 1.0  # as the SDK's dispatcher: a wedged stdout cannot hang shutdown
_decode: Final = msgspec.json.decode
_encode: Final = msgspec.json.Encoder().encode

Answerer = Callable[[str, Any, Mapping[str, Any] | None, str | int], Awaitable[Answer]]


class _InFlight:
    __slots__ = ("peer_cancelled", "scope")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.peer_cancelled = False


class DirectCalls:
    """Takes `tools/call` frames from the stdio reader once `enable` has been called."""

    def __init__(self, answer: Answerer) -> None:
        self._answer = answer
        self._write: Callable[[int | str, bytes], Awaitable[None]] | None = None
        self._nursery: trio.Nursery | None = None
        self._enabled = False
        self._in_flight: dict[int | str, _InFlight] = {}

    def enable(self, protocol_version: str | None) -> None:
        """Serve calls directly from now on, if the negotiated version allows it."""
        self._enabled = protocol_version in DIRECT_VERSIONS

    def bind(self, write: Callable[[int | str, bytes], Awaitable[None]]) -> None:
        """The stdout writer of an answer to an id (whole lines, under the writer's lock)."""
        self._write = write

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Own the direct calls; on exit the ones still running are cancelled (shutdown)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def take(self, text: str, frame: Any = None) -> bool:
        """Whether this frame (already screened; `frame`: as the screen decoded it, if it did)
        was taken: a `tools/call` now running here. A cancellation of a direct call is acted on
        and still passed on (False)."""
        if not self._enabled or self._nursery is None or self._write is None:
            return False
        if '"tools/call"' in text:
            return self._take_call(_decode(text) if frame is None else frame)
        if '"notifications/cancelled"' in text and self._in_flight:
            self._take_cancel(_decode(text) if frame is None else frame)
        return False

    def _take_call(self, frame: Any) -> bool:
        if not isinstance(frame, dict) or frame.get("method") != "tools/call":
            return False
        rid, params = frame.get("id"), frame.get("params")
        if not isinstance(rid, int | str) or isinstance(rid, bool) or not isinstance(params, dict):
            return False
        name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        if (
            not params.keys() <= _PARAMS
            or not isinstance(name, str)
            or not (arguments is None or isinstance(arguments, dict))
            or not (meta is None or isinstance(meta, dict))
            or (meta is not None and ("progressToken" in meta or PROTOCOL_VERSION_META_KEY in meta))
        ):
            return False  # the SDK validates, interprets or refuses it
        assert self._nursery is not None
        flight = _InFlight()
        self._in_flight[_key(rid)] = flight  # a duplicate id replaces the older one, as the SDK
        self._nursery.start_soon(self._serve, rid, name, arguments, meta, flight)
        return True

    def _take_cancel(self, frame: Any) -> None:
        if not isinstance(frame, dict) or frame.get("method") != "notifications/cancelled":
            return
        params = frame.get("params")
        if not isinstance(params, dict):
            return
        rid = params.get("requestId")
        if not isinstance(rid, int | str) or isinstance(rid, bool):
            return
        flight = self._in_flight.get(_key(rid))
        if flight is not None:
            flight.peer_cancelled = True
            flight.scope.cancel()

    async def _serve(
        self,
        rid: int | str,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None,
        flight: _InFlight,
    ) -> None:
        try:
            answer = None
            with flight.scope:
                try:
                    answer = await self._answer(name, arguments, meta, rid)
                finally:
                    if self._in_flight.get(_key(rid)) is flight:
                        del self._in_flight[_key(rid)]
            if answer is None or flight.peer_cancelled:
                return  # the peer cancelled it: nothing more is sent for this id
            line = _encode({"jsonrpc": "2.0", "id": rid, "result": answer.wire()})
        except trio.Cancelled:
            if not flight.peer_cancelled:
                with trio.CancelScope(shield=True), trio.move_on_after(_SHUTDOWN_WRITE_S):
                    await self._send(rid, _error(rid, -32000, "Connection closed"))
            raise
        except Exception as exc:  # the call flow answers every failure itself; this is a bug
            log.error("direct tools/call failed: %s", type(exc).__name__)
            if not flight.peer_cancelled:
                await self._send(rid, _error(rid, -32603, "Internal error"))
            return
        # Outside the call's scope: a late cancellation cannot cut the frame or answer it twice.
        await self._send(rid, line + b"\n")

    async def _send(self, rid: int | str, data: bytes) -> None:
        assert self._write is not None
        try:
            await self._write(rid, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.debug("dropped an answer: stdout is closed")  # the client is gone


def _key(rid: int | str) -> int | str:
    """The SDK's correlation key: "7" and 7 are one id."""
    if isinstance(rid, str):
        try:
            return int(rid)
        except ValueError:
            return rid
    return rid


def _error(rid: int | str, code: int, message: str) -> bytes:
    frame = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return _encode(frame) + b"\n"
