"""Concurrent calls are served concurrently; cancellation stops the upstream request."""

from __future__ import annotations

import trio

from runtime import FaultSpec

from .bridge_harness import BridgeSession


async def test_concurrent_calls_all_succeed_with_distinct_numbers(bridge: BridgeSession) -> None:
    numbers: list[int] = []

    async def create(i: int) -> None:
        result = await bridge.ok(
            "task_create", {"channel": "general", "tasks": [{"title": f"t{i}"}]}
        )
        numbers.append(result["data"]["tasks"][0]["number"])

    async with trio.open_nursery() as nursery:
        for i in range(32):
            nursery.start_soon(create, i)
    assert sorted(numbers) == list(range(1, 33))


async def test_calls_overlap_instead_of_queueing(bridge: BridgeSession) -> None:
    assert bridge.runtime is not None
    bridge.runtime.faults.arm(FaultSpec(kind="latency", op="list", delay_ms=700, times=4))
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(bridge.ok, "task_list", {"channel": "general"})
    assert trio.current_time() - start < 2.0  # four 0.7 s calls, served side by side


async def test_cancellation_abandons_the_call_and_the_session_goes_on(
    bridge: BridgeSession,
) -> None:
    assert bridge.runtime is not None
    bridge.runtime.faults.arm(FaultSpec(kind="latency", op="get", delay_ms=5000))
    await bridge.cancel_in_flight("task_get", {"channel": "general", "number": 1})
    await bridge.ok("task_list", {"channel": "general"})
