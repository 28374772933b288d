"""Bridge overhead: one call's latency through the whole path beside the floors it cannot avoid.

Measured side by side in one run, interleaved in short blocks so that drift hits every target
alike: the same Agent Runtime request sent directly with httpx from the client process, the SDK's
stdio round trip to a one-tool floor server, and the bridge (MCP client -> stdio -> bridge ->
journal -> HTTP -> runtime) with the journal durable and with ``--no-durable``, and the FastMCP
peer (``peer_server``: what a user would build instead, no journal) when the ``[bench]`` extra is
installed. PRODUCT's target: bridge p50 <= floor p50 + direct HTTP p50 + 0.5 ms; issue 19's, read
by the targets section from the figures these rows carry: p50 within 1.25x (task_get) and 1.35x
(task_create) of the two floors added, server CPU per call within 2x and 2.5x of the trio-native
floor server answering a bridge-sized result.

With other checkouts (``--bridge-from LABEL=DIR``) each is then compared with this checkout's
durable bridge alone, A/B: rounds of calls sent to the two in turn, call by call, the order of
each pair swapped every pair and every round (ABBA), so that the machine's drift falls on both
alike. Each round gives the ratio of this checkout's p50 to the other's and of their server CPU
per call (every thread's ``schedstat``, to the nanosecond); the ratios are printed (stderr) as
each round ends and summarised as their median and middle half, beside the pooled p50s. The
median of many short rounds is what a drifting, loaded machine leaves alone; one pooled p50
over a few long blocks is not.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import msgspec

from . import peer_server, procs
from ._report import Row, ms

TARGET_ADDED_MS = 0.5
SECTION = "latency: one call at a time"
SIZED = "stdio floor, trio-native stdio, bridge-sized result"
PEER = "FastMCP peer (httpx, no journal)"
AB_SECTION = "latency A/B: this checkout's durable bridge against another, interleaved rounds"

Call = Callable[[int], Awaitable[Any]]


def peer_command() -> list[str]:
    return [sys.executable, "-m", "tools.bench.peer_server"]


async def open_peer(
    stack: AsyncExitStack, runtime: procs.RuntimeProcess
) -> procs.McpProcess | None:
    """The FastMCP peer on `runtime`, or None (the [bench] extra is missing: said on stderr)."""
    if not peer_server.available():
        print(f"  {peer_server.EXTRA_MISSING}", file=sys.stderr, flush=True)
        return None
    return await stack.enter_async_context(procs.open_mcp(peer_command(), runtime.bridge_env()))


def tool_arguments(tool: str, i: int, number: int, channel: str = "general") -> dict[str, Any]:
    """Arguments of one call; creates go to `channel`, reads read task `number` of `general`."""
    if tool == "task_create":
        return {"channel": channel, "tasks": [{"title": f"bench task {i}"}]}
    return {"channel": "general", "number": number}


def direct_client(runtime: procs.RuntimeProcess) -> httpx.AsyncClient:
    """An httpx client configured as the bridge's upstream pool is."""
    return httpx.AsyncClient(
        base_url=runtime.url,
        timeout=httpx.Timeout(10.0, connect=3.0),
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=30),
        headers={"user-agent": "agentteam-bench", "accept": "application/json"},
        trust_env=False,
    )


def direct_call(
    client: httpx.AsyncClient,
    runtime: procs.RuntimeProcess,
    tool: str,
    number: int,
    channel: str = "general",
) -> Call:
    """The request the bridge sends upstream for `tool`, sent straight from this process."""
    route = runtime.task_route + ("/get" if tool == "task_get" else "")
    headers = {"authorization": f"Bearer {runtime.token}", "content-type": "application/json"}
    encode = msgspec.json.encode

    async def call(i: int) -> Any:
        body = encode(tool_arguments(tool, i, number, channel))
        response = await client.post(route, content=body, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"direct {tool}: {response.status_code} {response.text[:200]}")
        return response.content

    return call


def mcp_call(
    server: procs.McpProcess,
    tool: str,
    number: int,
    *,
    echo: bool = False,
    channel: str = "general",
) -> Call:
    async def call(i: int) -> Any:
        arguments = tool_arguments(tool, i, number, channel)
        result = await server.call("echo" if echo else tool, arguments)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.structured_content}")
        return result

    return call


async def interleaved(
    targets: dict[str, Call],
    pids: dict[str, int],
    *,
    rounds: int,
    block: int,
    warmup: int,
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Latency samples (seconds) per target, measured in alternating blocks, and the CPU
    seconds per call of each target's server process (those named in `pids`)."""
    names = list(targets)
    for name in names:
        for i in range(warmup):
            await targets[name](-1 - i)
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, float] = dict.fromkeys(pids, 0.0)
    counter = 0
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            call, out = targets[name], samples[name]
            pid = pids.get(name)
            before = procs.cpu_seconds(pid) if pid else 0.0
            for _ in range(block):
                counter += 1
                start = time.perf_counter()
                await call(counter)
                out.append(time.perf_counter() - start)
            if pid:
                cpu[name] += procs.cpu_seconds(pid) - before
    return samples, {name: seconds / len(samples[name]) for name, seconds in cpu.items()}


async def open_bridges(
    stack: AsyncExitStack,
    runtime: procs.RuntimeProcess,
    workdir: Path,
    section: str,
    checkouts: dict[str, Path],
) -> dict[str, procs.McpProcess]:
    """The bridges a section compares: durable, ``--no-durable``, and one durable bridge per
    other checkout (a proposed change, measured beside this code in the same run)."""
    specs: list[tuple[str, tuple[str, ...], Path | None]] = [
        ("durable journal", (), None),
        ("--no-durable", ("--no-durable",), None),
    ]
    specs += [(f"{label}, durable journal", (), path) for label, path in checkouts.items()]
    bridges: dict[str, procs.McpProcess] = {}
    for n, (label, extra, checkout) in enumerate(specs):
        home = workdir / f"{section}-{n}"
        env = runtime.bridge_env(
            XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data")
        )
        command = procs.bridge_command(home / "journal.db", *extra)
        bridges[label] = await stack.enter_async_context(
            procs.open_mcp(command, env, checkout=checkout)
        )
    return bridges


async def run(
    runtime: procs.RuntimeProcess,
    workdir: Path,
    *,
    quick: bool,
    checkouts: dict[str, Path] | None = None,
) -> list[Row]:
    rounds, block, warmup = (8, 25, 30) if quick else (30, 50, 100)
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(direct_client(runtime))
        floor = await stack.enter_async_context(procs.open_mcp(procs.floor_command(), {}))
        floor_trio = await stack.enter_async_context(
            procs.open_mcp(procs.floor_command("--trio-stdio"), {})
        )
        bridges = await open_bridges(stack, runtime, workdir, "latency", checkouts or {})
        peer = await open_peer(stack, runtime)
        seed = await bridges["durable journal"].call(
            "task_create", {"channel": "general", "tasks": [{"title": "the task task_get reads"}]}
        )
        assert seed.structured_content is not None, seed
        number = int(seed.structured_content["data"]["tasks"][0]["number"])
        sized: dict[str, procs.McpProcess] = {}
        for tool in ("task_get", "task_create"):
            sample = await bridges["durable journal"].call(tool, tool_arguments(tool, 0, number))
            canned = workdir / f"canned-{tool}.json"
            text = (
                sample.content[0].text if isinstance(sample.content[0], types.TextContent) else ""
            )
            canned.write_text(json.dumps({"structured": sample.structured_content, "text": text}))
            sized[tool] = await stack.enter_async_context(
                procs.open_mcp(procs.floor_command("--trio-stdio", "--canned", str(canned)), {})
            )
        for tool in ("task_get", "task_create"):
            targets: dict[str, Call] = {
                "direct HTTP": direct_call(client, runtime, tool, number),
                "stdio floor": mcp_call(floor, tool, number, echo=True),
                "stdio floor, trio-native stdio": mcp_call(floor_trio, tool, number, echo=True),
                SIZED: mcp_call(sized[tool], tool, number, echo=True),
                **{
                    f"bridge, {label}": mcp_call(bridge, tool, number)
                    for label, bridge in bridges.items()
                },
            }
            if peer is not None:
                targets[PEER] = mcp_call(peer, tool, number)
            pids = {
                "stdio floor": floor.pid,
                "stdio floor, trio-native stdio": floor_trio.pid,
                SIZED: sized[tool].pid,
            }
            pids |= {f"bridge, {label}": bridge.pid for label, bridge in bridges.items()}
            if peer is not None:
                pids[PEER] = peer.pid
            samples, cpu = await interleaved(
                targets, pids, rounds=rounds, block=block, warmup=warmup
            )
            rows += _rows(tool, samples, cpu)
        ab_rounds, ab_block = 40, 40  # quick or not: the comparison is what was asked for
        for label in checkouts or {}:
            for tool in ("task_get", "task_create"):
                pair = {
                    "this": bridges["durable journal"],
                    label: bridges[f"{label}, durable journal"],
                }
                rows.append(await ab_compare(tool, number, pair, rounds=ab_rounds, block=ab_block))
    return rows


def round_ratios(this: list[list[float]], other: list[list[float]]) -> list[float]:
    """Each round's ratio of this checkout's median latency to the other's (one round's
    samples of each, in order)."""
    return [statistics.median(a) / statistics.median(b) for a, b in zip(this, other, strict=True)]


def median_interval(ratios: list[float]) -> tuple[float, float]:
    """A distribution-free confidence interval of at least 95% for the median of ``ratios``:
    the order statistics ``k`` and ``n + 1 - k``, ``k`` the largest rank whose binomial tail
    ``P(B(n, 1/2) < k)`` is at most 2.5% (no assumption on how the rounds' ratios are spread);
    the whole range when the rounds are too few for that (below 6)."""
    ordered = sorted(ratios)
    n = len(ordered)
    k, tail = 0, 0.0  # tail: P(B < k + 1)
    while k < n // 2:
        tail += math.comb(n, k) / 2**n
        if tail > 0.025:
            break
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def spread(ratios: list[float]) -> tuple[float, float, float]:
    """(median, lower quartile, upper quartile) of the per-round ratios."""
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    low, middle, high = statistics.quantiles(ratios, n=4, method="inclusive")
    return middle, low, high


async def ab_compare(
    tool: str,
    number: int,
    pair: dict[str, procs.McpProcess],
    *,
    rounds: int,
    block: int,
) -> Row:
    """This checkout's durable bridge against another's (``pair``: "this", then the other's
    label): a warm-up, then :func:`ab_rounds`; one row of the summary."""
    calls = {name: mcp_call(server, tool, number) for name, server in pair.items()}
    await interleaved(calls, {}, rounds=0, block=0, warmup=block)  # the warm-up only
    pids = {name: server.pid for name, server in pair.items()}
    latencies, cpu = await ab_rounds(calls, pids, rounds=rounds, block=block, tool=tool)
    return ab_row(tool, latencies, cpu)


def task_cpu_seconds(pid: int) -> float:
    """CPU seconds of every live thread of a process, to the nanosecond (each thread's
    ``schedstat``), so that one round of calls measures its own CPU (``/proc/PID/stat`` counts
    in 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9


async def ab_rounds(
    calls: dict[str, Call],
    pids: dict[str, int],
    *,
    rounds: int,
    block: int,
    tool: str,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, list[list[float]]], dict[str, list[float]]]:
    """Two targets (this checkout's first) in ``rounds`` rounds of ``block`` calls each,
    interleaved call by call in pairs whose order swaps every pair and every round (ABBA), so
    that drift in the machine's load falls on both alike: each round's latencies per target
    and its server CPU seconds per call, each round's ratios printed on stderr as it ends."""
    (first, _), (other, _) = calls.items()
    latencies: dict[str, list[list[float]]] = {first: [], other: []}
    cpu: dict[str, list[float]] = {first: [], other: []}
    counter = 0
    for r in range(rounds):
        out: dict[str, list[float]] = {first: [], other: []}
        before = {name: task_cpu_seconds(pid) for name, pid in pids.items()}
        for j in range(block):
            for name in (first, other) if (j + r) % 2 == 0 else (other, first):
                counter += 1
                start = clock()
                await calls[name](counter)
                out[name].append(clock() - start)
        for name in (first, other):
            latencies[name].append(out[name])
            cpu[name].append((task_cpu_seconds(pids[name]) - before[name]) / block)
        this50, other50 = (statistics.median(out[name]) * 1000 for name in (first, other))
        this_cpu, other_cpu = (cpu[name][-1] * 1000 for name in (first, other))
        print(
            f"  A/B {tool} round {r + 1}/{rounds}: p50 {first} {this50:.3f} ms, {other}"
            f" {other50:.3f} ms, ratio {this50 / other50:.3f}x; server CPU {this_cpu:.3f} /"
            f" {other_cpu:.3f} ms/call",
            file=sys.stderr,
            flush=True,
        )
    return latencies, cpu


def ab_row(tool: str, latencies: dict[str, list[list[float]]], cpu: dict[str, list[float]]) -> Row:
    """The summary of :func:`ab_rounds`: the median and middle half of the per-round p50
    ratios and CPU ratios, and the pooled p50s."""
    (first, this_rounds), (other, other_rounds) = latencies.items()
    ratios = round_ratios(this_rounds, other_rounds)
    middle, low, high = spread(ratios)
    sure_low, sure_high = median_interval(ratios)
    cpu_ratios = [a / b for a, b in zip(cpu[first], cpu[other], strict=True) if a > 0 and b > 0]
    cpu_middle, cpu_low, cpu_high = spread(cpu_ratios) if cpu_ratios else (math.nan,) * 3
    pooled = [[x for chunk in chunks for x in chunk] for chunks in (this_rounds, other_rounds)]
    this50, other50 = ms(pooled[0], 0.5), ms(pooled[1], 0.5)
    this_cpu, other_cpu = (statistics.fmean(cpu[name]) * 1000 for name in (first, other))
    return Row(
        AB_SECTION,
        f"{tool}: {first} / {other}, durable journal",
        this50,
        ms(pooled[0], 0.99),
        compare=f"p50: median of {len(this_rounds)} round ratios {middle:.3f}x (95% interval"
        f" {sure_low:.3f}-{sure_high:.3f}x; middle half {low:.3f}-{high:.3f}x), pooled"
        f" {this50:.3f} / {other50:.3f} ms ="
        f" {this50 / other50:.3f}x; server CPU: median round ratio {cpu_middle:.3f}x (middle"
        f" half {cpu_low:.3f}-{cpu_high:.3f}x), {this_cpu:.3f} / {other_cpu:.3f} ms/call",
    )


def _rows(tool: str, samples: dict[str, list[float]], cpu: dict[str, float]) -> list[Row]:
    http50, floor50 = ms(samples["direct HTTP"], 0.5), ms(samples["stdio floor"], 0.5)
    floors = http50 + floor50
    rows = [
        Row(SECTION, f"{tool}: direct HTTP (httpx)", http50, ms(samples["direct HTTP"], 0.99)),
        Row(
            SECTION,
            f"{tool}: stdio floor (SDK one-tool)",
            floor50,
            ms(samples["stdio floor"], 0.99),
            compare=f"server CPU {cpu['stdio floor'] * 1000:.3f} ms/call",
        ),
        Row(
            SECTION,
            f"{tool}: stdio floor, trio-native stdio",
            ms(samples["stdio floor, trio-native stdio"], 0.5),
            ms(samples["stdio floor, trio-native stdio"], 0.99),
            compare=f"server CPU {cpu['stdio floor, trio-native stdio'] * 1000:.3f} ms/call"
            " (informational: the bridge's stdio streams)",
        ),
    ]
    rows.append(
        Row(
            SECTION,
            f"{tool}: {SIZED}",
            ms(samples[SIZED], 0.5),
            ms(samples[SIZED], 0.99),
            compare=f"server CPU {cpu[SIZED] * 1000:.3f} ms/call (informational: the SDK's"
            " cost of the bridge's answer, with the bridge's stdio)",
        )
    )
    peer50 = ms(samples[PEER], 0.5) if PEER in samples else None
    for name, values in samples.items():
        if not name.startswith("bridge") and name != PEER:
            continue
        p50 = ms(values, 0.5)
        added = p50 - floors
        checked = name == "bridge, durable journal"
        beside_peer = f"; {p50 / peer50:.2f}x the peer" if peer50 and name != PEER else ""
        rows.append(
            Row(
                SECTION,
                f"{tool}: {name}",
                p50,
                ms(values, 0.99),
                compare=f"{added:+.3f} ms over floors, {p50 / floors:.2f}x;"
                f" server CPU {cpu[name] * 1000:.3f} ms/call"
                + (f", {cpu[name] / cpu[SIZED]:.2f}x the sized floor's" if checked else "")
                + beside_peer,
                target=f"<= +{TARGET_ADDED_MS} ms" if checked else "",
                ok=added <= TARGET_ADDED_MS if checked else None,
                metrics=(
                    {f"latency {tool}": p50 / floors, f"cpu {tool}": cpu[name] / cpu[SIZED]}
                    if checked
                    else {}
                ),
            )
        )
    if PEER not in samples:
        rows.append(Row(SECTION, f"{tool}: {PEER}", compare=peer_server.EXTRA_MISSING))
    return rows
