"""The bridge's answers as a client reads them over the wire, through the bridge subprocess.

- error answers are complete in the text content too (a text-reading runtime sees the code,
  `retryable` and the suggested action), and pass a 2020-12 validator and the SDK's own check;
- a task at every maximum: no list is emptied or cut without its JSON path in the marker;
- the enums as `tools/list` serves them state their default and what an unknown value does, and
  a refused value names the accepted ones;
- a keyed create's retryability does not depend on how the connection was lost;
- the defaults of a checklist item written out replay under the same key;
- and, once over the wire, the cases whose tables run in-process elsewhere (emoji and Han
  text, cut tasks and receipts, refused values).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from jsonschema import Draft202012Validator

from agentteam_task_bridge.runtime import FaultSpec
from tools.contract_lint import walk_properties

from . import test_bridge_idempotency as idempotency
from . import test_bridge_inputs as inputs
from . import test_bridge_tools as tools
from . import test_bridge_truncation as truncation
from .bridge_harness import BridgeSession

# Every test here talks to `agentteam-bridge serve` as a subprocess (the `bridge` fixture's wire).
pytestmark = pytest.mark.wire

EMOJI = "😀"  # 4 UTF-8 bytes
META = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}


def _validator(bridge: BridgeSession, tool: str) -> Draft202012Validator:
    schema = next(t.output_schema for t in bridge.tools if t.name == tool)
    assert schema is not None
    return Draft202012Validator(schema)


async def _checked_error(
    bridge: BridgeSession, tool: str, args: dict[str, Any], meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An error answer: schema-valid (2020-12 and the SDK's check) and complete in its text."""
    result = await bridge.call(tool, args, meta)
    assert result.is_error, result.structured_content
    structured = result.structured_content
    assert structured is not None
    _validator(bridge, tool).validate(structured)
    # The SDK checks successes inside call_tool; an error gets the same check explicitly.
    await bridge.session.validate_tool_result(tool, result)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    # The serialized JSON, after a one-line summary where there is one.
    assert json.loads(content.text.split("\n", 1)[-1]) == structured
    error: dict[str, Any] = structured["error"]
    return error


# --- cases whose tables run in-process, once over the wire ------ -------------------------


async def test_fifty_emoji_titled_tasks_created_once_over_the_wire(bridge: BridgeSession) -> None:
    await truncation.test_fifty_emoji_titled_tasks_are_created_once_and_answered_as_created(bridge)


async def test_a_9000_han_description_readable_over_the_wire(bridge: BridgeSession) -> None:
    await truncation.test_a_long_multibyte_description_is_cut_and_continued(bridge)


async def test_a_full_task_cut_by_field_over_the_wire(bridge: BridgeSession) -> None:
    await truncation.test_a_full_task_is_cut_by_field_and_continues_what_it_can(bridge)


async def test_a_cut_claim_receipt_schema_valid_over_the_wire(bridge: BridgeSession) -> None:
    await truncation.test_a_truncated_claim_receipt_keeps_every_required_property(bridge)


async def test_defaults_written_out_replay_over_the_wire(bridge: BridgeSession) -> None:
    await idempotency.test_defaults_written_out_replay_and_a_real_difference_conflicts(bridge)


async def test_a_refused_status_lists_the_values_over_the_wire(bridge: BridgeSession) -> None:
    await inputs.test_a_refused_status_names_the_lifecycle_through_the_bridge(bridge)


async def test_update_thread_messages_workspaces_over_the_wire(bridge: BridgeSession) -> None:
    await tools.test_update_sets_thread_messages_and_workspaces(bridge)


# --- errors, complete in the text content ----------------------------------------------------


async def test_every_tools_errors_are_schema_valid_and_complete_in_the_text(
    bridge: BridgeSession,
) -> None:
    rt = bridge.runtime
    assert rt is not None
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "seed"}]})
    locator = {"channel": "general", "number": 1}

    error = await _checked_error(bridge, "task_list", {"channel": "genral"})
    assert error["code"] == "channel_not_found" and error["suggested_action"]["tool"] == "task_list"

    error = await _checked_error(bridge, "task_get", {"channel": "general", "number": 9})
    assert error["code"] == "task_not_found"

    bad = {"channel": "general", "tasks": [{"title": EMOJI * 200, "status": "blocked"}]}
    error = await _checked_error(bridge, "task_create", bad)
    assert error["code"] == "invalid_arguments" and error["retryable"] is False
    assert "`todo`" in error["field_errors"]["$.tasks[0].status"]

    # A 504 on a mutation: in doubt, and the message does not claim nothing happened.
    rt.faults.arm(FaultSpec(kind="status", status=504, op="update"))
    error = await _checked_error(bridge, "task_update", {**locator, "patch": {"title": "b"}})
    assert (error["code"], error["retryable"]) == ("outcome_unknown", False)
    assert "not processed" not in error["message"].lower()
    assert error["suggested_action"] == {"tool": "task_get", "arguments": locator}

    claim = {**locator, "numbers": [1], "claimed": True}
    del claim["number"]
    rt.faults.arm(FaultSpec(kind="drop", op="set-claim"))
    error = await _checked_error(bridge, "task_set_claim", claim)
    assert error["retryable"] is True  # a desired-state setter is safe to repeat

    rt.faults.arm(FaultSpec(kind="malformed", op="checkpoint"))
    error = await _checked_error(bridge, "task_checkpoint", {**locator, "summary": "s"})
    assert (error["code"], error["retryable"]) == ("outcome_unknown", False)

    rt.faults.arm(FaultSpec(kind="status", status=429, retry_after_seconds=4, op="delete"))
    error = await _checked_error(bridge, "task_delete", locator)
    assert error["code"] == "rate_limited" and error["retry_after_seconds"] == 4
    assert type(error["retry_after_seconds"]) is int


# --- a task at every maximum: nothing emptied, everything cut is named ------------------------


async def test_no_list_of_a_full_task_is_emptied_or_cut_without_its_path(
    bridge: BridgeSession,
) -> None:
    rich = {
        "title": "漢" * 200,
        "description": EMOJI * 10_000,
        "labels": [EMOJI * 50] * 20,
        "checklist": [{"text": "漢" * 500}] * 50,
        "urls": ["https://example.com/" + EMOJI * 2000] * 20,
        "blocker": EMOJI * 500,
    }
    await bridge.ok("task_create", {"channel": "general", "tasks": [rich]})
    for _ in range(5):
        await bridge.ok(
            "task_checkpoint", {"channel": "general", "number": 1, "summary": EMOJI * 4000}
        )
    result = await bridge.call("task_get", {"channel": "general", "number": 1})  # SDK-validated
    assert not result.is_error, result.structured_content
    structured = result.structured_content
    assert structured is not None
    _validator(bridge, "task_get").validate(structured)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert json.loads(content.text.split("\n", 1)[-1]) == structured
    task, meta = structured["data"]["task"], structured["meta"]
    cut = set(meta["truncated_fields"])
    for name, full in (
        ("labels", 20),
        ("checklist", 50),
        ("urls", 20),
    ):
        assert task[name], name  # never emptied
        assert len(task[name]) == full or f"$.data.task.{name}" in cut, (name, cut)
    # A section left out of this answer is continued (contract 8.3), never silently emptied.
    assert task["checkpoints"]["total"] == 5
    assert task["checkpoints"]["items"] or meta["continuation"]["tool"] == "task_get"
    # Every profile string the answer shortened ends in the marker and is listed by its path;
    # the description, which the continuation reads on, is listed and cut without one.
    for path, value in (
        ("$.data.task.title", task["title"]),
        ("$.data.task.blocker", task["blocker"]),
    ):
        assert (path in cut) == value.endswith("…"), (path, cut)
    assert "$.data.task.description" in cut and meta["continuation"]["arguments"]["cursor"]
    assert "next_cursor" in meta["truncation_note"]


# --- enums as served --------------------------------------------------------------------------


async def test_served_enums_state_their_default_and_unknown_values(bridge: BridgeSession) -> None:
    seen = 0
    for tool in bridge.tools:
        for path, _, prop in walk_properties(tool.input_schema):
            branches = [prop, *prop.get("anyOf", [])]
            if any("enum" in b for b in branches):
                seen += 1
                text = prop.get("description", "")
                assert "Default" in text or "required" in text, (tool.name, path)
                assert "unknown value is refused" in text, (tool.name, path)
    assert seen >= 9  # every enum of the seven tools (test_bridge_inputs lists them)
    cases: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
        (
            "task_list",
            {"channel": "general", "status": "blocked"},
            "$.status",
            ("all", "canceled", "done", "in_progress", "in_review", "open", "todo"),
        ),
        (
            "task_update",
            {"channel": "general", "number": 1, "patch": {"priority": "p0"}},
            "$.patch.priority",
            ("high", "low", "normal", "urgent"),
        ),
        (
            "task_delete",
            {"channel": "general", "number": 1, "subtask_mode": "orphan"},
            "$.subtask_mode",
            (),
        ),
    ]
    for tool_name, args, path, values in cases:
        error = await _checked_error(bridge, tool_name, args)
        reason = error["field_errors"][path]
        assert "is not an accepted value; use one of" in reason, reason
        for value in values:
            assert f"`{value}`" in reason, (value, reason)


# --- keyed creates: retryable however the answer was lost; defaults fold ---------------------


def _open_callback(bridge: BridgeSession) -> None:
    rt = bridge.runtime
    assert rt is not None
    rt.store.open_callback(rt.workspace_id, "run_1", "cb_1", rt.agent_id)


@pytest.mark.parametrize("fault", ["drop", "drop_after_commit", "status_500", "status_502"])
async def test_a_keyed_create_is_retryable_however_its_answer_was_lost(
    bridge: BridgeSession, fault: str
) -> None:
    _open_callback(bridge)
    rt = bridge.runtime
    assert rt is not None
    spec = (
        FaultSpec(kind="status", status=int(fault[-3:]), op="create")
        if fault.startswith("status")
        else FaultSpec(kind=fault, op="create")  # type: ignore[arg-type]
    )
    keyed = {"channel": "general", "tasks": [{"title": "once"}], "idempotency_key": "k"}
    rt.faults.arm(spec)
    error = await _checked_error(bridge, "task_create", keyed, META)
    assert error["retryable"] is True, error
    assert error["suggested_action"] == {"tool": "task_create", "arguments": keyed}
    again = await bridge.ok("task_create", keyed, meta=META)
    assert [t["number"] for t in again["data"]["tasks"]] == [1]
    assert rt.store.stats()["tasks"] == 1  # retrying with the key never creates twice


async def test_a_checklist_items_default_written_out_replays_under_its_key(
    bridge: BridgeSession,
) -> None:
    _open_callback(bridge)
    base: dict[str, Any] = {"channel": "general", "idempotency_key": "effect-c"}
    plain = {"title": "t", "checklist": [{"text": EMOJI * 500}]}
    first = await bridge.ok("task_create", {**base, "tasks": [plain]}, meta=META)
    spelled = {**plain, "checklist": [{"text": EMOJI * 500, "done": False}]}
    again = await bridge.ok("task_create", {**base, "tasks": [spelled]}, meta=META)
    assert again["data"]["reused"] is True and again["data"]["tasks"] == first["data"]["tasks"]
    done = {**plain, "checklist": [{"text": EMOJI * 500, "done": True}]}
    error = await _checked_error(bridge, "task_create", {**base, "tasks": [done]}, META)
    assert (error["code"], error["retryable"]) == ("idempotency_conflict", False)
    assert bridge.runtime is not None and bridge.runtime.store.stats()["tasks"] == 1
