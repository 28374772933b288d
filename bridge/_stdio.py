"""Trio-native stdin/stdout for the SDK's stdio transport.

The SDK reads stdin through a worker thread, which a cancel scope cannot interrupt: SIGTERM
would wait for the next line. Reading and writing the descriptors with trio's `FdStream`
makes shutdown a plain cancellation and removes two thread hops per message. As the SDK does,
fd 0 is pointed at the null device and fd 1 at stderr while serving, so child processes and
stray prints can never touch the protocol stream.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeGuard, cast

import msgspec
import trio
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id

from ._direct import DirectCalls
from ._lifecycle import STDIN_CLOSED, Shutdown, Unanswered

log = logging.getLogger("agentteam.bridge.stdio")
MAX_FRAME_BYTES = 16 << 20
_READ = 1 << 16


class _Writer:
    """The two methods the SDK's stdout writer uses, over a non-blocking descriptor.

    A lock keeps whole frames whole: the SDK and the frame screen both write here. Every frame
    the SDK writes is shown to the screen, which learns from it which requests are answered.
    A frame, once begun, is never cut by a cancellation (that would corrupt every later frame);
    only the session's end bounds a write (`Shutdown.write_deadline`). When stdout is gone
    (the client closed it, or a write outlived the deadline) frames are dropped: an answer the
    journal holds is then reported by `serve` as undelivered.
    """

    def __init__(
        self,
        stream: trio.lowlevel.FdStream,
        screen: FrameScreen,
        unanswered: Unanswered | None = None,
    ) -> None:
        self._stream = stream
        self._screen = screen
        self._unanswered = unanswered
        self._lock = trio.Lock()
        self._deadline = math.inf
        self._writing: set[trio.CancelScope] = set()
        self.closed = False  # stdout is gone: nothing more can be written

    def bound(self, deadline: float) -> None:
        """From now on no write outlasts `deadline` (the session is ending)."""
        self._deadline = deadline
        for scope in self._writing:
            scope.deadline = deadline

    async def write(self, text: str) -> None:
        rid = self._screen.answered(text)
        if await self._write_bytes(text.encode("utf-8")) and rid is not None:
            self._delivered(rid)

    async def write_answer(self, rid: int | str, data: bytes) -> None:
        """A whole answer frame of the direct path, which knows the id it answers."""
        self._screen.release(rid)
        if await self._write_bytes(data):
            self._delivered(rid)

    async def write_refusal(self, text: str) -> None:
        await self._write_bytes(text.encode("utf-8"))

    def _delivered(self, rid: int | str) -> None:
        if self._unanswered is not None:
            self._unanswered.delivered(rid)

    def _gone(self) -> None:
        self.closed = True
        log.debug("stdout is closed: frames are dropped from now on")
        if self._unanswered is not None:
            self._unanswered.stdout_closed = True

    async def _write_bytes(self, data: bytes) -> bool:
        """Write one whole frame; whether it was written."""
        if self.closed:
            return False
        locked = self._lock.locked()
        if not locked:
            # Nobody is writing: the frame goes at once, without the two scheduling points of
            # the lock and `send_all` (~15 us each). What the pipe does not take now is sent
            # under the lock, taken before any scheduling point, so frames stay whole.
            try:
                sent = os.write(self._stream.fileno(), data)
            except BlockingIOError:
                sent = 0
            except (OSError, trio.ClosedResourceError):
                self._gone()
                return False
            if sent == len(data):
                return True
            data = data[sent:]
            self._lock.acquire_nowait()
        return await self._send_rest(data, holding=not locked)

    async def _send_rest(self, data: bytes, *, holding: bool) -> bool:
        started = False
        with trio.CancelScope(shield=True, deadline=self._deadline) as scope:
            self._writing.add(scope)
            try:
                if not holding:
                    await self._lock.acquire()
                    holding = True
                started = True
                await self._stream.send_all(data)
                return True
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self._gone()
            finally:
                self._writing.discard(scope)
                if holding:
                    self._lock.release()
        if scope.cancelled_caught and started:
            self._gone()  # a frame cut by the deadline: nothing after it can be read
        return False

    async def flush(self) -> None:
        return None


class _LineReader:
    """Async iteration over newline-delimited frames, screened before the SDK sees them.

    The SDK drops what it cannot parse without an answer, which leaves a client waiting
    forever; frames that are not valid requests are answered here (see `FrameScreen`).
    The session's end (stdin's end, or a signal through `Shutdown`) stops the reading; the
    iteration then ends once every request in flight is answered or the drain deadline passes
    (the SDK cancels what is still running when its input ends).
    """

    def __init__(
        self,
        stream: trio.lowlevel.FdStream,
        writer: _Writer,
        screen: FrameScreen,
        take: Callable[[str, Any], bool] | None = None,
        shutdown: Shutdown | None = None,
    ) -> None:
        self._stream = stream
        self._writer = writer
        self._screen = screen
        self._take = take  # the direct path's: True when it took the frame (bridge._direct)
        self._shutdown = shutdown
        self._buffer = bytearray()
        self._oversized: bytes | None = None  # the head of a frame being skipped
        self._yield_first = False  # the last read found data at once: let others run first
        self._stopped = False

    def stop(self) -> None:
        """Read nothing more (a signal): a wait for stdin ends now, buffered frames are left."""
        self._stopped = True
        trio.lowlevel.notify_closing(self._stream.fileno())

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._next_line()
            if line is None:
                await self._drain()
                raise StopAsyncIteration
            text = line.decode("utf-8", errors="replace").lstrip("\ufeff")
            try:
                refusal = self._screen.screen(text)
            except Exception:  # the screen must never stop the reader; the SDK still decides
                log.exception("frame screen failed; passing the frame on")
                refusal = None
            if refusal is None:
                if self._take is not None and self._taken(self._take, text):
                    continue
                return text
            await self._writer.write_refusal(refusal)

    async def _drain(self) -> None:
        """At the end of input: wait for the requests in flight to be answered, until the
        drain deadline."""
        shutdown = self._shutdown
        if shutdown is None:
            return
        shutdown.request(STDIN_CLOSED)  # a no-op when a signal came first
        with trio.move_on_at(shutdown.drain_deadline):
            await self._screen.drained()

    def _taken(self, take: Callable[[str, Any], bool], text: str) -> bool:
        try:
            return take(text, self._screen.decoded)  # the screen's decoding, not a second one
        except Exception:  # as the screen: never stop the reader; the SDK still answers
            log.exception("direct path failed on a frame; passing the frame on")
            return False

    async def _next_line(self) -> bytes | None:
        while True:
            if self._stopped:
                return None
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._oversized is not None:
                    head, self._oversized = self._oversized, None
                    log.warning("refused a frame larger than %d bytes", MAX_FRAME_BYTES)
                    refusal = _error(_recover_id(head), -32600, "Frame too large")
                    await self._writer.write_refusal(refusal)
                    continue
                return line
            if len(self._buffer) > MAX_FRAME_BYTES:
                if self._oversized is None:
                    self._oversized = bytes(self._buffer[:4096])
                self._buffer.clear()
            chunk = await self._receive()
            if not chunk:
                if self._buffer and self._oversized is None and not self._stopped:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._buffer += chunk

    async def _receive(self) -> bytes:
        """What stdin has now, waiting for it if it has nothing.

        `FdStream.receive_some` yields to the scheduler before every read: one more round per
        frame (~15 us) for a reader that then waits anyway. Here the read is tried at once after
        a wait; only a read that found data without waiting is preceded by a scheduling point,
        so that a flood of frames cannot starve the calls it starts.
        """
        if self._yield_first:
            await trio.lowlevel.checkpoint()
        fd = self._stream.fileno()
        waited = False
        while True:
            if self._stopped:
                return b""
            try:
                chunk = os.read(fd, _READ)
            except BlockingIOError:
                waited = True
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:
                    if self._stopped:  # `stop` woke the wait
                        return b""
                    raise
                continue
            except OSError as exc:  # as FdStream.receive_some reports them
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("file was already closed") from None
                raise trio.BrokenResourceError from exc
            self._yield_first = not waited
            return chunk


MAX_DEPTH = 64
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")')
# How the SDK (pydantic, compact) writes an answer: `{"jsonrpc":"2.0","id":<id>,"result"|"error"`.
_ANSWER = re.compile(r'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class FrameScreen:
    """Answers, as JSON-RPC 2.0 says, the frames the SDK would drop or serve wrongly.

    * not JSON: -32700 Parse error (with the request's id when it can be recovered);
    * an object that is neither a request, a notification nor a response, or a request whose id
      is not a string or an integer (float, bool, object, array, null: MCP forbids them):
      -32600 Invalid Request with `"id": null`;
    * a request that is not 2.0, a method that is not a string, a frame over MAX_FRAME_BYTES:
      -32600 with the request's id; params not an object or nested deeper than MAX_DEPTH: -32602;
    * a request whose id is already in flight (sent, not yet answered nor cancelled): -32600 with
      that id; the first request is served and answered once. Ids are compared as the SDK
      correlates them (`"7"` and `7` are one id), since it would otherwise confuse the two;
    * a batch: one array answer, an Invalid Request per request in it (MCP has no batches).

    Responses sent by the client (`result` or `error`, no `method`) and notifications are never
    answered: responses go on to the SDK, which matches them with a request of its own (sampling,
    elicitation, ping) or drops them; the bridge itself sends none.
    """

    def __init__(self) -> None:
        self._in_flight: set[int | str] = set()
        self._emptied: trio.Event | None = None  # set when the last request in flight ends
        self.decoded: Any = None  # the frame `screen` passed last, as it decoded it

    def screen(self, text: str) -> str | None:
        """None to pass a frame to the SDK, else the JSON-RPC error line to answer it with."""
        self.decoded = None
        if not text.strip():
            return None
        try:
            frame = _decode(text)
        except msgspec.DecodeError:
            return _error(_recover_id(text), -32700, "Parse error")
        except RecursionError:
            return _error(
                _recover_id(text), -32602, f"Invalid params: nested deeper than {MAX_DEPTH} levels"
            )
        if isinstance(frame, list):
            return _batch(frame)
        if not isinstance(frame, dict):
            return _error(None, -32600, "Invalid Request: not a JSON-RPC object")
        if "method" not in frame and ("result" in frame or "error" in frame):
            return None  # a response: for the SDK to match or drop, never answered
        if "id" not in frame:
            if isinstance(frame.get("method"), str):
                self._cancelled(frame)
                self.decoded = frame
                return None  # a notification: never answered
            return _error(None, -32600, "Invalid Request: method must be a string")
        rid = frame["id"]
        if not _is_id(rid):
            return _error(None, -32600, "Invalid Request: id must be a string or an integer")
        refusal = _refusal(text, frame, rid)
        if refusal is not None:
            return refusal
        key = coerce_request_id(rid)
        if key in self._in_flight:
            log.warning("refused a request whose id is already in flight")
            return _error(rid, -32600, "Invalid Request: a request with this id is in flight")
        self._in_flight.add(key)
        self.decoded = frame
        return None

    def answered(self, text: str) -> int | str | None:
        """Note a frame the SDK writes: an answer ends its request's flight. Its id, if it is
        an answer."""
        found = _ANSWER.match(text)
        if found is not None:
            rid = _decode(found.group(1))
        else:  # not the SDK's usual answer layout: look properly (notifications land here)
            try:
                frame = _decode(text)
            except (msgspec.DecodeError, RecursionError):
                return None
            if not isinstance(frame, dict) or "method" in frame or not _is_id(frame.get("id")):
                return None
            rid = frame["id"]
        self.release(rid)
        return rid  # type: ignore[no-any-return]

    def release(self, rid: int | str) -> None:
        """A request's answer is being written: its id is free again."""
        self._in_flight.discard(coerce_request_id(rid))
        if not self._in_flight and self._emptied is not None:
            self._emptied.set()

    async def drained(self) -> None:
        """Return once no request is in flight (each answered, or cancelled by the client)."""
        while self._in_flight:
            self._emptied = trio.Event()
            await self._emptied.wait()
        self._emptied = None

    def _cancelled(self, frame: dict[str, Any]) -> None:
        # A request the client cancels is never answered (MCP): its id is free again.
        if frame["method"] != "notifications/cancelled":
            return
        params = frame.get("params")
        rid = params.get("requestId") if isinstance(params, dict) else None
        if _is_id(rid):
            self.release(rid)


def _refusal(text: str, frame: dict[str, Any], rid: int | str) -> str | None:
    """The error for a request with a valid id that the SDK cannot serve, if any."""
    if frame.get("jsonrpc") != "2.0":
        return _error(rid, -32600, 'Invalid Request: jsonrpc must be "2.0"')
    if not isinstance(frame.get("method"), str):
        return _error(rid, -32600, "Invalid Request: method must be a string")
    if "result" in frame or "error" in frame:
        return _error(rid, -32600, "Invalid Request: a request has no result or error")
    params = frame.get("params")
    if params is not None and not isinstance(params, dict):
        return _error(rid, -32602, "Invalid params: params must be an object")
    if (text.count("{") + text.count("[")) > MAX_DEPTH and _depth(params) > MAX_DEPTH:
        return _error(rid, -32602, f"Invalid params: nested deeper than {MAX_DEPTH} levels")
    return None


def _batch(frames: list[Any]) -> str | None:
    """One array answer for a batch: an Invalid Request for each request in it."""
    if not frames:
        return _error(None, -32600, "Invalid Request: an empty batch")
    answers = [
        _error_object(
            frame.get("id") if isinstance(frame, dict) and _is_id(frame.get("id")) else None,
            -32600,
            "Invalid Request: batches are not supported",
        )
        for frame in frames
        if not (
            isinstance(frame, dict)
            and (
                ("method" not in frame and ("result" in frame or "error" in frame))
                or ("id" not in frame and isinstance(frame.get("method"), str))
            )
        )
    ]
    return _encode(answers).decode() + "\n" if answers else None


def _is_id(value: Any) -> TypeGuard[int | str]:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _recover_id(raw: str | bytes) -> int | str | None:
    head = raw[:4096].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[:4096]
    found = _ID.search(head)
    if found is None:
        return None
    try:
        value = _decode(found.group(1))
    except msgspec.DecodeError:
        return None
    return value if _is_id(value) else None


def _error_object(rid: int | str | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _error(rid: int | str | None, code: int, message: str) -> str:
    return _encode(_error_object(rid, code, message)).decode() + "\n"


@asynccontextmanager
async def trio_stdio(
    direct: DirectCalls | None = None,
    shutdown: Shutdown | None = None,
    unanswered: Unanswered | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read_stream, write_stream) over trio-native standard streams: the one door
    every frame passes, both ways. `direct`, when given, is offered each screened frame first
    and writes its answers here; `shutdown` stops the reading and bounds the writes at the
    session's end; `unanswered` learns which journaled answers are written."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin = trio.lowlevel.FdStream(wire_in)
    stdout = trio.lowlevel.FdStream(wire_out)
    screen = FrameScreen()
    writer = _Writer(stdout, screen, unanswered)
    if direct is not None:
        direct.bind(writer.write_answer)  # its answers end their ids' flights, as the SDK's do
    reader = _LineReader(
        stdin, writer, screen, direct.take if direct is not None else None, shutdown
    )
    if shutdown is not None:

        def end() -> None:
            reader.stop()
            writer.bound(shutdown.write_deadline)

        shutdown.on_request(end)
    try:
        async with stdio_server(stdin=cast(Any, reader), stdout=cast(Any, writer)) as streams:
            yield streams
    finally:
        with trio.CancelScope(shield=True):
            await stdin.aclose()
            await stdout.aclose()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
