"""The throughput benchmark's driver: every call made once, latencies and CPU shares reported."""

from __future__ import annotations

import os

import trio

from tools.bench.bench_throughput import drive


async def test_drive_makes_each_call_once_and_reports_cpu() -> None:
    seen: list[int] = []
    in_flight = peak = 0

    async def call(i: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(0.001)
        sum(range(2_000))  # some CPU, so the shares are not all zero
        seen.append(i)
        in_flight -= 1

    run = await drive(call, 64, 8, {"this process again": os.getpid()})
    assert sorted(seen) == list(range(64))
    assert peak == 8
    assert len(run.latencies) == 64 and min(run.latencies) >= 0.001
    assert run.rate > 0
    assert set(run.cpu) == {"client", "this process again"}
    assert all(0 <= share <= 1.5 for share in run.cpu.values())
