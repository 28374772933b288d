"""Concurrent calls are served concurrently; cancellation stops the upstream request."""

from __future__ import annotations

import pytest
import trio

from agentteam_task_bridge.runtime import FaultSpec

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


@pytest.mark.wire
async def test_calls_overlap_instead_of_queueing(bridge: BridgeSession) -> None:
    runtime = bridge.runtime
    assert runtime is not None
    # Each call stays in the runtime for a minute: four of them there at once can only mean
    # they are served side by side (queued, the second would arrive a minute later).
    runtime.faults.arm(FaultSpec(kind="latency", op="list", delay_ms=60_000, times=4))
    answered: list[object] = []

    async def list_tasks() -> None:
        answered.append(await bridge.call("task_list", {"channel": "general"}))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(list_tasks)
        with trio.fail_after(30):  # bounds a hang only
            while runtime.faults.fired < 4:  # noqa: ASYNC110 - the runtime's own counter
                await trio.sleep(0.01)
        assert answered == []
        nursery.cancel_scope.cancel()
    await bridge.ok("task_list", {"channel": "general"})


@pytest.mark.wire
async def test_cancellation_abandons_the_call_and_the_session_goes_on(
    bridge: BridgeSession,
) -> None:
    assert bridge.runtime is not None
    bridge.runtime.faults.arm(FaultSpec(kind="latency", op="get", delay_ms=5000))
    await bridge.cancel_in_flight("task_get", {"channel": "general", "number": 1})
    await bridge.ok("task_list", {"channel": "general"})
