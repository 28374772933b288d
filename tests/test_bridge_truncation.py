"""Budgets through the bridge subprocess: cut by field, marked truthfully, never a failure.

Every answer here also passes the SDK client's own outputSchema validation (`call_tool` raises
"Invalid structured content" otherwise) and a JSON Schema 2020-12 validator, and its text
content carries the same JSON as its `structuredContent`.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
import trio
from jsonschema import Draft202012Validator

from agentteam_task_bridge.bridge._registry import TOOLS

from .bridge_harness import BridgeSession, journal_calls

EMOJI = "😀"  # 4 UTF-8 bytes
VALIDATORS = {name: Draft202012Validator(spec.tool.output_schema) for name, spec in TOOLS.items()}


def compact_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def answer(bridge: BridgeSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A successful call's structuredContent, checked against the schema and its text twin."""
    result = await bridge.call(tool, arguments)  # the SDK validates it against outputSchema
    assert not result.is_error, result.structured_content
    structured = result.structured_content
    assert structured is not None
    assert_complete_text(result)
    VALIDATORS[tool].validate(structured)
    assert compact_bytes(structured) <= TOOLS[tool].budget_bytes
    return structured


def assert_complete_text(result: types.CallToolResult) -> None:
    """The text content is one summary line and the very JSON of structuredContent."""
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    json_text = content.text.split("\n", 1)[-1]
    assert json.loads(json_text) == result.structured_content


@pytest.mark.wire
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
    result = await answer(bridge, "task_list", {"channel": "general", "limit": 100})
    assert result["meta"]["truncated"] is True
    assert result["meta"]["truncated_fields"] == ["$.data.items"]
    assert result["meta"]["continuation"]["tool"] == "task_list"
    seen = [t["number"] for t in result["data"]["items"]]
    assert 0 < len(seen) < 60
    pages = 1
    while "next_cursor" in result["meta"]:
        result = await answer(
            bridge,
            "task_list",
            {"channel": "general", "limit": 100, "cursor": result["meta"]["next_cursor"]},
        )
        seen += [t["number"] for t in result["data"]["items"]]
        pages += 1
    assert seen == list(range(1, 61)) and pages >= 2
    assert "truncated" not in result["meta"]


async def test_fifty_emoji_titled_tasks_are_created_once_and_answered_as_created(
    bridge: BridgeSession,
) -> None:
    tasks = [{"title": EMOJI * 200} for _ in range(50)]  # a batch is title-only: 40,000 bytes
    result = await answer(bridge, "task_create", {"channel": "general", "tasks": tasks})
    assert result["data"]["reused"] is False
    assert [t["number"] for t in result["data"]["tasks"]] == list(range(1, 51))
    assert result["meta"]["truncated"] is True
    assert "$.data.tasks[*].title" in result["meta"]["truncated_fields"]
    assert "was applied" in result["meta"]["truncation_note"]
    title = result["data"]["tasks"][0]["title"]
    assert title.endswith("…") and set(title[:-1]) == {EMOJI}
    # Created exactly once: the board holds 50 tasks, and the journal a result, not an error.
    numbers: list[int] = []
    page = await answer(bridge, "task_list", {"channel": "general", "limit": 100})
    numbers += [t["number"] for t in page["data"]["items"]]
    while "next_cursor" in page["meta"]:
        page = await answer(
            bridge,
            "task_list",
            {"channel": "general", "limit": 100, "cursor": page["meta"]["next_cursor"]},
        )
        numbers += [t["number"] for t in page["data"]["items"]]
    assert numbers == list(range(1, 51))
    kinds = list(journal_calls(bridge.journal).values())
    assert kinds[0][-1] == "call_result"


async def test_a_long_multibyte_description_is_cut_and_continued(
    bridge: BridgeSession,
) -> None:
    for description in ("漢" * 9_000, EMOJI * 10_000):  # 27,000 and 40,000 bytes
        created = await answer(
            bridge,
            "task_create",
            {"channel": "eng", "tasks": [{"title": "long", "description": description}]},
        )
        number = created["data"]["tasks"][0]["number"]
        for _ in range(2):  # every read, not only the first
            result = await answer(bridge, "task_get", {"channel": "eng", "number": number})
            cut = result["data"]["task"]["description"]
            assert description.startswith(cut) and len(cut) > len(description) // 2
            assert result["meta"]["truncated_fields"] == ["$.data.task.description"]
            assert "next_cursor" in result["meta"]["truncation_note"]
            action = result["meta"]["continuation"]
            rest = await answer(bridge, action["tool"], action["arguments"])
            assert rest["meta"]["continued"] == {"description_from": len(cut)}
            assert cut + rest["data"]["task"]["description"] == description
            assert "next_cursor" not in rest["meta"] and "truncated" not in rest["meta"]


async def test_a_full_task_is_cut_by_field_and_continues_what_it_can(
    bridge: BridgeSession,
) -> None:
    rich = {
        "title": EMOJI * 200,
        "description": EMOJI * 10_000,
        "labels": [EMOJI * 50] * 20,
        "checklist": [{"text": EMOJI * 500}] * 50,
        "urls": ["https://example.com/" + EMOJI * 2000] * 20,
        "blocker": EMOJI * 500,
    }
    await answer(bridge, "task_create", {"channel": "general", "tasks": [rich]})
    for _ in range(5):
        await answer(
            bridge, "task_checkpoint", {"channel": "general", "number": 1, "summary": EMOJI * 4000}
        )
    result = await answer(bridge, "task_get", {"channel": "general", "number": 1})
    task = result["data"]["task"]
    assert task["checkpoints"]["total"] == 5 and len(task["checklist"]) == 50
    note = result["meta"]["truncation_note"]
    assert "no tool returns them whole" in note and "next_cursor" in note
    assert "$.data.task.description" in result["meta"]["truncated_fields"]
    assert "$.data.task.checklist[*].text" in result["meta"]["truncated_fields"]
    # The continuation ends, and gives the whole description and every checkpoint once.
    text, ids = task["description"], [c["id"] for c in task["checkpoints"]["items"]]
    for _ in range(12):
        if "continuation" not in result["meta"]:
            break
        action = result["meta"]["continuation"]
        result = await answer(bridge, action["tool"], action["arguments"])
        task = result["data"]["task"]
        text += task["description"] or ""
        ids += [c["id"] for c in task["checkpoints"]["items"]]
    assert "continuation" not in result["meta"]
    assert text == rich["description"] and sorted(ids, reverse=True) == ids and len(ids) == 5


async def test_a_truncated_claim_receipt_keeps_every_required_property(
    bridge: BridgeSession,
) -> None:
    rich = {"title": EMOJI * 200, "labels": [EMOJI * 50] * 20}  # a rich task is created alone
    for _ in range(50):
        await bridge.ok("task_create", {"channel": "general", "tasks": [rich]})
    numbers = list(range(1, 51))
    result = await answer(
        bridge, "task_set_claim", {"channel": "general", "numbers": numbers, "claimed": True}
    )
    assert result["meta"]["truncated"] is True
    assert result["data"]["changed"] == numbers
    assert [t["number"] for t in result["data"]["tasks"]] == numbers
    assert all(t["status"] == "todo" and t["assignee"] for t in result["data"]["tasks"])
