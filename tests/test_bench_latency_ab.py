"""The latency benchmark's A/B comparison of two checkouts: calls alternate one by one in pairs
whose order swaps (ABBA), each round gives a p50 ratio and a CPU ratio, and the summary is the
median round ratio and its middle half beside the pooled p50s."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.bench.bench_latency import (
    Call,
    ab_rounds,
    ab_row,
    median_interval,
    round_ratios,
    spread,
    task_cpu_seconds,
)


async def test_calls_alternate_in_swapped_pairs_and_the_summary_is_the_median_round_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = 0.0
    order: list[str] = []

    def clock() -> float:
        return now

    def target(name: str, cost: float, burst: float) -> Call:
        """A call costing ``cost`` units of the clock, ``burst`` in its third round."""

        async def call(i: int) -> None:
            nonlocal now
            round_ = order.count(name) // 4
            order.append(name)
            now += burst if round_ == 2 else cost

        return call

    calls = {"this": target("this", 3.0, 3.0), "base": target("base", 2.0, 4.0)}
    pids = dict.fromkeys(calls, os.getpid())
    latencies, cpu = await ab_rounds(calls, pids, rounds=4, block=4, tool="task_get", clock=clock)
    pairs = ["".join(n[0] for n in order[i : i + 2]) for i in range(0, len(order), 2)]
    assert (
        pairs
        == ["tb", "bt", "tb", "bt"]
        + ["bt", "tb", "bt", "tb"]
        + ["tb", "bt"] * 2
        + [
            "bt",
            "tb",
        ]
        * 2
    )
    assert [len(chunk) for chunk in latencies["this"]] == [4, 4, 4, 4]
    assert round_ratios(latencies["this"], latencies["base"]) == [1.5, 1.5, 0.75, 1.5]
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == 4
    assert printed[2].startswith(
        "  A/B task_get round 3/4: p50 this 3000.000 ms, base 4000.000 ms, ratio 0.750x;"
        " server CPU "
    )
    assert all(len(cpu[name]) == 4 and min(cpu[name]) >= 0 for name in calls)
    row = ab_row("task_get", latencies, cpu)
    assert row.label == "task_get: this / base, durable journal"
    # One slow round moves the median round ratio not at all.
    assert (
        "p50: median of 4 round ratios 1.500x (95% interval 0.750-1.500x; middle half"
        " 1.312-1.500x)" in row.compare
    )
    assert "pooled 3000.000 / 2000.000 ms = 1.500x" in row.compare


def test_the_summary_of_the_ratios_is_their_median_and_middle_half() -> None:
    assert spread([1.25]) == (1.25, 1.25, 1.25)
    assert spread([1.0, 1.1, 1.2, 1.3, 5.0]) == (1.2, 1.1, 1.3)
    assert round_ratios([[1.0, 3.0, 2.0]], [[2.0, 1.0, 4.0]]) == [1.0]


def test_the_median_interval_is_the_binomial_order_statistics() -> None:
    # The ranks of the tables of distribution-free 95% intervals for a median (n: lower, upper).
    for n, ranks in {6: (1, 6), 10: (2, 9), 20: (6, 15), 40: (14, 27), 100: (40, 61)}.items():
        shuffled = [float((i * 7) % n + 1) for i in range(n)]  # 1..n, out of order
        assert median_interval(shuffled) == (float(ranks[0]), float(ranks[1]))
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few rounds: the whole range


def test_a_process_cpu_counts_every_live_thread() -> None:
    # A child burns CPU in its main thread and in a second one that stays alive, reports each
    # thread's own CPU time, then waits (off the CPU: its counters are settled).
    burn = (
        "import sys, threading, time\n"
        "spent, go = [], threading.Event()\n"
        "def work():\n"
        "    sum(range(300_000)); spent.append(time.thread_time()); go.wait()\n"
        "t = threading.Thread(target=work); t.start()\n"
        "sum(range(300_000))\n"
        "while not spent: time.sleep(0.01)\n"
        "print(time.thread_time() + spent[0], flush=True); sys.stdin.read(); go.set()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        reported = float(child.stdout.readline())
        assert task_cpu_seconds(child.pid) >= reported > 0
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
