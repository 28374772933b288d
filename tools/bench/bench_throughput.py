"""Throughput under concurrency: calls per second with 1, 8 and 32 in flight over one session.

Durable journaling commits a batch per ready group (group commit), so throughput should scale
with calls in flight; PRODUCT's target is >= 4x the sequential rate at 32. The same runtime
requests sent directly with httpx at the same concurrency show the upstream's own ceiling, and the
one-tool floor server on the same SDK (echoing the same arguments) shows how far any server on
this SDK, with its client in the same benchmark process, scales on this machine. The FastMCP peer
(``peer_server``, with the ``[bench]`` extra) is what a user would build instead; issue 19's
target, read by the targets section: at 32 in flight the durable bridge's rate >= 3x the peer's.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import trio

from . import peer_server, procs
from ._report import Row, ms
from .bench_latency import PEER, Call, direct_call, direct_client, mcp_call, open_bridges, open_peer

SECTION = "throughput: calls in flight over one stdio session"
LEVELS = (1, 8, 32)
TARGET_SCALE = 4.0


@dataclass(frozen=True)
class Run:
    rate: float  # calls per second
    latencies: list[float]
    cpu: dict[str, float]  # process -> share of one core over the run


async def drive(call: Call, calls: int, in_flight: int, pids: dict[str, int] | None = None) -> Run:
    """`calls` calls with `in_flight` workers, and the CPU share of this process ("client") and
    of each process in `pids` over the run."""
    pids = pids or {}

    def cpu_seconds() -> dict[str, float]:
        return {"client": procs.own_cpu_seconds()} | {
            name: procs.cpu_seconds(pid) for name, pid in pids.items()
        }

    before = cpu_seconds()
    counter = iter(range(calls))
    latencies: list[float] = []

    async def worker() -> None:
        for i in counter:
            start = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    elapsed = time.perf_counter() - start
    after = cpu_seconds()
    cpu = {name: (after[name] - before[name]) / elapsed for name in before}
    return Run(calls / elapsed, latencies, cpu)


async def run(
    runtime: procs.RuntimeProcess,
    workdir: Path,
    *,
    quick: bool,
    checkouts: dict[str, Path] | None = None,
) -> list[Row]:
    """Each target creates on a board of its own (the runtime slows a little as a board grows),
    and the levels are interleaved across targets, so that no target pays for another's data."""
    per_level = 400 if quick else 3000
    # Fewer creates: every task the runtime holds makes its next answers slower (see the report).
    per_level_create = 400 if quick else 1000
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(direct_client(runtime))
        targets = await open_bridges(stack, runtime, workdir, "throughput", checkouts or {})
        seed = await targets["durable journal"].call(
            "task_create", {"channel": "general", "tasks": [{"title": "read under load"}]}
        )
        assert seed.structured_content is not None
        number = int(seed.structured_content["data"]["tasks"][0]["number"])
        floor = await stack.enter_async_context(procs.open_mcp(procs.floor_command(), {}))
        peer = await open_peer(stack, runtime)
        names = [
            "direct HTTP (httpx)",
            "stdio floor (SDK one-tool)",
            *(f"bridge, {label}" for label in targets),
            *([PEER] if peer is not None else []),
        ]
        boards = {name: f"tp{i}" for i, name in enumerate(names)}
        for board in boards.values():
            await procs.add_board(runtime, board)
        # Whose CPU each target spends besides this process's (the client): one core each at
        # most, two cores between all of them.
        pids: dict[str, dict[str, int]] = {
            names[0]: {"runtime": runtime.process.pid},
            names[1]: {"server": floor.pid},
            **{
                f"bridge, {k}": {"bridge": v.pid, "runtime": runtime.process.pid}
                for k, v in targets.items()
            },
        }
        if peer is not None:
            pids[PEER] = {"peer": peer.pid, "runtime": runtime.process.pid}
        for tool in ("task_get", "task_create"):
            calls: dict[str, Call] = {
                names[0]: direct_call(client, runtime, tool, number, boards[names[0]]),
                names[1]: mcp_call(floor, tool, number, echo=True),
                **{
                    f"bridge, {k}": mcp_call(v, tool, number, channel=boards[f"bridge, {k}"])
                    for k, v in targets.items()
                },
            }
            if peer is not None:
                calls[PEER] = mcp_call(peer, tool, number, channel=boards[PEER])
            for call in calls.values():
                await drive(call, 100, 8)  # warm: connections open, caches hot
            measured: dict[tuple[str, int], Run] = {}
            for n, level in enumerate(LEVELS):
                order = names[n % len(names) :] + names[: n % len(names)]
                for name in order:
                    count = per_level if tool == "task_get" else per_level_create
                    measured[(name, level)] = await drive(calls[name], count, level, pids[name])
            peer32 = measured[(PEER, 32)].rate if peer is not None else None
            for name in names:
                sequential = measured[(name, 1)].rate
                for level in LEVELS:
                    measure = measured[(name, level)]
                    scale = measure.rate / sequential
                    checked = level == 32 and name == "bridge, durable journal"
                    cpu = ", ".join(f"{who} {share:.0%}" for who, share in measure.cpu.items())
                    versus = ""
                    metrics = {}
                    if peer32 and level == 32 and name.startswith("bridge"):
                        versus = f"{measure.rate / peer32:.2f}x the peer; "
                        if checked:
                            metrics = {f"throughput {tool}": measure.rate / peer32}
                    rows.append(
                        Row(
                            SECTION,
                            f"{tool}: {name}, {level} in flight",
                            ms(measure.latencies, 0.5),
                            ms(measure.latencies, 0.99),
                            measure.rate,
                            compare=(f"{scale:.2f}x sequential; " if level > 1 else "")
                            + versus
                            + f"CPU {cpu}",
                            target=f">= {TARGET_SCALE:.0f}x sequential" if checked else "",
                            ok=scale >= TARGET_SCALE if checked else None,
                            metrics=metrics,
                        )
                    )
            if peer is None:
                rows.append(Row(SECTION, f"{tool}: {PEER}", compare=peer_server.EXTRA_MISSING))
    return rows
