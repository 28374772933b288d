"""Provider portability, sent: the calls each provider's tool rules admit succeed on the bridge.

- OpenAI strict mode (openai-agents `convert_schemas_to_strict`, LangChain `strict=True`,
  pydantic-ai) makes every property required: a strict model sends `null` for each optional field
  it does not mean, and the bridge reads that null as the field left out. Every tool but the ones
  in STRICT_MODE_LIMITS takes such a call; for `task_update` the call strict mode forces is sent
  and refused, as the listed reason says, and docs/clients.md names it with that reason.
- Gemini function declarations (google-genai `JSONSchema`: no `examples`, no `$ref`) and
  Anthropic tool input rules take the schemas as they are: the lint proves the schemas pass
  them, and the calls they admit (here: the required fields only, and every optional field set)
  succeed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tools.contract_lint import STRICT_MODE_LIMITS, openai_strict, strict_blockers
from tools.contract_lint._portability import GEMINI_REFUSED

from .bridge_harness import BridgeSession

pytestmark = pytest.mark.wire

# Calls a strict-mode model makes: every property present, null for each it does not mean.
# Sent in this order on a board where tasks #1-#3 exist (#3 a subtask of #1).
STRICT_CALLS: dict[str, dict[str, Any]] = {
    "task_list": {
        "channel": "general",
        "query": None,
        "status": None,
        "include_subtasks": None,
        "limit": None,
        "cursor": None,
        "sort": None,
        "filters": {"assignee": None, "label": None, "priority": None},
    },
    "task_get": {"channel": "general", "number": 1, "cursor": None},
    "task_create": {
        "tasks": [
            {
                "title": "strict",
                "description": None,
                "assignee": None,
                "labels": None,
                "priority": None,
                "status": None,
                "checklist": [{"text": "c", "done": None}],
                "urls": None,
                "blocker": None,
            }
        ],
        "channel": "general",
        "parent": None,
        "parent_task_scope": None,
        "target": None,
        "idempotency_key": None,
    },
    "task_set_claim": {"channel": "general", "numbers": [1], "claimed": True},
    "task_checkpoint": {"channel": "general", "number": 1, "summary": "strict"},
    "task_delete": {"channel": "general", "number": 2, "subtask_mode": None},
}
# The call strict mode forces on the tool that cannot work under it: a model that means only
# `status: done` must still send a value for every patch field, and each one changes the task
# (null clears a nullable field, a list replaces one): no value says "leave it alone".
FORCED_CALLS: dict[str, dict[str, Any]] = {
    "task_update": {
        "channel": "general",
        "number": 3,
        "patch": {
            "title": "s",
            "description": None,
            "status": "done",
            "priority": None,
            "labels": [],
            "assignee": None,
            "checklist": [],
            "urls": [],
            "attachments": [],
            "blocker": None,
            "parent": None,
            "thread": None,
            "messages": [],
            "workspaces": [],
        },
        "expected_updated_at": None,
    },
}
# Calls valid against the schemas as Gemini and Anthropic take them (unchanged): the required
# fields only, then an optional field of each kind set.
PLAIN_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("task_list", {"channel": "general"}),
    ("task_list", {"channel": "general", "query": "strict", "status": "all", "limit": 5,
                   "sort": "relevance", "include_subtasks": True,
                   "filters": {"priority": "high"}}),
    ("task_get", {"channel": "general", "number": 1}),
    ("task_create", {"channel": "general", "tasks": [{"title": "plain"}]}),
    ("task_create", {"channel": "general", "parent": 1,
                     "tasks": [{"title": "rich", "priority": "high", "labels": ["l"]}]}),
    ("task_update", {"channel": "general", "number": 1, "patch": {"priority": None}}),
    ("task_set_claim", {"channel": "general", "numbers": [1], "claimed": False}),
    ("task_checkpoint", {"channel": "general", "number": 1, "summary": "plain"}),
    ("task_delete", {"channel": "general", "number": 4}),
    ("task_delete", {"channel": "general", "number": 1, "subtask_mode": "promote"}),
]  # fmt: skip


async def test_a_strict_mode_call_of_each_tool_that_can_take_one_succeeds(
    bridge: BridgeSession,
) -> None:
    await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": "t"}, {"title": "u"}]}
    )
    await bridge.ok("task_create", {"channel": "general", "parent": 1, "tasks": [{"title": "s"}]})
    schemas = {t.name: t.input_schema for t in bridge.tools}
    workable = {name for name, schema in schemas.items() if not strict_blockers(schema)}
    assert workable == set(STRICT_CALLS) == set(schemas) - set(STRICT_MODE_LIMITS)
    for name, args in STRICT_CALLS.items():
        jsonschema.validate(args, openai_strict(schemas[name]))
        data = (await bridge.ok(name, args))["data"]
        if name == "task_list":  # null is "left out": the open top-level tasks, by number
            assert [t["number"] for t in data["items"]] == [1, 2]
        if name == "task_create":  # null fields are the defaults: a todo task, nothing else
            [task] = data["tasks"]
            assert (task["status"], task["priority"], task["labels"]) == ("todo", None, [])
    # The same call with the nulls left out is the same request: one canonical form.
    same = {k: v for k, v in STRICT_CALLS["task_list"].items() if v is not None}
    del same["filters"]
    assert (await bridge.ok("task_list", same))["data"] == (
        await bridge.ok("task_list", STRICT_CALLS["task_list"])
    )["data"]
    # The limitation the lint lists, as it is: the forced call runs and loses what it did not
    # mean (the description, the labels, the parent).
    await bridge.ok(
        "task_update",
        {"channel": "general", "number": 3, "patch": {"description": "keep", "labels": ["keep"]}},
    )
    for name, args in FORCED_CALLS.items():
        jsonschema.validate(args, openai_strict(schemas[name]))
        changed = (await bridge.ok(name, args))["data"]["changed"]
        assert {"status", "description", "labels", "parent"} <= set(changed)


async def test_the_calls_gemini_and_anthropic_admit_succeed(bridge: BridgeSession) -> None:
    await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": "t"}, {"title": "u"}]}
    )
    await bridge.ok("task_create", {"channel": "general", "parent": 1, "tasks": [{"title": "s"}]})
    schemas = {t.name: t.input_schema for t in bridge.tools}
    for schema in schemas.values():
        text = repr(schema)
        assert not any(f"'{keyword}'" in text for keyword in GEMINI_REFUSED)
    assert {name for name, _ in PLAIN_CALLS} == set(schemas)
    for name, args in PLAIN_CALLS:
        jsonschema.validate(args, schemas[name])
        await bridge.ok(name, args)


def test_the_client_docs_name_each_tool_strict_mode_cannot_serve() -> None:
    text = (Path(__file__).parent.parent / "docs" / "clients.md").read_text()
    for name, reason in STRICT_MODE_LIMITS.items():
        assert f"`{name}`" in text and reason.split(":")[0] in text, name
