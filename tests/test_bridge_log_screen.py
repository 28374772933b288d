"""No log line on stderr holds a known secret or hidden context, whatever logger writes it.

The bridge's own lines name no payload, but at ``--log-level debug`` the SDK logs what it drops:
a client's response to an unknown request is logged with its id, so an id holding the token
(whole, cut, re-cased) or the workspace id reached stderr as it came. Every formatted line now
passes the session's screen (its known secrets and hidden context), in both log formats.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import bridge_command


async def _serve_debug(rt: Runtime, tmp_path: Path, token: str, log_format: str) -> str:
    """One session at --log-level debug: a call, then responses to requests never made whose
    ids hold the token and the workspace id; the bridge's stderr."""
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        **{k: v for k, v in rt.bridge_env().items() if k != "AGENTTEAM_TOKEN_COMMAND"},
        "AGENTTEAM_TOKEN": token,
    }
    frames: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "agentteam-tests", "version": "9.9.9"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "task_list", "arguments": {"channel": "general"}},
        },
    ]
    late = [token, token.upper(), token[5:19].swapcase(), f"x-{rt.workspace_id}-y"]
    tail = [{"jsonrpc": "2.0", "id": ident, "result": {}} for ident in late]
    tail.append({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    process = await trio.lowlevel.open_process(
        bridge_command(
            "--journal", str(tmp_path / "j.db"), "--log-level", "debug", "--log-format", log_format
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin and process.stdout and process.stderr
    errors = bytearray()

    async def drain() -> None:
        assert process.stderr
        while chunk := await process.stderr.receive_some():
            errors.extend(chunk)

    async def answer(ident: int) -> None:
        assert process.stdout
        buffer = b""
        while True:
            while b"\n" not in buffer:
                chunk = await process.stdout.receive_some()
                assert chunk, "the bridge closed its stdout"
                buffer += chunk
            line, _, buffer = buffer.partition(b"\n")
            if json.loads(line).get("id") == ident:
                return

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            for frame in frames:
                await process.stdin.send_all(json.dumps(frame).encode() + b"\n")
            await answer(2)  # the token has been sent upstream: the screen knows it
            for frame in tail:
                await process.stdin.send_all(json.dumps(frame).encode() + b"\n")
            await answer(3)
            await process.stdin.aclose()
            assert await process.wait() == 0
    return errors.decode("utf-8", errors="replace")


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_no_log_line_holds_the_token_or_hidden_context_at_debug(
    file_runtime: Runtime, tmp_path: Path, log_format: str
) -> None:
    token = file_runtime.mint_token()
    stderr = await _serve_debug(file_runtime, tmp_path, token, log_format)
    assert "dropping response" in stderr  # the SDK did log what it dropped
    folded = stderr.lower()
    pieces = {token[i : i + 12].lower() for i in range(len(token) - 11)}
    assert not [p for p in pieces if p in folded], stderr[-2000:]
    assert file_runtime.workspace_id.lower() not in folded, stderr[-2000:]
