"""A task detail continues by identity (`bridge/_detail.py`): sections bounded by the runtime
carry a cursor even when nothing was cut, and changes between reads skip nothing that stays."""

from __future__ import annotations

from typing import Any

from .bridge_harness import BridgeSession

LOCATOR = {"channel": "general", "number": 1}


async def _read_all(bridge: BridgeSession, between: Any = None) -> list[dict[str, Any]]:
    answers = [await bridge.ok("task_get", LOCATOR)]
    for _ in range(30):
        action = answers[-1]["meta"].get("continuation")
        if action is None:
            return answers
        if between is not None:
            await between(len(answers))
        answers.append(await bridge.ok(action["tool"], action["arguments"]))
    raise AssertionError("the continuation did not end")


async def test_sections_bounded_upstream_continue_though_nothing_was_cut(
    bridge: BridgeSession,
) -> None:
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "p"}]})
    await bridge.ok(
        "task_create",
        {"channel": "general", "parent": 1, "tasks": [{"title": f"c{i}"} for i in range(23)]},
    )
    for i in range(7):
        await bridge.ok("task_checkpoint", {**LOCATOR, "summary": f"s{i}"})
    first = await bridge.ok("task_get", LOCATOR)
    assert first["meta"]["truncated"] is True
    assert set(first["meta"]["truncated_fields"]) == {
        "$.data.task.checkpoints.items",
        "$.data.task.subtasks.items",
    }
    answers = await _read_all(bridge)
    summaries = [c["summary"] for a in answers for c in a["data"]["task"]["checkpoints"]["items"]]
    numbers = [s["number"] for a in answers for s in a["data"]["task"]["subtasks"]["items"]]
    assert summaries == [f"s{i}" for i in reversed(range(7))]
    assert numbers == list(range(2, 25))
    assert "truncated" not in answers[-1]["meta"]
    # A task whose sections fit says nothing of a continuation.
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "small"}]})
    small = await bridge.ok("task_get", {"channel": "general", "number": 25})
    assert small["meta"] == {}


async def test_changes_between_reads_skip_nothing_that_stays(bridge: BridgeSession) -> None:
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "p"}]})
    await bridge.ok(
        "task_create",
        {"channel": "general", "parent": 1, "tasks": [{"title": f"c{i}"} for i in range(45)]},
    )
    for i in range(12):
        await bridge.ok("task_checkpoint", {**LOCATOR, "summary": f"s{i}"})

    async def between(reads: int) -> None:
        if reads == 1:  # a newer checkpoint, a subtask given and one still to come deleted
            await bridge.ok("task_checkpoint", {**LOCATOR, "summary": "late"})
            await bridge.ok("task_delete", {"channel": "general", "number": 2})
            await bridge.ok("task_delete", {"channel": "general", "number": 30})

    answers = await _read_all(bridge, between)
    summaries = [c["summary"] for a in answers for c in a["data"]["task"]["checkpoints"]["items"]]
    numbers = [s["number"] for a in answers for s in a["data"]["task"]["subtasks"]["items"]]
    assert summaries == [f"s{i}" for i in reversed(range(12))]
    assert numbers == [n for n in range(2, 47) if n != 30]


async def test_an_edited_description_or_another_task_refuses_the_cursor(
    bridge: BridgeSession,
) -> None:
    text = "\U0001f600" * 10_000
    await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": "p"}, {"title": "q"}]}
    )
    await bridge.ok("task_update", {**LOCATOR, "patch": {"description": text}})
    cursor = (await bridge.ok("task_get", LOCATOR))["meta"]["next_cursor"]
    error = await bridge.fails(
        "task_get", {"channel": "general", "number": 2, "cursor": cursor}, code="cursor_mismatch"
    )
    assert list(error["field_errors"]) == ["$.cursor"]
    list_cursor_kind = "bt1." + cursor[4:]
    await bridge.fails("task_get", {**LOCATOR, "cursor": list_cursor_kind}, code="cursor_invalid")
    await bridge.ok("task_update", {**LOCATOR, "patch": {"description": "x" + text[1:]}})
    await bridge.fails("task_get", {**LOCATOR, "cursor": cursor}, code="cursor_mismatch")
