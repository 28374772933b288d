"""The stdio wire itself: raw frames, garbage, EOF and SIGTERM, and `serve --embedded`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

import journal

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
        assert self.process.stdout is not None
        with trio.fail_after(wait_seconds):
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some(65536)
                assert chunk, "stdout closed"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)  # every stdout line is JSON-RPC
        assert message["jsonrpc"] == "2.0"
        return message


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
    errors: dict[Any, int] = {}
    answer = await raw.receive()
    while answer.get("id") != 8:
        errors[answer["id"]] = answer["error"]["code"]
        answer = await raw.receive()
    # A parse error with the id recovered (5), one without (id null), the wrong shapes (6: not
    # 2.0; 7: params not an object); nothing for what is not a request.
    assert errors == {None: -32700, 5: -32700, 6: -32600, 7: -32602}
    assert answer["id"] == 8 and answer["result"]["isError"] is True
    assert answer["result"]["structuredContent"]["error"]["code"] == "invalid_arguments"
    await raw.send({"jsonrpc": "2.0", "id": 9, "method": "nope/nothing"})
    assert (await raw.receive())["error"]["code"] == -32601
    await raw.send({"jsonrpc": "2.0", "id": 10, "method": "tools/list"})
    assert len((await raw.receive())["result"]["tools"]) == 7
    assert raw.process.stdin is not None
    await raw.process.stdin.aclose()
    with trio.fail_after(10):
        assert await raw.process.wait() == 0


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
        [sys.executable, "-m", "bridge._cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "serve" in done.stdout and "runtime" in done.stdout
