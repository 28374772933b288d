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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio
from mcp.server.stdio import stdio_server

log = logging.getLogger("agentteam.bridge.stdio")
MAX_FRAME_BYTES = 16 << 20
_READ = 1 << 16


class _LineReader:
    """Async iteration over newline-delimited frames, dropping frames over MAX_FRAME_BYTES."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._skipping = False

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._skipping:
                    self._skipping = False
                    continue
                return line.decode("utf-8", errors="replace")
            if len(self._buffer) > MAX_FRAME_BYTES:
                log.warning("dropping a frame larger than %d bytes", MAX_FRAME_BYTES)
                self._buffer.clear()
                self._skipping = True
            chunk = await self._stream.receive_some(_READ)
            if not chunk:
                if self._buffer and not self._skipping:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            self._buffer += chunk


class _Writer:
    """The two methods the SDK's stdout writer uses, over a non-blocking descriptor."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream

    async def write(self, text: str) -> None:
        await self._stream.send_all(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


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
    try:
        async with stdio_server(
            stdin=cast(Any, _LineReader(stdin)), stdout=cast(Any, _Writer(stdout))
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
