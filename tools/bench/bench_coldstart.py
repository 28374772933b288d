"""Cold start: process spawn to the `initialize` response and to the first `tools/list` answer.

The bridge (reusing one journal file, as a user's bridge does) beside the one-tool floor server
on the same SDK and the FastMCP peer (``peer_server``, with the ``[bench]`` extra), spawned
alternately through the SDK's stdio client. PRODUCT's target: the bridge within 1.2x of the floor;
issue 19's, read by the targets section: the first tools/list answer within 1.1x of the floor's.
"""

from __future__ import annotations

import time
from pathlib import Path

import mcp_types as types
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from . import peer_server, procs
from ._report import Row, ms
from .bench_latency import PEER, peer_command

SECTION = "cold start (spawn -> answer)"
TARGET_RATIO = 1.2


async def spawn_once(
    command: list[str], env: dict[str, str], checkout: Path | None = None
) -> tuple[float, float, int]:
    """(seconds to the initialize result, seconds to the tools/list result, tools listed)."""
    if checkout is not None:
        env = {**env, "PYTHONPATH": str(checkout)}
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=env, cwd=checkout or Path.cwd()
    )
    start = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, client_info=procs.CLIENT) as session:
            await session.initialize()
            initialized = time.perf_counter() - start
            listed: types.ListToolsResult = await session.list_tools()
            return initialized, time.perf_counter() - start, len(listed.tools)


async def run(
    runtime: procs.RuntimeProcess,
    workdir: Path,
    *,
    quick: bool,
    checkouts: dict[str, Path] | None = None,
) -> list[Row]:
    spawns = 6 if quick else 20
    home = workdir / "coldstart"
    env = runtime.bridge_env(XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    commands: dict[str, tuple[list[str], dict[str, str], Path | None]] = {
        "bridge": (procs.bridge_command(home / "journal.db"), env, None),
        "floor (SDK one-tool server)": (procs.floor_command(), {}, None),
    }
    for label, path in (checkouts or {}).items():
        journal = home / f"journal-{label}.db"
        commands[f"bridge, {label}"] = (procs.bridge_command(journal), env, path)
    if peer_server.available():
        commands[PEER] = (peer_command(), runtime.bridge_env(), None)
    for command, command_env, where in commands.values():
        await spawn_once(command, command_env, where)  # warm caches; bridges make journals
    init: dict[str, list[float]] = {name: [] for name in commands}
    listed: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(spawns):
        for name, (command, command_env, where) in commands.items():
            first, second, tools = await spawn_once(command, command_env, where)
            assert tools >= 1
            init[name].append(first)
            listed[name].append(second)
    rows = []
    floor_name = "floor (SDK one-tool server)"
    for what, samples in (("initialize", init), ("first tools/list", listed)):
        floor = ms(samples[floor_name], 0.5)
        for name in commands:
            p50 = ms(samples[name], 0.5)
            measured = name.startswith("bridge") or name == PEER
            checked = name == "bridge"
            rows.append(
                Row(
                    SECTION,
                    f"{name}: spawn -> {what}",
                    p50,
                    ms(samples[name], 0.99),
                    compare=f"{p50 / floor:.2f}x floor" if measured else "",
                    target=f"<= {TARGET_RATIO}x floor" if checked else "",
                    ok=p50 / floor <= TARGET_RATIO if checked else None,
                    metrics={"coldstart": p50 / floor} if checked and what != "initialize" else {},
                )
            )
    if not peer_server.available():
        rows.append(Row(SECTION, PEER, compare=peer_server.EXTRA_MISSING))
    return rows
