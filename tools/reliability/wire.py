"""A raw JSON-RPC client over the bridge's stdio: any frame, many in flight, SIGKILL at will.

The SDK's client refuses to send what a fuzzer needs (malformed frames, wrong shapes) and hides
the subprocess; this one writes bytes, matches answers to requests by id, counts every stdout
line that is not a JSON-RPC message (a protocol violation: stdout carries only the protocol),
and keeps the pid. Its stderr goes to a file, so that canaries can be looked for there.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

PROTOCOL_VERSION = "2025-11-25"
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class BridgeGone(Exception):
    """The bridge closed its stdout (it exited or was killed) before answering."""


@dataclass
class Transcript:
    """Everything the client saw: answers by id, other messages, and protocol violations."""

    answers: dict[int | str, dict[str, Any]] = field(default_factory=dict)
    unsolicited: list[dict[str, Any]] = field(default_factory=list)
    violations: list[bytes] = field(default_factory=list)
    sent: int = 0


class RawBridge:
    """One bridge subprocess spoken to in raw newline-delimited JSON-RPC."""

    def __init__(self, process: trio.Process, stderr_path: Path, client_name: str) -> None:
        self.process = process
        self.stderr_path = stderr_path
        self.client_name = client_name
        self.transcript = Transcript()
        self._ids = itertools.count(1)
        self._waiting: dict[int | str, trio.Event] = {}
        self._closed = trio.Event()
        self._send_lock = trio.Lock()
        self.killed = False
        self.answer_timeout = 30.0  # seconds an exchange waits before trio.TooSlowError

    @property
    def pid(self) -> int:
        return self.process.pid

    def next_id(self) -> int:
        return next(self._ids)

    async def send(self, frame: bytes | Mapping[str, Any] | list[Any]) -> None:
        """Write one frame (bytes as given, anything else JSON-encoded) and a newline."""
        data = frame if isinstance(frame, bytes) else _encode(frame)
        assert self.process.stdin is not None
        async with self._send_lock:
            await self.process.stdin.send_all(data + b"\n")
        self.transcript.sent += 1

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        request_id: int | str | None = None,
    ) -> dict[str, Any]:
        """Send a request and wait for the answer with its id."""
        rid = self.next_id() if request_id is None else request_id
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        return await self.exchange(frame, rid)

    async def exchange(self, frame: bytes | Mapping[str, Any], rid: int | str) -> dict[str, Any]:
        """Send a frame that carries id `rid` and wait (at most `answer_timeout`) for its answer."""
        done = self._waiting[rid] = trio.Event()
        await self.send(frame)
        with trio.fail_after(self.answer_timeout):
            async with trio.open_nursery() as nursery:

                async def gone() -> None:
                    await self._closed.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(gone)
                await done.wait()
                nursery.cancel_scope.cancel()
        self._waiting.pop(rid, None)
        answer = self.transcript.answers.get(rid)
        if answer is None:
            raise BridgeGone(f"no answer to request {rid!r}")
        return answer

    async def call(
        self,
        name: str,
        arguments: Any,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = dict(meta)
        return await self.request("tools/call", params)

    async def initialize(self) -> dict[str, Any]:
        answer = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": self.client_name, "version": "1"},
            },
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def kill(self) -> None:
        """SIGKILL the bridge (no shutdown, no final checkpoint)."""
        self.killed = True
        self.process.send_signal(signal.SIGKILL)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def _read(self) -> None:
        assert self.process.stdout is not None
        buffer = bytearray()
        try:
            while True:
                chunk = await self.process.stdout.receive_some(1 << 16)
                if not chunk:
                    return
                buffer += chunk
                while (newline := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:newline])
                    del buffer[: newline + 1]
                    self._dispatch(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self._closed.set()
            for event in self._waiting.values():
                event.set()

    def _dispatch(self, line: bytes) -> None:
        try:
            message = _decode(line)
        except msgspec.DecodeError:
            self.transcript.violations.append(line[:500])
            return
        if isinstance(message, list) and message:  # a batch's answer: JSON-RPC's array
            if all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in message):
                for each in message:
                    self._dispatch_one(each)
                return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.transcript.violations.append(line[:500])
            return
        self._dispatch_one(message)

    def _dispatch_one(self, message: dict[str, Any]) -> None:
        rid = message.get("id")
        if rid is None or not ("result" in message or "error" in message):
            self.transcript.unsolicited.append(message)
            return
        self.transcript.answers[rid] = message
        waiter = self._waiting.get(rid)
        if waiter is not None:
            waiter.set()


def bridge_env(runtime_env: Mapping[str, str], home: Path) -> dict[str, str]:
    """A clean environment: only what a bridge needs, nothing inherited by accident."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        **runtime_env,
    }


@asynccontextmanager
async def open_raw_bridge(
    journal_path: Path,
    env: Mapping[str, str],
    *extra: str,
    client_name: str = "reliability",
    initialize: bool = True,
    exit_timeout: float = 15.0,
) -> AsyncIterator[RawBridge]:
    """Start `agentteam-bridge serve --journal PATH` and (by default) initialize a session.

    On exit stdin is closed and the bridge must exit 0 within `exit_timeout` (unless it was
    killed); a bridge that hangs is killed and reported as an AssertionError.
    """
    stderr_path = journal_path.with_name(journal_path.name + f".{client_name}.stderr")
    command = [
        sys.executable,
        "-m",
        "agentteam_task_bridge.bridge._cli",
        "serve",
        "--journal",
        str(journal_path),
    ]
    with stderr_path.open("wb") as errlog:
        process = await trio.lowlevel.open_process(
            [*command, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=dict(env),
        )
    raw = RawBridge(process, stderr_path, client_name)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(raw._read)
            if initialize:
                await raw.initialize()
            yield raw
            if not raw.killed:
                assert process.stdin is not None
                await process.stdin.aclose()
                with trio.move_on_after(exit_timeout) as waited:
                    code = await process.wait()
                if waited.cancelled_caught:
                    raw.kill()
                    await process.wait()
                    raise AssertionError(f"the bridge did not exit within {exit_timeout} s")
                assert code == 0, f"the bridge exited {code}: {raw.stderr()[-2000:]}"
            else:
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
