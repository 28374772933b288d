"""Trio-native stdin/stdout as the front door's wire, and the screen of what comes in.

The SDK reads stdin through a worker thread, which a cancel scope cannot interrupt: SIGTERM
would wait for the next line. Reading and writing the descriptors with trio's `FdStream`
makes shutdown a plain cancellation and removes two thread hops per message. As the SDK does,
fd 0 is pointed at the null device and fd 1 at stderr while serving, so child processes and
stray prints can never touch the protocol stream. Which request is in flight, and where it is
served, is the door's (`bridge._door`); this module moves whole lines and screens them.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeGuard

import msgspec
import trio

log = logging.getLogger("agentteam.bridge.stdio")
MAX_FRAME_BYTES = 16 << 20
_READ = 1 << 16


class _Writer:
    """Whole frames to a non-blocking descriptor.

    A lock keeps whole frames whole: the door's tasks write concurrently. A frame, once begun,
    is never cut by a cancellation (that would corrupt every later frame); only the session's
    end bounds a write (`bound`). When stdout is gone (the client closed it, or a write outlived
    the deadline) frames are dropped: the door then leaves a journaled answer to `serve`, which
    reports it undelivered.
    """

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._lock = trio.Lock()
        self._deadline = math.inf
        self._writing: set[trio.CancelScope] = set()
        self.closed = False  # stdout is gone: nothing more can be written

    def bound(self, deadline: float) -> None:
        """From now on no write outlasts `deadline` (the session is ending)."""
        self._deadline = deadline
        for scope in self._writing:
            scope.deadline = deadline

    def _gone(self) -> None:
        self.closed = True
        log.debug("stdout is closed: frames are dropped from now on")

    async def send(self, data: bytes) -> bool:
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


class _LineReader:
    """Async iteration over newline-delimited frames (text; a byte-order mark dropped).

    A frame over MAX_FRAME_BYTES is skipped and answered -32600 here (its id recovered from its
    head). `stop` (the session's end) ends the iteration at once, buffered frames left unread.
    """

    def __init__(self, stream: trio.lowlevel.FdStream, writer: _Writer) -> None:
        self._stream = stream
        self._writer = writer
        self._buffer = bytearray()
        self._oversized: bytes | None = None  # the head of a frame being skipped
        self._yield_first = False  # the last read found data at once: let others run first
        self._stopped = False

    def stop(self) -> None:
        """Read nothing more (a signal): a wait for stdin ends now, buffered frames are left."""
        if not self._stopped:
            self._stopped = True
            trio.lowlevel.notify_closing(self._stream.fileno())

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> str:
        line = await self._next_line()
        if line is None:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace").lstrip("\ufeff")

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
                    await self._writer.send(refusal.encode())
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
# A request's id in a frame that is not JSON: a string, or an integer of up to 18 digits that ends
# there (`1.5`, `1e3`, 20 digits or a frame cut inside the number name no id: null).
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}(?=\s*[,}\]])|"(?:[^"\\]|\\.){0,256}")')
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
    * a batch: one array answer, an Invalid Request per request in it (MCP has no batches).

    Responses sent by the client (`result` or `error`, no `method`) and notifications are never
    answered: responses go on to the SDK, which matches them with a request of its own (sampling,
    elicitation, ping) or drops them; the bridge itself sends none.
    """

    def __init__(self) -> None:
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
                self.decoded = frame
                return None  # a notification: never answered
            return _error(None, -32600, "Invalid Request: method must be a string")
        rid = frame["id"]
        if not _is_id(rid):
            return _error(None, -32600, "Invalid Request: id must be a string or an integer")
        refusal = _refusal(text, frame, rid)
        if refusal is not None:
            return refusal
        self.decoded = frame
        return None


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


class StdioWire:
    """The door's wire over the process's standard streams (`bridge._door.Wire`)."""

    def __init__(self, stdin: trio.lowlevel.FdStream, stdout: trio.lowlevel.FdStream) -> None:
        self._writer = _Writer(stdout)
        self._reader = _LineReader(stdin, self._writer)

    def __aiter__(self) -> _LineReader:
        return self._reader

    async def send(self, data: bytes) -> bool:
        return await self._writer.send(data)

    def stop(self, write_deadline: float) -> None:
        self._reader.stop()
        self._writer.bound(write_deadline)


@asynccontextmanager
async def stdio_wire() -> AsyncIterator[StdioWire]:
    """The standard streams as a wire: while it is open, fd 0 reads the null device and fd 1
    writes to stderr (as the SDK does), so child processes and stray prints never touch the
    protocol stream; both are restored after."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin = trio.lowlevel.FdStream(wire_in)
    stdout = trio.lowlevel.FdStream(wire_out)
    try:
        yield StdioWire(stdin, stdout)
    finally:
        with trio.CancelScope(shield=True):
            await stdin.aclose()
            await stdout.aclose()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
