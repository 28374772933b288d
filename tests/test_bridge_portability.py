"""Provider portability, sent: the calls OpenAI strict conversion admits (issue 28).

Strict mode (openai-agents, LangChain `strict=True`, pydantic-ai) makes every property required.
For each tool the contract lint finds workable, a call valid against the converted schema is sent
and succeeds; for each tool it lists in STRICT_MODE_LIMITS, the call strict mode forces is sent
and refused, as the listed reason says, and docs/clients.md names the tool with that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema

from tools.contract_lint import STRICT_MODE_LIMITS, openai_strict, strict_blockers

from .bridge_harness import BridgeSession

# Calls a strict-mode model can make: every property present, as the converted schema demands.
STRICT_CALLS: dict[str, dict[str, Any]] = {
    "task_get": {"channel": "general", "number": 1},
    "task_set_claim": {"channel": "general", "numbers": [1], "claimed": True},
    "task_checkpoint": {"channel": "general", "number": 1, "summary": "strict"},
}
# The calls strict mode forces on the tools that cannot work under it: what a model must send.
FORCED_CALLS: dict[str, dict[str, Any]] = {
    "task_list": {
        "channel": "general", "query": "", "status": "open", "include_subtasks": False,
        "limit": 20, "cursor": "none", "sort": "number",
        "filters": {"assignee": "@alice", "label": "x", "priority": "low"},
    },
    "task_create": {
        "tasks": [{"title": "t", "description": "", "assignee": "@alice", "labels": [],
                   "priority": "low", "status": "todo", "checklist": [], "urls": [],
                   "blocker": "b"}],
        "channel": "general", "parent": 1,
        "parent_task_scope": {"kind": "task", "scope_id": "tsk_x"},
        "target": "#general", "idempotency_key": "k",
    },
}  # fmt: skip


async def test_the_tools_that_work_in_strict_mode_take_a_strict_call(
    bridge: BridgeSession,
) -> None:
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
    schemas = {t.name: t.input_schema for t in bridge.tools}
    workable = {name for name, schema in schemas.items() if not strict_blockers(schema)}
    assert workable == set(STRICT_CALLS) == set(schemas) - set(STRICT_MODE_LIMITS)
    for name, args in STRICT_CALLS.items():
        jsonschema.validate(args, openai_strict(schemas[name]))
        await bridge.ok(name, args)
    for name, args in FORCED_CALLS.items():
        jsonschema.validate(args, openai_strict(schemas[name]))
        result = await bridge.call(name, args)
        assert result.is_error  # the limitation the lint lists, as it is


def test_the_client_docs_name_each_tool_strict_mode_cannot_serve() -> None:
    text = (Path(__file__).parent.parent / "docs" / "clients.md").read_text()
    for name, reason in STRICT_MODE_LIMITS.items():
        assert f"`{name}`" in text and reason.split(":")[0] in text, name
