"""Every tool's success path through the real bridge subprocess, stdio client and runtime."""

from __future__ import annotations

import json

import pytest

from .bridge_harness import BridgeSession

CANONICAL = [
    "task_list",
    "task_get",
    "task_create",
    "task_update",
    "task_set_claim",
    "task_checkpoint",
    "task_delete",
]


@pytest.mark.wire
async def test_tools_list_is_exactly_the_seven_canonical_tools(bridge: BridgeSession) -> None:
    assert [t.name for t in bridge.tools] == CANONICAL
    again = (await bridge.session.list_tools()).tools
    assert [t.model_dump(by_alias=True) for t in again] == [
        t.model_dump(by_alias=True) for t in bridge.tools
    ]


async def test_create_list_get(bridge: BridgeSession) -> None:
    created = await bridge.ok(
        "task_create",
        {"channel": "general", "tasks": [{"title": "write docs"}, {"title": "ship it"}]},
    )
    assert [t["number"] for t in created["data"]["tasks"]] == [1, 2]
    assert created["data"]["reused"] is False
    listed = await bridge.ok("task_list", {"channel": "general"})
    assert [t["title"] for t in listed["data"]["items"]] == ["write docs", "ship it"]
    assert "next_cursor" not in listed["meta"]
    found = await bridge.ok("task_list", {"channel": "general", "query": "docs"})
    assert [t["number"] for t in found["data"]["items"]] == [1]
    result = await bridge.call("task_get", {"channel": "general", "number": 1})
    task = result.structured_content["data"]["task"]  # type: ignore[index]
    assert task["creator"] == "@local-agent" and task["scope_id"].startswith("tsk_")
    assert result.meta == {
        "agentteam/task": {"channel": "general", "number": 1, "scope_id": task["scope_id"]}
    }
    line, json_text = result.content[0].text.split("\n", 1)  # type: ignore[union-attr]
    assert line.startswith("Task #general/1 [todo]")
    assert json.loads(json_text) == result.structured_content


async def test_subtasks_by_parent_and_by_scope(bridge: BridgeSession) -> None:
    parent = await bridge.ok("task_create", {"channel": "eng", "tasks": [{"title": "epic"}]})
    scope = parent["data"]["tasks"][0]["scope_id"]
    child = await bridge.ok(
        "task_create", {"channel": "eng", "parent": 1, "tasks": [{"title": "a"}]}
    )
    assert child["data"]["tasks"][0]["parent"] == 1
    by_scope = await bridge.ok(
        "task_create",
        {"parent_task_scope": {"kind": "task", "scope_id": scope}, "tasks": [{"title": "b"}]},
    )
    assert by_scope["data"]["channel"] == "eng" and by_scope["data"]["parent"] == 1


@pytest.mark.wire
async def test_rich_create_update_claim_checkpoint_delete(bridge: BridgeSession) -> None:
    rich = {
        "title": "Rich",
        "description": "why",
        "assignee": "@alice",
        "labels": ["ops"],
        "priority": "high",
        "checklist": [{"text": "one"}],
        "urls": ["https://example.test/a"],
    }
    await bridge.ok(
        "task_create", {"channel": "general", "tasks": [rich], "target": "#general:th_7"}
    )
    task = (await bridge.ok("task_get", {"channel": "general", "number": 1}))["data"]["task"]
    assert task["thread"] == "#general:th_7" and task["checklist"] == [
        {"text": "one", "done": False}
    ]
    updated = await bridge.ok(
        "task_update",
        {
            "channel": "general",
            "number": 1,
            "expected_updated_at": task["updated_at"],
            "patch": {"status": "in_progress", "assignee": None, "description": None},
        },
    )
    assert updated["data"]["changed"] == ["description", "status", "assignee"]
    claim = await bridge.ok(
        "task_set_claim", {"channel": "general", "numbers": [1], "claimed": True}
    )
    assert claim["data"]["count"] == 1 and claim["data"]["tasks"][0]["assignee"] == "@local-agent"
    again = await bridge.ok(
        "task_set_claim", {"channel": "general", "numbers": [1], "claimed": True}
    )
    assert again["data"]["changed"] == [] and again["data"]["unchanged"] == [1]
    checkpoint = await bridge.ok(
        "task_checkpoint", {"channel": "general", "number": 1, "summary": "  decided on plan B  "}
    )
    assert checkpoint["data"]["checkpoint"]["summary"] == "decided on plan B"
    deleted = await bridge.ok("task_delete", {"channel": "general", "number": 1})
    assert deleted["data"] == {"channel": "general", "deleted": [1], "promoted": []}


async def test_delete_with_promote(bridge: BridgeSession) -> None:
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "p"}]})
    await bridge.ok(
        "task_create",
        {"channel": "general", "parent": 1, "tasks": [{"title": "c1"}, {"title": "c2"}]},
    )
    error = await bridge.fails(
        "task_delete", {"channel": "general", "number": 1}, code="subtask_mode_required"
    )
    assert error["suggested_action"]["tool"] == "task_get"
    result = await bridge.ok(
        "task_delete", {"channel": "general", "number": 1, "subtask_mode": "promote"}
    )
    assert result["data"]["promoted"] == [2, 3]


async def test_list_pages_with_next_cursor(bridge: BridgeSession) -> None:
    await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": f"t{i}"} for i in range(5)]}
    )
    first = await bridge.ok("task_list", {"channel": "general", "limit": 3})
    assert len(first["data"]["items"]) == 3 and first["meta"]["next_cursor"]
    rest = await bridge.ok(
        "task_list", {"channel": "general", "limit": 3, "cursor": first["meta"]["next_cursor"]}
    )
    assert [t["number"] for t in rest["data"]["items"]] == [4, 5]
    assert "next_cursor" not in rest["meta"]


async def test_update_sets_thread_messages_and_workspaces(bridge: BridgeSession) -> None:
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
    workspaces = ["😀" * 200, "漢" * 200, "github.com/acme/api@fix-login"]
    updated = await bridge.ok(
        "task_update",
        {
            "channel": "general",
            "number": 1,
            "patch": {
                "thread": "#general:th_9",
                "messages": ["#general:m_1", "#eng:m_2"],
                "workspaces": workspaces,
            },
        },
    )
    assert updated["data"]["changed"] == ["thread", "messages", "workspaces"]
    task = (await bridge.ok("task_get", {"channel": "general", "number": 1}))["data"]["task"]
    assert task["thread"] == "#general:th_9"
    assert task["messages"] == ["#general:m_1", "#eng:m_2"]
    assert task["workspaces"] == workspaces
    await bridge.ok(
        "task_update",
        {"channel": "general", "number": 1, "patch": {"thread": None, "messages": []}},
    )
    task = (await bridge.ok("task_get", {"channel": "general", "number": 1}))["data"]["task"]
    assert (task["thread"], task["messages"], task["workspaces"]) == (None, [], workspaces)


@pytest.mark.parametrize("wire", [pytest.param(True, marks=pytest.mark.wire), False])
async def test_unicode_line_separators_in_text_reach_the_client_whole(
    bridge: BridgeSession, wire: bool
) -> None:
    # NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR end a line for `str.splitlines`, not for
    # JSON lines: an answer holding them is one frame, read whole on both paths.
    title = "a\x85b\u2028c\u2029d"
    created = await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": title}]})
    number = created["data"]["tasks"][0]["number"]
    summary = "done\u2028next\x85end"
    await bridge.ok("task_checkpoint", {"channel": "general", "number": number, "summary": summary})
    task = (await bridge.ok("task_get", {"channel": "general", "number": number}))["data"]["task"]
    assert task["title"] == title and task["checkpoints"]["items"][-1]["summary"] == summary
