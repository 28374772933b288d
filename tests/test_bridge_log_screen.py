"""No log line on stderr holds a known secret or hidden context, whatever logger writes it.

The bridge's own lines name no payload, but at ``--log-level debug`` the SDK logs what it drops:
a client's response to an unknown request is logged with its id, so an id holding the token
(whole, cut, re-cased) or the workspace id reached stderr as it came. Every formatted line now
passes the session's screen (its known secrets and hidden context), in both log formats.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import bridge_command
from .test_bridge_stdio import INIT, RawBridge


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
    call = {"name": "task_list", "arguments": {"channel": "general"}}
    late = [token, token.upper(), token[5:19].swapcase(), f"x-{rt.workspace_id}-y"]
    process = await trio.lowlevel.open_process(
        bridge_command(
            "--journal", str(tmp_path / "j.db"), "--log-level", "debug", "--log-format", log_format
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    raw = RawBridge(process)
    errors = bytearray()

    async def drain() -> None:
        assert process.stderr
        while chunk := await process.stderr.receive_some():
            errors.extend(chunk)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await raw.send(INIT)
            assert (await raw.receive())["id"] == 1
            await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await raw.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            # The token has been sent upstream once this is answered: the screen knows it.
            assert (await raw.receive(30))["id"] == 2
            for ident in late:
                await raw.send({"jsonrpc": "2.0", "id": ident, "result": {}})
            await raw.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
            assert (await raw.receive())["id"] == 3
            await raw.close()
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
