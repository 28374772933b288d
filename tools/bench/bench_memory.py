"""Memory: the bridge's resident set over many calls (100,000 by default) with 32 in flight.

RSS (`/proc/<pid>/status` VmRSS) is sampled every 5% of the calls; the verdict compares the last
sample with the one at 20% (after warm-up: pools, caches and SQLite's page cache filled), so a
leak of even a few hundred bytes per call shows. Calls mix reads, writes and rejected input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from . import procs
from ._report import Row

SECTION = "memory: bridge RSS over many calls"
GROWTH_LIMIT = 0.05  # at most 5% above the 20% mark


def _mixed(i: int, number: int) -> tuple[str, dict[str, Any]]:
    # Creates are 1 in 20: the reference runtime's reads slow down as its tasks table grows.
    match i % 20:
        case 0:
            return "task_create", {"channel": "general", "tasks": [{"title": f"mem {i}"}]}
        case 1 | 11:
            return "task_list", {"channel": "general", "limit": 5}
        case 2 | 12:
            return "task_get", {"channel": "general", "number": -1}  # rejected locally
        case 3:
            return "task_checkpoint", {"channel": "general", "number": number, "summary": f"m{i}"}
        case _:
            return "task_get", {"channel": "general", "number": number}


async def run(
    runtime: procs.RuntimeProcess, workdir: Path, *, quick: bool, calls: int | None = None
) -> list[Row]:
    total = calls or (5_000 if quick else 100_000)
    in_flight = 32
    home = workdir / "memory"
    env = runtime.bridge_env(XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    samples: list[tuple[int, int]] = []  # (calls done, RSS KiB)
    async with procs.open_mcp(procs.bridge_command(home / "journal.db"), env) as bridge:
        seed = await bridge.call("task_create", {"channel": "general", "tasks": [{"title": "m"}]})
        assert seed.structured_content is not None
        number = int(seed.structured_content["data"]["tasks"][0]["number"])
        samples.append((0, procs.rss_kib(bridge.pid)[0]))
        step = max(1, total // 20)
        done = 0
        counter = iter(range(total))

        async def worker() -> None:
            nonlocal done
            for i in counter:
                await bridge.call(*_mixed(i, number))
                done += 1
                if done % step == 0:
                    samples.append((done, procs.rss_kib(bridge.pid)[0]))

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker)
        elapsed = trio.current_time() - start
        peak = procs.rss_kib(bridge.pid)[1]
    base = next(rss for n, rss in samples if n >= total // 5)
    last = samples[-1][1]
    growth = (last - base) / base
    curve = ", ".join(f"{rss / 1024:.0f}" for n, rss in samples[:: max(1, len(samples) // 6)])
    return [
        Row(
            SECTION,
            f"{total:,} calls, {in_flight} in flight: RSS MiB at 20% / end / peak",
            rate=total / elapsed,
            compare=f"{base / 1024:.1f} / {last / 1024:.1f} / {peak / 1024:.1f} MiB"
            f" ({growth:+.1%}); curve {curve}",
            target=f"end <= 20% mark +{GROWTH_LIMIT:.0%}",
            ok=growth <= GROWTH_LIMIT,
        )
    ]
