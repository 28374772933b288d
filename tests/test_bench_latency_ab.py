"""The latency benchmark's A/B comparison of two checkouts: rounds alternate the order (ABBA),
each round gives a ratio, and the summary is their median and middle half, not one pooled p50."""

from __future__ import annotations

import os

import pytest

from tools.bench.bench_latency import Call, ab_rounds, ab_row, round_ratios, spread


async def test_rounds_alternate_the_order_and_the_summary_is_the_median_round_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = 0.0
    order: list[str] = []
    # "this" takes 3 units a call; "base" 2, but 4 in round 3 (a burst of load).

    def clock() -> float:
        return now

    def target(name: str, cost: float, burst: float) -> Call:
        async def call(i: int) -> None:
            nonlocal now
            round_ = len([n for n in order if n == name]) // 5
            order.append(name)
            now += burst if round_ == 2 else cost

        return call

    calls = {"this": target("this", 3.0, 3.0), "base": target("base", 2.0, 4.0)}
    pids = dict.fromkeys(calls, os.getpid())
    per_round, cpu = await ab_rounds(calls, pids, rounds=4, block=5, tool="task_get", clock=clock)
    blocks = [order[i] for i in range(0, len(order), 5)]
    assert blocks == ["this", "base", "base", "this", "this", "base", "base", "this"]
    assert [len(chunk) for chunk in per_round["this"]] == [5, 5, 5, 5]
    assert round_ratios(per_round["this"], per_round["base"]) == [1.5, 1.5, 0.75, 1.5]
    printed = capsys.readouterr().err.splitlines()
    assert (
        printed[2] == "  A/B task_get round 3/4: this 3000.000 ms, base 4000.000 ms, ratio 0.750x"
    )
    assert len(printed) == 4
    assert set(cpu) == {"this", "base"} and all(v >= 0 for v in cpu.values())
    row = ab_row("task_get", per_round, cpu)
    assert row.label == "task_get: this / base, durable journal"
    # One slow round moves the pooled p50 of neither much, and the median ratio not at all.
    assert "median of 4 round ratios 1.500x (middle half 1.312-1.500x)" in row.compare
    assert "pooled p50 3000.000 / 2000.000 ms = 1.500x" in row.compare


def test_the_spread_of_one_round_is_that_round() -> None:
    assert spread([1.25]) == (1.25, 1.25, 1.25)
    assert spread([1.0, 1.1, 1.2, 1.3, 5.0]) == (1.2, 1.1, 1.3)
