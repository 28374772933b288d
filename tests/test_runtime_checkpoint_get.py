"""task_checkpoint appends bounded summaries; task_get returns bounded sections."""

from __future__ import annotations

from .conftest import Api


async def test_checkpoints_are_appended_and_bounded_in_detail(api: Api) -> None:
    await api.create("general", "t")
    for i in range(7):
        result = await api.ok(
            "checkpoint", {"channel": "general", "number": 1, "summary": f"step {i}"}
        )
        assert result["checkpoint"]["summary"] == f"step {i}"
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert task["checkpoints"]["total"] == 7
    assert [c["summary"] for c in task["checkpoints"]["items"]] == [
        "step 6",
        "step 5",
        "step 4",
        "step 3",
        "step 2",
    ]


async def test_checkpoint_summary_is_required_and_bounded(api: Api) -> None:
    await api.create("general", "t")
    for summary in ("", "   "):
        await api.fails(
            "checkpoint",
            {"channel": "general", "number": 1, "summary": summary},
            expect=422,
            code="validation_failed",
        )
    await api.fails(
        "checkpoint",
        {"channel": "general", "number": 1, "summary": "x" * 4001},
        expect=422,
        code="validation_failed",
    )
    await api.fails(
        "checkpoint", {"channel": "general", "number": 1}, expect=422, code="validation_failed"
    )


async def test_checkpoints_cannot_be_rewritten_even_in_sql(api: Api) -> None:
    await api.create("general", "t")
    await api.ok("checkpoint", {"channel": "general", "number": 1, "summary": "s"})
    conn = api.runtime.store._conn
    for sql in ("UPDATE checkpoints SET summary = 'x'", "DELETE FROM checkpoints"):
        try:
            conn.execute(sql)
        except Exception as exc:
            assert "append-only" in str(exc)
        else:
            raise AssertionError(f"{sql} was allowed")


async def test_get_bounds_the_subtask_section(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", *[f"child {i}" for i in range(25)], parent=1)
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert task["subtasks"]["total"] == 25
    assert len(task["subtasks"]["items"]) == 20


async def test_get_of_a_deleted_task_names_the_live_parent(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", "child", parent=1)
    await api.ok("delete", {"channel": "general", "number": 2})
    error = await api.fails(
        "get", {"channel": "general", "number": 2}, expect=404, code="task_deleted"
    )
    assert error["candidates"] == [{"channel": "general", "number": 1, "title": "parent"}]


async def test_get_continues_its_sections_by_keyset_without_a_skip(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", *[f"child {i}" for i in range(45)], parent=1)
    for i in range(12):
        await api.ok("checkpoint", {"channel": "general", "number": 1, "summary": f"step {i}"})
    seen_checkpoints: list[str] = []
    seen_children: list[int] = []
    request: dict[str, object] = {"channel": "general", "number": 1}
    late = False
    for _ in range(4):
        task = (await api.ok("get", request))["task"]
        assert task["subtasks"]["total"] == 45
        assert task["checkpoints"]["total"] == 12 + late
        checkpoints, children = task["checkpoints"]["items"], task["subtasks"]["items"]
        seen_checkpoints += [c["summary"] for c in checkpoints]
        seen_children += [s["number"] for s in children]
        if checkpoints:
            request["checkpointsBefore"] = checkpoints[-1]["id"]
        if children:
            request["subtasksAfter"] = children[-1]["number"]
        if len(seen_children) == 20:  # appended between reads: newer, never in the rest
            await api.ok("checkpoint", {"channel": "general", "number": 1, "summary": "late"})
            late = True
    assert seen_checkpoints == [f"step {i}" for i in reversed(range(12))]
    assert seen_children == list(range(2, 47))


async def test_get_refuses_a_continuation_that_is_not_a_position(api: Api) -> None:
    await api.create("general", "t")
    for bad in ({"checkpointsBefore": 0}, {"subtasksAfter": -1}, {"subtasksAfter": "x"}):
        await api.fails(
            "get",
            {"channel": "general", "number": 1, **bad},
            expect=422,
            code="validation_failed",
        )
