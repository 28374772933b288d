"""The processes a benchmark or a reliability run drives, and what `/proc` says about them.

The reference runtime runs in its own process (so that neither the client's nor the bridge's
event loop pays for its SQLite work), the bridge and the floor server are launched through the
`mcp` SDK's stdio client exactly as an agent runtime launches them, and RSS and CPU time are read
from `/proc/<pid>`. Other tools (``tools.reliability``) use these helpers too.
"""

from __future__ import annotations

import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import mcp_types as types
import trio
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

WORKSPACE_ID = "ws_local"
AGENT_ID = "agt_local"
CLIENT = types.Implementation(name="agentteam-bench", version="1")
_EXPORT = re.compile(r"^export (?P<key>\w+)=(?P<value>.*)$")
_ADMIN = re.compile(r"admin token[^:]*: (?P<token>\S+)")


@dataclass
class RuntimeProcess:
    """The reference runtime serving on loopback from its own process."""

    url: str
    token: str
    admin_token: str
    db_path: Path
    process: trio.Process

    def bridge_env(self, **extra: str) -> dict[str, str]:
        """What a bridge needs to reach it, with a static token (benchmarks never refresh)."""
        return {
            "AGENTTEAM_API_URL": self.url,
            "AGENTTEAM_WORKSPACE_ID": WORKSPACE_ID,
            "AGENTTEAM_AGENT_ID": AGENT_ID,
            "AGENTTEAM_TOKEN": self.token,
            **extra,
        }

    @property
    def task_route(self) -> str:
        return f"/api/v1/workspaces/{WORKSPACE_ID}/agents/{AGENT_ID}/runtime/tasks"


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> str:
    while b"\n" not in buffer:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise RuntimeError("the runtime exited before announcing itself")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


@asynccontextmanager
async def open_runtime_process(
    directory: Path, *, token_ttl_seconds: float = 7 * 86400.0
) -> AsyncIterator[RuntimeProcess]:
    """Start `agentteam-bridge runtime` on a free port with its database in `directory`."""
    db_path = directory / "runtime.db"
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "agentteam_task_bridge.cli",
            "runtime",
            "--port",
            "0",
            "--db",
            str(db_path),
            "--token-ttl",
            str(token_ttl_seconds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        env: dict[str, str] = {}
        out, err = bytearray(), bytearray()
        with trio.fail_after(30):
            while "AGENTTEAM_TOKEN_COMMAND" not in env:
                found = _EXPORT.match(await _read_line(process.stdout, out))
                if found:
                    env[found["key"]] = shlex.split(found["value"])[0]
            admin = None
            while admin is None:
                match = _ADMIN.search(await _read_line(process.stderr, err))
                admin = match["token"] if match else None
            minted = await trio.run_process(
                shlex.split(env["AGENTTEAM_TOKEN_COMMAND"]), capture_stdout=True
            )
        yield RuntimeProcess(
            env["AGENTTEAM_API_URL"], minted.stdout.decode().strip(), admin, db_path, process
        )
    finally:
        with trio.CancelScope(shield=True):
            process.terminate()
            with trio.move_on_after(5):
                await process.wait()
            process.kill()
            await process.wait()


async def add_board(runtime: RuntimeProcess, slug: str) -> None:
    """A new board on the runtime's workspace with the local agent as its member (admin API)."""
    async with httpx.AsyncClient(base_url=runtime.url, trust_env=False) as client:
        response = await client.post(
            "/_admin/boards",
            json={"workspaceId": WORKSPACE_ID, "slug": slug, "memberIds": [AGENT_ID]},
            headers={"x-admin-token": runtime.admin_token},
        )
    response.raise_for_status()


# --- /proc ---------------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc/*/stat."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a live process in KiB: the resident set now and its peak."""
    values = {"VmRSS": 0, "VmHWM": 0}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds of each live thread of a process, by thread name (threads of
    one name summed)."""
    tick = os.sysconf("SC_CLK_TCK")
    threads: dict[str, tuple[float, float]] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                text = stat.read()
        except FileNotFoundError:
            continue  # ended since the listing
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        user, system = threads.get(name, (0.0, 0.0))
        threads[name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return threads


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (from /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User plus system CPU time of this process so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def own_tree_seconds() -> float:
    """CPU seconds of this process and of its children that have exited."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own_cpu_seconds() + children.ru_utime + children.ru_stime


# --- MCP servers over the SDK's stdio client -----------------------------------------------


def bridge_command(journal_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentteam_task_bridge.bridge._cli",
        "serve",
        "--journal",
        str(journal_path),
        *extra,
    ]


def floor_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "tools.bench.floor_server", *extra]


@dataclass
class McpProcess:
    """An initialized SDK client session over a server subprocess."""

    session: ClientSession
    pid: int
    errlog: IO[str]

    async def call(
        self, name: str, arguments: Mapping[str, Any], meta: types.RequestParamsMeta | None = None
    ) -> types.CallToolResult:
        """`tools/call` without the client-side output-schema validation of `call_tool`.

        The SDK client revalidates structured results against the tool's `outputSchema` (the
        floor server declares none); skipping it keeps the client's work the same for every
        server measured, so differences are the servers'.
        """
        params = types.CallToolRequestParams(name=name, arguments=dict(arguments), _meta=meta)
        return await self.session.send_request(
            types.CallToolRequest(params=params), types.CallToolResult
        )

    def stderr(self) -> str:
        self.errlog.flush()
        self.errlog.seek(0)
        return self.errlog.read()


@asynccontextmanager
async def open_mcp(
    command: list[str],
    env: Mapping[str, str],
    *,
    list_tools: bool = True,
    checkout: Path | None = None,
) -> AsyncIterator[McpProcess]:
    """Launch `command` through the SDK stdio client, initialize, and list the tools.

    `checkout`: run the server's code from another checkout of this repository (a scratch git
    worktree with a proposed change), so that it can be measured beside this one in one run.
    """
    env = dict(env)
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=env, cwd=checkout or Path.cwd()
    )
    before = set(children_of(os.getpid()))
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            spawned = [p for p in children_of(os.getpid()) if p not in before]
            async with ClientSession(read, write, client_info=CLIENT) as session:
                with trio.fail_after(60):
                    await session.initialize()
                    if list_tools:
                        await session.list_tools()
                yield McpProcess(session, spawned[0] if spawned else -1, errlog)
