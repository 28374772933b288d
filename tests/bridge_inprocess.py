"""The bridge in-process, for tables of cases where the process is not the point.

Two harnesses, both over the real call flow and a real journal file:

- `inprocess_bridge`: the `Bridge` itself over an httpx transport (`httpx.MockTransport` or a
  scripted one), the MCP client being a direct call; for fault tables.
- `inprocess_session`: the same MCP session `serve` runs (the SDK's server and client, joined by
  memory streams instead of stdio) over the reference runtime on real loopback HTTP; it yields
  the `BridgeSession` the subprocess harness yields, so a test reads the same either way.

What they skip is what the subprocess tests prove once per behaviour: the command line, the
environment, stdio framing, the token command, the process's exit (see tests/README.md).
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
import trio

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge._call import Bridge, Session
from agentteam_task_bridge.bridge._cli import main as bridge_main
from agentteam_task_bridge.bridge._compat import Policy
from agentteam_task_bridge.bridge._context import TokenSource, load_launch_context
from agentteam_task_bridge.bridge._cursor import Cursors, load_cursor_key
from agentteam_task_bridge.bridge._journaling import JournalAdapter, open_journal
from agentteam_task_bridge.bridge._lifecycle import STOP_SIGNALS
from agentteam_task_bridge.bridge._upstream import Transport
from agentteam_task_bridge.bridge.testing import (
    ScriptedTokens,
    bridge_over,
    launch_context,
    serve_in_memory,
)
from agentteam_task_bridge.bridge.testing import upstream_task as upstream_task
from agentteam_task_bridge.journal import Event, SessionEnded, SessionStarted
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import CLIENT, BridgeSession, assert_journal_sound
from .journal_helpers import KEY

SESSION = "s_inproc"


@asynccontextmanager
async def inprocess_bridge(
    path: Path,
    transport: httpx.AsyncBaseTransport | Transport | None,
    *,
    tokens: TokenSource | None = None,
    url: str = "http://upstream.test",
    workspace_id: str = "ws_1",
    agent_id: str = "agt_1",
    **writer_options: Any,
) -> AsyncIterator[tuple[Bridge, journal.AsyncWriter]]:
    """A bridge session journaling to `path`: session start and end included, so `verify`
    holds every call to its whole story. No transport: the bridge's own HTTP/1.1 pool to `url`."""
    source = tokens or ScriptedTokens(["tok-inproc"], kind="test:static", refreshable=False)
    launch = launch_context(
        url,
        source,
        workspace_id=workspace_id,
        agent_id=agent_id,
        sources={"api_url": "test", "workspace_id": "test", "agent_id": "test"},
    )
    async with journal.open_writer(path, key=KEY, **writer_options) as writer:
        bridge = bridge_over(
            transport or url,
            journal=JournalAdapter(writer),
            launch=launch,
            session=Session(SESSION),
        )
        await writer.append(
            Event(
                session_id=SESSION,
                payload=SessionStarted(
                    bridge_version="test",
                    compat_policy="hint",
                    workspace_id=workspace_id,
                    agent_id=agent_id,
                ),
            )
        )
        try:
            yield bridge, writer
        finally:
            await bridge.upstream.aclose()
            if writer.failed is None:
                await writer.append(
                    Event(session_id=SESSION, payload=SessionEnded(reason="test", calls=0))
                )


def key_path_for(journal_path: Path) -> Path:
    """Where `open_bridge` makes the bridge keep its signing key (XDG_CONFIG_HOME beside it)."""
    return journal_path.parent / "config" / "agentteam-bridge" / "journal-signing.key"


def minted_tokens(runtime: Runtime, agent_id: str | None = None) -> ScriptedTokens:
    """A fresh token from the runtime at every fetch, as its token command prints (in-process)."""
    agent = agent_id or runtime.agent_id
    return ScriptedTokens(
        lambda _: runtime.mint_token(agent), kind="command:AGENTTEAM_TOKEN_COMMAND"
    )


@asynccontextmanager
async def inprocess_session(
    runtime: Runtime,
    journal_path: Path,
    *,
    compat: Policy = "hint",
    upstream_timeout: float = 10.0,
    journal_max_bytes: int | None = None,
    tokens: TokenSource | None = None,
    env: Mapping[str, str] | None = None,
    check_journal: bool = True,
) -> AsyncIterator[BridgeSession]:
    """`serve --journal PATH` in-process against `runtime`: what `open_bridge` gives, minus the
    process (its stderr is the bridge's log). The token is minted in-process, unless `env` is
    given: then the launch context is read from it as `serve` reads it (the token command, file
    or static token of that environment)."""
    errlog = io.StringIO()
    handler = logging.StreamHandler(errlog)
    logger = logging.getLogger("agentteam")
    logger.addHandler(handler)
    try:
        async with open_journal(
            journal_path, max_bytes=journal_max_bytes, key_path=key_path_for(journal_path)
        ) as port:
            launch = (
                load_launch_context(env)
                if env is not None
                else launch_context(
                    runtime.url,
                    tokens or minted_tokens(runtime),
                    workspace_id=runtime.workspace_id,
                    agent_id=runtime.agent_id,
                )
            )
            bridge = bridge_over(
                launch.api_url,
                journal=port,
                launch=launch,
                session=Session("s" + secrets.token_hex(6)),
                compat=compat,
                timeout_seconds=upstream_timeout,
                cursors=Cursors(load_cursor_key(key_path_for(journal_path).parent)),
            )
            bridge.credentials.on_token = port.add_secret
            try:
                async with serve_in_memory(bridge, port, client_info=CLIENT) as client:
                    with trio.fail_after(30):  # bounds a hang only
                        tools = (await client.list_tools()).tools
                    yield BridgeSession(client, runtime, port.path, errlog, tools)
            finally:
                await bridge.upstream.aclose()
    finally:
        logger.removeHandler(handler)
    if check_journal:
        assert_journal_sound(journal_path)


def serve_inprocess(
    home: Path,
    capfd: pytest.CaptureFixture[str],
    *args: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`agentteam-bridge serve ARGS` for a user whose home is `home`, run in-process by the CLI's
    `main` (for tables of start-up cases): only `env` and the home in the environment, stdin at
    EOF, stdout and stderr captured at the file descriptors, the CLI's log on stderr."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        **(env or {}),
    }
    saved = dict(os.environ)
    # `serve` owns the process's stop signals (and leaves them ignored: the process exits next);
    # the test process gets its own back.
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    stdin = os.dup(0)
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)
    capfd.readouterr()
    try:
        os.environ.clear()
        os.environ.update(env)
        with open(os.devnull) as devnull:
            os.dup2(devnull.fileno(), 0)
        code = bridge_main(["serve", *args])
    finally:
        for signum, previous in handlers.items():
            signal.signal(signum, previous)
        os.dup2(stdin, 0)
        os.close(stdin)
        os.environ.clear()
        os.environ.update(saved)
        logging.getLogger().removeHandler(handler)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["serve", *args], code, out, err)


def verified(path: Path) -> replay.VerifyResult:
    result = replay.verify([path], key=KEY)
    assert result.ok, result.findings
    return result


def kinds_of(path: Path) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {}
    with journal.open_reader(path) as reader:
        for record in reader.events():
            if record.call_id:
                calls.setdefault(record.call_id, []).append(record.kind)
    return calls


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error and result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


# A task as the upstream DTO shapes it (camelCase), for scripted transports.
TASK = upstream_task()
