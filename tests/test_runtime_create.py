"""task_create: one locator, title-only batches, rich single tasks, real subtasks, target."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agentteam_task_bridge.runtime import Runtime

from .conftest import Api, admin


async def test_batch_allocates_sequential_numbers_per_board(api: Api) -> None:
    assert [t["number"] for t in await api.create("general", "a", "b", "c")] == [1, 2, 3]
    assert [t["number"] for t in await api.create("eng", "x")] == [1]
    assert [t["number"] for t in await api.create("general", "d")] == [4]


async def test_numbers_are_never_reused_after_delete(api: Api) -> None:
    await api.create("general", "a", "b")
    await api.ok("delete", {"channel": "general", "number": 2})
    assert [t["number"] for t in await api.create("general", "c")] == [3]


async def test_one_rich_task_keeps_every_attribute(api: Api) -> None:
    rich = {
        "title": "Rich",
        "description": "why",
        "assignee": "@alice",
        "labels": ["ops"],
        "priority": "high",
        "status": "in_progress",
        "urls": ["https://example.test/x"],
        "checklist": [{"text": "step one"}, {"text": "step two", "done": True}],
        "blocker": "waiting on review",
    }
    await api.ok("create", {"channel": "general", "tasks": [rich]})
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    for key in ("title", "description", "labels", "priority", "status", "urls", "blocker"):
        assert task[key] == rich[key]
    assert task["assignee"] == "@alice"
    assert task["creator"] == "@local-agent"
    assert task["checklist"] == [
        {"text": "step one", "done": False},
        {"text": "step two", "done": True},
    ]


async def test_a_batch_of_several_is_title_only(api: Api) -> None:
    error = await api.fails(
        "create",
        {"channel": "general", "tasks": [{"title": "a"}, {"title": "b", "priority": "high"}]},
        expect=422,
        code="validation_failed",
    )
    assert "$.tasks[1].priority" in error["fieldErrors"]
    assert (await api.ok("list", channel="general"))["items"] == []


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"tasks": [{"title": "x"}]}, "$.channel"),
        ({"channel": "general", "tasks": []}, "$.tasks"),
        ({"channel": "general", "tasks": [{"title": ""}]}, "$.tasks[0].title"),
        ({"channel": "general", "tasks": [{"title": "x" * 201}]}, "$.tasks[0].title"),
        ({"channel": "general", "tasks": [{"title": "x"}] * 51}, "$.tasks"),
        ({"channel": "general", "parent": 0, "tasks": [{"title": "x"}]}, "$.parent"),
        ({"channel": "general", "parent": "1", "tasks": [{"title": "x"}]}, "$.parent"),
        ({"channel": "general", "mode": "assign", "tasks": [{"title": "x"}]}, "$.mode"),
        (
            {"channel": "general", "tasks": [{"title": "x", "priority": "p1"}]},
            "$.tasks[0].priority",
        ),
        (
            {
                "channel": "general",
                "parentTaskScope": {"kind": "task", "scopeId": "tsk_x"},
                "tasks": [{"title": "x"}],
            },
            "$.parentTaskScope",
        ),
    ],
)
async def test_invalid_create_is_refused_with_the_field_path(
    api: Api, body: dict[str, Any], path: str
) -> None:
    error = await api.fails("create", body, expect=422, code="validation_failed")
    assert path in error["fieldErrors"], error
    assert api.runtime.store.stats()["tasks"] == 0


async def test_refused_creates_change_nothing(api: Api) -> None:
    await api.fails(
        "create",
        {
            "channel": "general",
            "tasks": [{"title": "a"}, {"title": "b"}, {"title": "c", "assignee": "@alice"}],
        },
        expect=422,
        code="validation_failed",
    )
    await api.fails(
        "create",
        {"channel": "general", "tasks": [{"title": "a", "assignee": "@nobody"}]},
        expect=422,
        code="assignee_not_member",
    )
    assert api.runtime.store.stats()["tasks"] == 0
    assert [t["number"] for t in await api.create("general", "first")] == [1]


async def test_parent_creates_real_subtasks(api: Api) -> None:
    await api.create("general", "parent")
    children = await api.create("general", "c1", "c2", parent=1)
    assert [c["parent"] for c in children] == [1, 1]
    detail = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert detail["subtaskCount"] == 2
    assert [s["number"] for s in detail["subtasks"]["items"]] == [2, 3]


async def test_unknown_parent_is_refused_with_candidates(api: Api) -> None:
    await api.create("general", "only task")
    error = await api.fails(
        "create",
        {"channel": "general", "parent": 7, "tasks": [{"title": "x"}]},
        expect=404,
        code="task_not_found",
    )
    assert error["candidates"] == [{"channel": "general", "number": 1, "title": "only task"}]


async def test_parent_task_scope_creates_subtasks_on_the_scope_board(api: Api) -> None:
    parent = (await api.create("eng", "epic"))[0]
    created = await api.ok(
        "create",
        {
            "parentTaskScope": {"kind": "task", "scopeId": parent["scopeId"]},
            "tasks": [{"title": "piece"}],
        },
    )
    assert created["channel"] == "eng"
    assert created["parent"] == 1
    assert created["tasks"][0]["parent"] == 1


@pytest.mark.parametrize(
    ("scope", "status", "code"),
    [
        ({"kind": "channel", "scopeId": "whatever"}, 422, "scope_not_task"),
        ({"kind": "task", "scopeId": "tsk_0000000000000000"}, 404, "scope_not_found"),
    ],
)
async def test_bad_parent_task_scopes_are_refused(
    api: Api, scope: dict[str, str], status: int, code: str
) -> None:
    await api.fails(
        "create", {"parentTaskScope": scope, "tasks": [{"title": "x"}]}, expect=status, code=code
    )


async def test_deleted_scope_is_refused(api: Api) -> None:
    parent = (await api.create("general", "gone"))[0]
    await api.ok("delete", {"channel": "general", "number": 1})
    await api.fails(
        "create",
        {
            "parentTaskScope": {"kind": "task", "scopeId": parent["scopeId"]},
            "tasks": [{"title": "x"}],
        },
        expect=404,
        code="scope_deleted",
    )


async def test_cross_workspace_and_unauthorized_scopes_are_refused(
    http: httpx.AsyncClient, runtime: Runtime, api: Api
) -> None:
    await admin(http, runtime, "workspaces", {"id": "ws_b", "name": "B"})
    await admin(
        http,
        runtime,
        "members",
        {"workspaceId": "ws_b", "id": "agt_b", "handle": "@b", "kind": "agent"},
    )
    await admin(
        http, runtime, "boards", {"workspaceId": "ws_b", "slug": "general", "memberIds": ["agt_b"]}
    )
    foreign = (await Api(http, runtime, "agt_b", "ws_b").create("general", "theirs"))[0]
    await api.fails(
        "create",
        {
            "parentTaskScope": {"kind": "task", "scopeId": foreign["scopeId"]},
            "tasks": [{"title": "x"}],
        },
        expect=404,
        code="scope_not_found",
    )
    await admin(
        http,
        runtime,
        "boards",
        {"workspaceId": runtime.workspace_id, "slug": "private", "memberIds": ["agt_helper"]},
    )
    private = (await api.as_agent("agt_helper").create("private", "secret"))[0]
    await api.fails(
        "create",
        {
            "parentTaskScope": {"kind": "task", "scopeId": private["scopeId"]},
            "tasks": [{"title": "x"}],
        },
        expect=403,
        code="not_a_member",
    )
    await api.fails(
        "create", {"channel": "private", "tasks": [{"title": "x"}]}, expect=403, code="not_a_member"
    )
    assert [t["number"] for t in await api.create("general", "still first")] == [1]


async def test_target_is_provenance_on_the_same_board(api: Api) -> None:
    await api.ok(
        "create",
        {"channel": "general", "target": "#general:th_42", "tasks": [{"title": "from thread"}]},
    )
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert task["thread"] == "#general:th_42"


@pytest.mark.parametrize(
    ("target", "status", "code"),
    [
        ("#eng:th_1", 409, "target_conflict"),
        ("#nowhere", 404, "target_not_found"),
        ("general", 422, "target_invalid"),
        ("#general:", 422, "target_invalid"),
    ],
)
async def test_bad_targets_are_refused(api: Api, target: str, status: int, code: str) -> None:
    await api.fails(
        "create",
        {"channel": "general", "target": target, "tasks": [{"title": "x"}]},
        expect=status,
        code=code,
    )
    assert api.runtime.store.stats()["tasks"] == 0


async def test_target_conflicting_with_the_scope_board_is_refused(api: Api) -> None:
    parent = (await api.create("eng", "epic"))[0]
    await api.fails(
        "create",
        {
            "parentTaskScope": {"kind": "task", "scopeId": parent["scopeId"]},
            "target": "#general:th_1",
            "tasks": [{"title": "x"}],
        },
        expect=409,
        code="target_conflict",
    )


async def test_create_emits_activity_and_one_live_event_per_task(api: Api) -> None:
    await api.create("general", "a", "b")
    stats = api.runtime.store.stats()
    assert (stats["tasks"], stats["activity"], stats["live_events"]) == (2, 2, 2)
