"""task_update: patch semantics, lifecycle, optimistic concurrency, re-parenting without cycles."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge.runtime._schema import MIGRATIONS, migrate

from .conftest import Api


async def _update(api: Api, number: int, patch: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return await api.ok("update", {"channel": "general", "number": number, "patch": patch, **extra})


async def test_omitted_fields_stay_and_null_clears_nullable_ones(api: Api) -> None:
    await api.ok(
        "create",
        {
            "channel": "general",
            "tasks": [{"title": "t", "description": "d", "priority": "high", "assignee": "@alice"}],
        },
    )
    result = await _update(api, 1, {"description": None, "assignee": None})
    assert result["changed"] == ["description", "assignee"]
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert (task["title"], task["description"], task["priority"], task["assignee"]) == (
        "t",
        None,
        "high",
        None,
    )


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"title": None}, "$.patch.title"),
        ({"status": "blocked"}, "$.patch.status"),
        ({"number": 5}, "$.patch.number"),
        ({"creator": "@alice"}, "$.patch.creator"),
        ({"labels": "ops"}, "$.patch.labels"),
    ],
)
async def test_invalid_or_write_once_fields_are_refused(
    api: Api, patch: dict[str, Any], path: str
) -> None:
    await api.create("general", "t")
    error = await api.fails(
        "update",
        {"channel": "general", "number": 1, "patch": patch},
        expect=422,
        code="validation_failed",
    )
    assert path in error["fieldErrors"]


async def test_empty_patch_is_refused(api: Api) -> None:
    await api.create("general", "t")
    await api.fails(
        "update", {"channel": "general", "number": 1, "patch": {}}, expect=422, code="empty_patch"
    )


async def test_lifecycle_status_moves(api: Api) -> None:
    await api.create("general", "t")
    for status in ("in_progress", "in_review", "done", "canceled", "todo"):
        assert (await _update(api, 1, {"status": status}))["task"]["status"] == status


async def test_stale_expected_updated_at_conflicts_with_the_current_revision(api: Api) -> None:
    task = (await api.create("general", "t"))[0]
    fresh = await _update(api, 1, {"title": "t2"}, expectedUpdatedAt=task["updatedAt"])
    assert fresh["task"]["updatedAt"] > task["updatedAt"]
    error = await api.fails(
        "update",
        {
            "channel": "general",
            "number": 1,
            "patch": {"title": "t3"},
            "expectedUpdatedAt": task["updatedAt"],
        },
        expect=409,
        code="stale_update",
    )
    assert error["details"]["currentUpdatedAt"] == fresh["task"]["updatedAt"]
    again = await _update(
        api, 1, {"title": "t3"}, expectedUpdatedAt=error["details"]["currentUpdatedAt"]
    )
    assert again["task"]["title"] == "t3"


async def test_a_no_op_patch_changes_no_revision(api: Api) -> None:
    task = (await api.create("general", "t"))[0]
    result = await _update(api, 1, {"title": "t"})
    assert result["changed"] == [] and result["task"]["updatedAt"] == task["updatedAt"]


async def test_reparenting_and_cycles(api: Api) -> None:
    await api.create("general", "a", "b")
    await api.create("general", "c", parent=2)
    assert (await _update(api, 2, {"parent": 1}))["task"]["parent"] == 1
    error = await api.fails(
        "update",
        {"channel": "general", "number": 1, "patch": {"parent": 3}},
        expect=422,
        code="parent_cycle",
    )
    assert "$.patch.parent" in error["fieldErrors"]
    await api.fails(
        "update",
        {"channel": "general", "number": 1, "patch": {"parent": 1}},
        expect=422,
        code="parent_cycle",
    )
    assert (await _update(api, 2, {"parent": None}))["task"]["parent"] is None


async def test_assignee_must_be_a_board_member(api: Api) -> None:
    await api.create("general", "t")
    error = await api.fails(
        "update",
        {"channel": "general", "number": 1, "patch": {"assignee": "@alicia"}},
        expect=422,
        code="assignee_not_member",
    )
    assert {"assignee": "@alice"} in error["candidates"]


async def test_attachments_are_metadata_only_in_detail(api: Api) -> None:
    await api.create("general", "t")
    await _update(
        api,
        1,
        {
            "attachments": [
                {
                    "name": "log.txt",
                    "mediaType": "text/plain",
                    "sizeBytes": 1200,
                    "url": "https://files.test/log.txt",
                }
            ]
        },
    )
    task = (await api.ok("get", {"channel": "general", "number": 1}))["task"]
    assert task["attachments"] == [
        {"name": "log.txt", "mediaType": "text/plain", "sizeBytes": 1200}
    ]


async def test_unknown_task_answers_with_nearby_candidates(api: Api) -> None:
    await api.create("general", "a", "b", "c")
    error = await api.fails(
        "update",
        {"channel": "general", "number": 9, "patch": {"title": "x"}},
        expect=404,
        code="task_not_found",
    )
    assert [c["number"] for c in error["candidates"]] == [3, 2, 1]


# --- thread, messages and workspaces (contract 13.2's remaining profile fields) -------------


async def _detail(api: Api, number: int = 1) -> dict[str, Any]:
    task: dict[str, Any] = (await api.ok("get", {"channel": "general", "number": number}))["task"]
    return task


async def test_thread_attributes_the_task_and_null_detaches(api: Api) -> None:
    await api.create("general", "t")
    assert (await _detail(api))["thread"] is None
    assert (await _update(api, 1, {"thread": "#general:th-1"}))["changed"] == ["thread"]
    assert (await _detail(api))["thread"] == "#general:th-1"
    assert (await _update(api, 1, {"thread": "#general:th-1"}))["changed"] == []
    await _update(api, 1, {"thread": None})
    assert (await _detail(api))["thread"] is None


async def test_messages_and_workspaces_replace_their_lists_and_empty_clears(api: Api) -> None:
    await api.create("general", "t")
    before = await _detail(api)
    assert (before["messages"], before["workspaces"]) == ([], [])
    messages = ["#general:m-1", "#eng:m.2"]
    # Every maximum at once: 10 locations of 200 four-byte or CJK characters.
    workspaces = [("😀" if i % 2 else "漢") * 200 for i in range(10)]
    result = await _update(api, 1, {"messages": messages, "workspaces": workspaces})
    assert result["changed"] == ["messages", "workspaces"]
    after = await _detail(api)
    assert (after["messages"], after["workspaces"]) == (messages, workspaces)
    assert (await _update(api, 1, {"messages": messages}))["changed"] == []
    await _update(api, 1, {"messages": [], "workspaces": []})
    cleared = await _detail(api)
    assert (cleared["messages"], cleared["workspaces"]) == ([], [])


@pytest.mark.parametrize(
    ("patch", "status", "code", "path"),
    [
        ({"thread": "#eng:th-1"}, 409, "target_conflict", "$.patch.thread"),
        ({"thread": "#nowhere"}, 404, "target_not_found", "$.patch.thread"),
        ({"thread": "general"}, 422, "validation_failed", "$.patch.thread"),
        ({"messages": ["#nowhere:m1"]}, 404, "channel_not_found", "$.patch.messages[0]"),
        ({"messages": ["#general"]}, 422, "validation_failed", "$.patch.messages[0]"),
        ({"messages": None}, 422, "validation_failed", "$.patch.messages"),
        ({"messages": [f"#general:m{i}" for i in range(21)]}, 422, "validation_failed", None),
        ({"workspaces": ["x" * 201]}, 422, "validation_failed", "$.patch.workspaces[0]"),
        ({"workspaces": [" ~/src"]}, 422, "validation_failed", "$.patch.workspaces[0]"),
        ({"workspaces": ["a\nb"]}, 422, "validation_failed", "$.patch.workspaces[0]"),
        ({"workspaces": ["w"] * 11}, 422, "validation_failed", None),
        ({"workspaces": None}, 422, "validation_failed", "$.patch.workspaces"),
    ],
)
async def test_thread_messages_and_workspaces_are_checked(
    api: Api, patch: dict[str, Any], status: int, code: str, path: str | None
) -> None:
    await api.create("general", "t")
    error = await api.fails(
        "update", {"channel": "general", "number": 1, "patch": patch}, expect=status, code=code
    )
    assert path is None or path in error["fieldErrors"]
    assert (await _detail(api))["updatedAt"] == (await _detail(api))["createdAt"]


def test_a_database_from_before_the_link_fields_gains_them_empty(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "v1.db", isolation_level=None)
    conn.executescript(MIGRATIONS[0])
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_migrations VALUES (1, datetime('now'))")
    conn.execute("INSERT INTO workspaces VALUES ('ws', 'ws')")
    conn.execute("INSERT INTO members VALUES ('agt', 'ws', '@a', 'agent', 'A')")
    conn.execute("INSERT INTO boards (id, workspace_id, slug, name) VALUES (1, 'ws', 'g', 'g')")
    conn.execute(
        "INSERT INTO tasks (scope_id, workspace_id, board_id, number, title, status, creator_id,"
        " created_at, updated_at) VALUES ('tsk_1', 'ws', 1, 1, 't', 'todo', 'agt', 'x', 'x')"
    )
    assert migrate(conn) == 1
    assert conn.execute("SELECT messages, workspaces FROM tasks").fetchall() == [("[]", "[]")]


async def test_expected_updated_at_is_compared_as_an_instant_and_must_be_real(api: Api) -> None:
    created = await api.create("general", "t")
    seen: str = created[0]["updatedAt"]
    body = {"channel": "general", "number": 1, "patch": {"title": "t2"}}
    await api.ok("update", {**body, "expectedUpdatedAt": seen[:-1] + "000Z"})
    for impossible in ("2026-02-30T00:00:00Z", "2026-13-45T99:99:99Z", "yesterday"):
        error = await api.fails(
            "update",
            {**body, "expectedUpdatedAt": impossible},
            expect=422,
            code="validation_failed",
        )
        assert list(error["fieldErrors"]) == ["$.expectedUpdatedAt"]
