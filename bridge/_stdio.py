"""Trio-native stdin/stdout for the SDK's stdio transport.

The SDK reads stdin through a worker thread, which a cancel scope cannot interrupt: SIGTERM
would wait for the next line. Reading and writing the descriptors with trio's `FdStream`
makes shutdown a plain cancellation and removes two thread hops per message. As the SDK does,
fd 0 is pointed at the null device and fd 1 at stderr while serving, so child processes and
stray prints can never touch the protocol stream.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import msgspec
import trio
from mcp.server.stdio import stdio_server

log = logging.getLogger("agentteam.bridge.stdio")
MAX_FRAME_BYTES = 16 << 20
_READ = 1 << 16


class _Writer:
    """The two methods the SDK's stdout writer uses, over a non-blocking descriptor.

    A lock keeps whole frames whole: the SDK and the frame screen both write here.
    """

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._lock = trio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await self._stream.send_all(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


class _LineReader:
    """Async iteration over newline-delimited frames, screened before the SDK sees them.

    The SDK drops what it cannot parse without an answer, which leaves a client waiting
    forever. Frames that are requests but not valid ones are answered here with the JSON-RPC
    2.0 error, with the request's id when it can be recovered: a parse error (-32700), an invalid
    request (-32600: not 2.0, a batch, a method that is not a string, a frame over
    MAX_FRAME_BYTES), invalid params (-32602: params not an object, nesting deeper than
    MAX_DEPTH).
    """

    def __init__(self, stream: trio.lowlevel.FdStream, writer: _Writer) -> None:
        self._stream = stream
        self._writer = writer
        self._buffer = bytearray()
        self._oversized: bytes | None = None  # the head of a frame being skipped

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._next_line()
            if line is None:
                raise StopAsyncIteration
            text = line.decode("utf-8", errors="replace").lstrip("\ufeff")
            try:
                refusal = screen(text)
            except Exception:  # the screen must never stop the reader; the SDK still decides
                log.exception("frame screen failed; passing the frame on")
                refusal = None
            if refusal is None:
                return text
            await self._writer.write(refusal)

    async def _next_line(self) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._oversized is not None:
                    head, self._oversized = self._oversized, None
                    log.warning("refused a frame larger than %d bytes", MAX_FRAME_BYTES)
                    await self._writer.write(_error(_recover_id(head), -32600, "Frame too large"))
                    continue
                return line
            if len(self._buffer) > MAX_FRAME_BYTES:
                if self._oversized is None:
                    self._oversized = bytes(self._buffer[:4096])
                self._buffer.clear()
            chunk = await self._stream.receive_some(_READ)
            if not chunk:
                if self._buffer and self._oversized is None:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            self._buffer += chunk


MAX_DEPTH = 64
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")')
_decode = msgspec.json.decode
_encode = msgspec.json.encode


def screen(text: str) -> str | None:
    """None to pass a frame to the SDK, else the JSON-RPC error line to answer it with."""
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
        ids = [f.get("id") for f in frame if isinstance(f, dict) and _is_id(f.get("id"))]
        return "".join(_error(i, -32600, "Batches are not supported") for i in ids) or None
    if not isinstance(frame, dict) or not _is_id(frame.get("id")):
        return None  # a notification or not a request: nothing to answer
    rid = frame["id"]
    if frame.get("jsonrpc") != "2.0":
        return _error(rid, -32600, 'Invalid Request: jsonrpc must be "2.0"')
    if not isinstance(frame.get("method"), str):
        return _error(rid, -32600, "Invalid Request: method must be a string")
    params = frame.get("params")
    if params is not None and not isinstance(params, dict):
        return _error(rid, -32602, "Invalid params: params must be an object")
    if (text.count("{") + text.count("[")) > MAX_DEPTH and _depth(params) > MAX_DEPTH:
        return _error(rid, -32602, f"Invalid params: nested deeper than {MAX_DEPTH} levels")
    return None


def _is_id(value: Any) -> bool:
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


def _error(rid: int | str | None, code: int, message: str) -> str:
    frame = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return _encode(frame).decode() + "\n"


@asynccontextmanager
async def trio_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read_stream, write_stream) over trio-native standard streams."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin = trio.lowlevel.FdStream(wire_in)
    stdout = trio.lowlevel.FdStream(wire_out)
    writer = _Writer(stdout)
    try:
        async with stdio_server(
            stdin=cast(Any, _LineReader(stdin, writer)), stdout=cast(Any, writer)
        ) as streams:
            yield streams
    finally:
        with trio.CancelScope(shield=True):
            await stdin.aclose()
            await stdout.aclose()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
