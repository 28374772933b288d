"""The stdio wire itself: raw frames, garbage, EOF and SIGTERM, and `serve --embedded`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge._stdio import FrameScreen

from .bridge_harness import bridge_command, open_bridge

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


class RawBridge:
    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""

    async def send(self, frame: Any) -> None:
        data = frame if isinstance(frame, bytes) else json.dumps(frame).encode()
        assert self.process.stdin is not None
        await self.process.stdin.send_all(data + b"\n")

    async def receive(self, wait_seconds: float = 10.0) -> dict[str, Any]:
        message = await self.receive_any(wait_seconds)
        assert isinstance(message, dict), message
        return message

    async def receive_any(self, wait_seconds: float = 10.0) -> dict[str, Any] | list[Any]:
        """One stdout line: a JSON-RPC message, or an array of them (a batch's answer)."""
        assert self.process.stdout is not None
        with trio.fail_after(wait_seconds):
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some(65536)
                assert chunk, "stdout closed"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] | list[Any] = json.loads(line)  # every stdout line is JSON-RPC
        assert all(
            m["jsonrpc"] == "2.0" for m in (message if isinstance(message, list) else [message])
        )
        return message

    async def close(self) -> None:
        """End the session; nothing more may have been answered (one answer per request)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        await self.process.stdin.aclose()
        with trio.fail_after(10):
            while chunk := await self.process.stdout.receive_some(65536):
                self._buffer += chunk
            assert await self.process.wait() == 0
        assert self._buffer == b"", self._buffer


async def _start(env: dict[str, str], journal_path: Path) -> RawBridge:
    process = await trio.lowlevel.open_process(
        bridge_command("--journal", str(journal_path)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(journal_path.parent), **env},
    )
    raw = RawBridge(process)
    await raw.send(INIT)
    assert (await raw.receive())["id"] == 1
    await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return raw


async def test_garbage_frames_are_survived_and_real_requests_still_answered(
    file_runtime: Any, tmp_path: Path
) -> None:
    raw = await _start(file_runtime.bridge_env(), tmp_path / "j.db")
    for frame in (
        b"not json",
        b'{"jsonrpc": "2.0", "id": 5, "method": ',
        b"[1, 2, 3]",
        b'{"id": 6, "method": "tools/list"}',
        b"\xff\xfe\x00",
        b"{}",
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "x"}',
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 8,
                "method": "tools/call",
                "params": {"name": "task_get", "arguments": {"channel": "g" * 2_000_000}},
            }
        ).encode(),
    ):
        await raw.send(frame)
    errors: list[tuple[Any, int]] = []
    answer = await raw.receive_any()
    while isinstance(answer, list) or answer.get("id") != 8:
        batch = answer if isinstance(answer, list) else [answer]
        errors += [(a["id"], a["error"]["code"]) for a in batch]
        answer = await raw.receive_any()
    # A parse error without an id (null), one with the id recovered (5), a batch answered with an
    # array (an Invalid Request per element), the wrong shapes (6: not 2.0; {}: no method, so id
    # null; 7: params not an object). One answer each, in order.
    assert errors == [
        (None, -32700),
        (5, -32700),
        *[(None, -32600)] * 3,
        (6, -32600),
        (None, -32700),
        (None, -32600),
        (7, -32602),
    ]
    assert answer["id"] == 8 and answer["result"]["isError"] is True
    assert answer["result"]["structuredContent"]["error"]["code"] == "invalid_arguments"
    await raw.send({"jsonrpc": "2.0", "id": 9, "method": "nope/nothing"})
    assert (await raw.receive())["error"]["code"] == -32601
    await raw.send({"jsonrpc": "2.0", "id": 10, "method": "tools/list"})
    assert len((await raw.receive())["result"]["tools"]) == 7
    # No cursor was ever issued (one page holds every tool): any cursor is invalid params.
    for rid, cursor in ((11, "garbage"), (12, ""), (13, "eyJwYWdlIjoyfQ==")):
        params = {"cursor": cursor}
        await raw.send({"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": params})
        refused = await raw.receive()
        assert refused["id"] == rid and refused["error"]["code"] == -32602, refused
    await raw.close()


@pytest.mark.parametrize(
    ("frame", "rid"),
    [
        ('{"jsonrpc": "2.0", "id": 5, "method": ', 5),
        ('{"jsonrpc": "2.0", "id" : -42 } trailing', -42),
        ('{"jsonrpc": "2.0", "id": "a\\"b", "method": ', 'a"b'),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": ', None),
        ('{"jsonrpc": "2.0", "id": 1e400, "method": "ping"}', None),
        ('{"jsonrpc": "2.0", "id": 12345678901234567890, "method": ', None),
        ('{"jsonrpc": "2.0", "id": 7', None),  # cut inside the id: 7, or 70?
    ],
    ids=["integer", "before trailing bytes", "string", "float", "1e400", "20 digits", "cut"],
)
def test_a_parse_error_names_the_request_s_id_only_when_it_is_whole(frame: str, rid: Any) -> None:
    """The id a client would match the error with is its own or null, never a piece of it."""
    refusal = FrameScreen().screen(frame)
    assert refusal is not None
    error = {"code": -32700, "message": "Parse error"}
    assert json.loads(refusal) == {"jsonrpc": "2.0", "id": rid, "error": error}


async def test_requests_with_ids_of_other_types_are_invalid_requests_with_a_null_id(
    file_runtime: Any, tmp_path: Path
) -> None:
    raw = await _start(file_runtime.bridge_env(), tmp_path / "j.db")
    bad_ids: list[Any] = [1.5, 2.0, True, False, {"n": 1}, [1], None]
    for rid in bad_ids:
        await raw.send({"jsonrpc": "2.0", "id": rid, "method": "ping"})
    await raw.send(b'{"jsonrpc": "2.0", "id": 1e3, "method": "ping"}')
    await raw.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
    answers = [await raw.receive() for _ in range(len(bad_ids) + 2)]
    assert [(a["id"], a["error"]["code"]) for a in answers[:-1]] == [(None, -32600)] * (
        len(bad_ids) + 1
    )
    assert answers[-1] == {"jsonrpc": "2.0", "id": "after", "result": {}}
    await raw.close()


async def test_responses_from_the_client_are_never_answered(
    file_runtime: Any, tmp_path: Path
) -> None:
    raw = await _start(file_runtime.bridge_env(), tmp_path / "j.db")
    for frame in (
        {"jsonrpc": "2.0", "id": 77, "result": {}},
        {"jsonrpc": "2.0", "id": "r", "result": {"content": []}},
        {"jsonrpc": "2.0", "id": 78, "error": {"code": -32601, "message": "no"}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
        {"jsonrpc": "2.0", "id": 1.5, "result": {}},
        [{"jsonrpc": "2.0", "id": 79, "result": {}}],  # a batch of responses: nothing to answer
    ):
        await raw.send(frame)
    await raw.send({"jsonrpc": "2.0", "id": 80, "method": "ping"})
    assert await raw.receive() == {"jsonrpc": "2.0", "id": 80, "result": {}}  # nothing before it
    await raw.close()


class Gate:
    """Holds every upstream request until `release` is set (a fresh event re-closes it)."""

    def __init__(self) -> None:
        self.release = trio.Event()


@asynccontextmanager
async def _held_upstream() -> AsyncIterator[tuple[str, Gate]]:
    """An Agent Runtime API that answers nothing until the gate opens, then 503."""
    gate = Gate()

    async def hold(stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                head += chunk
            if head.startswith(b"GET / "):  # the start-up probe's one request: answered
                await stream.send_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                return
            await gate.release.wait()
            await stream.send_all(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                b"connection: close\r\n\r\n"
            )

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}", gate
        nursery.cancel_scope.cancel()


async def test_a_duplicate_id_in_flight_is_refused_and_the_first_answered_once(
    tmp_path: Path,
) -> None:
    async with _held_upstream() as (url, gate):
        env = {
            "AGENTTEAM_API_URL": url,
            "AGENTTEAM_WORKSPACE_ID": "ws_1",
            "AGENTTEAM_AGENT_ID": "agt_1",
            "AGENTTEAM_TOKEN": "tok-held-upstream",
        }
        raw = await _start(env, tmp_path / "j.db")
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "task_get", "arguments": {"channel": "general", "number": 1}},
        }
        await raw.send(call)  # held upstream: in flight until released
        await raw.send({**call, "params": {"name": "task_list", "arguments": {}}})
        await raw.send({"jsonrpc": "2.0", "id": "7", "method": "ping"})  # the SDK's same id
        refusals = [await raw.receive(), await raw.receive()]
        assert [(r["id"], r["error"]["code"]) for r in refusals] == [(7, -32600), ("7", -32600)]
        await raw.send({"jsonrpc": "2.0", "id": 8, "method": "ping"})  # others still served
        assert await raw.receive() == {"jsonrpc": "2.0", "id": 8, "result": {}}
        gate.release.set()
        first = await raw.receive()
        assert first["id"] == 7 and first["result"]["isError"] is True
        assert first["result"]["structuredContent"]["error"]["code"] == "upstream_unavailable"
        # Answered, the id is free again, and answered once more.
        await raw.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        assert await raw.receive() == {"jsonrpc": "2.0", "id": 7, "result": {}}
        await raw.close()
    with journal.open_reader(tmp_path / "j.db") as reader:
        received = list(reader.events(kind="call_received"))
    assert len(received) == 1  # the refused duplicate never reached the tools


async def test_a_cancelled_request_frees_its_id_and_is_never_answered(tmp_path: Path) -> None:
    async with _held_upstream() as (url, _gate):
        env = {
            "AGENTTEAM_API_URL": url,
            "AGENTTEAM_WORKSPACE_ID": "ws_1",
            "AGENTTEAM_AGENT_ID": "agt_1",
            "AGENTTEAM_TOKEN": "tok-held-upstream",
        }
        raw = await _start(env, tmp_path / "j.db")
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "task_get", "arguments": {"channel": "general", "number": 1}},
            }
        )
        await raw.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert (await raw.receive())["error"]["code"] == -32600  # still in flight
        await raw.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
        )
        await raw.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert await raw.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}
        await raw.close()  # no answer for the cancelled call came before the end


async def test_sigterm_shuts_down_cleanly_with_a_checkpoint(
    file_runtime: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"
    raw = await _start(file_runtime.bridge_env(), path)
    await raw.send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "task_list", "arguments": {"channel": "general"}},
        }
    )
    assert (await raw.receive())["id"] == 2
    raw.process.send_signal(signal.SIGTERM)
    with trio.fail_after(10):
        await raw.process.wait()
    with journal.open_reader(path) as reader:
        ended = list(reader.events(kind="session_ended"))
        report = journal.verify(
            reader,
            checkpoint=journal.load_checkpoint(path.with_name(path.name + ".checkpoint.json")),
            key=journal.load_key(
                path.parent / "agentteam-bridge" / "journal-signing.key", create=False
            ),
        )
    assert report.ok, report.findings
    assert ended and ended[-1].payload.reason == "SIGTERM"  # type: ignore[union-attr]


async def test_serve_embedded_needs_no_server_and_keeps_tasks_across_restarts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with open_bridge({}, path, "--embedded") as bridge:
        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "persist"}]})
    async with open_bridge({}, path, "--embedded") as bridge:
        listed = await bridge.ok("task_list", {"channel": "general"})
    assert [t["title"] for t in listed["data"]["items"]] == ["persist"]
    assert (tmp_path / "runtime.db").exists()


def test_cli_help_lists_the_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "serve" in done.stdout and "runtime" in done.stdout
