"""Budgets through the bridge: a big page is cut, says so, and its continuation resumes."""

from __future__ import annotations

import trio

from .bridge_harness import BridgeSession


async def test_a_page_over_budget_is_truncated_with_a_working_continuation(
    bridge: BridgeSession,
) -> None:
    labels = [f"{i:02d}" + "l" * 46 for i in range(20)]

    async def create(i: int) -> None:
        await bridge.ok(
            "task_create",
            {"channel": "general", "tasks": [{"title": f"{i:03d} " + "w" * 190, "labels": labels}]},
        )

    async with trio.open_nursery() as nursery:
        for i in range(60):
            nursery.start_soon(create, i)
    result = await bridge.ok("task_list", {"channel": "general", "limit": 100})
    assert result["meta"]["truncated"] is True
    assert result["meta"]["continuation"]["tool"] == "task_list"
    seen = [t["number"] for t in result["data"]["items"]]
    assert 0 < len(seen) < 60
    pages = 1
    while "next_cursor" in result["meta"]:
        result = await bridge.ok(
            "task_list",
            {"channel": "general", "limit": 100, "cursor": result["meta"]["next_cursor"]},
        )
        seen += [t["number"] for t in result["data"]["items"]]
        pages += 1
    assert seen == list(range(1, 61)) and pages >= 2
    assert "truncated" not in result["meta"]
