"""Old tool names and argument spellings under each `--compat` policy.

The policy tables run in-process (the MCP session `serve` runs, without the process); the strict
row of the tool-name table runs `serve --compat strict` as a subprocess, proving the flag and the
wire once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge._compat import Policy
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import BridgeSession, open_bridge
from .bridge_inprocess import inprocess_session

# old tool name -> (arguments an old client sends, the canonical tool it maps to)
OLD_TOOLS: dict[str, tuple[dict[str, Any], str]] = {
    "list_tasks": ({"channel": "general", "includeSubtasks": True}, "task_list"),
    "task_search": ({"channel": "general", "query": "seed"}, "task_list"),
    "get_task": ({"channel": "general", "number": 1}, "task_get"),
    "create_tasks": ({"channel": "general", "tasks": [{"title": "old"}]}, "task_create"),
    "update_task": ({"channel": "general", "number": 1, "title": "renamed"}, "task_update"),
    "task_claim": ({"channel": "general", "number": 1}, "task_set_claim"),
    "task_release": ({"channel": "general", "numbers": [1]}, "task_set_claim"),
    "task_add_checkpoint": ({"channel": "general", "number": 1, "summary": "s"}, "task_checkpoint"),
}


@asynccontextmanager
async def _bridge(
    runtime: Runtime, tmp_path: Path, policy: str, *, wire: bool = False
) -> AsyncIterator[BridgeSession]:
    path = tmp_path / f"{policy}.db"
    opened = (
        open_bridge(runtime.bridge_env(), path, "--compat", policy, runtime=runtime)
        if wire
        else inprocess_session(runtime, path, compat=cast(Policy, policy))
    )
    async with opened as bridge:
        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "seed"}]})
        yield bridge


def _deprecations(path: Path) -> list[journal.DeprecatedUsage]:
    with journal.open_reader(path) as reader:
        return [r.payload for r in reader.events(kind="deprecated_usage")]  # type: ignore[misc]


@pytest.mark.parametrize("policy", ["strict", "hint", "forward"])
async def test_old_tool_names_under_each_policy(
    file_runtime: Runtime, tmp_path: Path, policy: str
) -> None:
    async with _bridge(file_runtime, tmp_path, policy, wire=policy == "strict") as bridge:
        assert not {t.name for t in bridge.tools} & set(OLD_TOOLS)
        for old, (args, canonical) in OLD_TOOLS.items():
            result = await bridge.call(old, args)
            content = result.structured_content
            assert content is not None
            if policy == "strict":
                assert result.is_error and content["error"]["code"] == "unknown_tool"
                assert canonical in content["error"]["message"]
            elif policy == "hint":
                assert result.is_error and content["error"]["code"] == "deprecated_tool"
                action = content["error"]["suggested_action"]
                assert action["tool"] == canonical
                again = await bridge.call(action["tool"], action["arguments"])
                assert not again.is_error, again.structured_content
                assert "deprecation" not in again.structured_content["meta"]  # type: ignore[index]
            else:
                assert not result.is_error, content
                uses = content["meta"]["deprecation"]["uses"]
                assert uses[0] == {
                    "kind": "tool_name",
                    "old": old,
                    "replacement": canonical,
                    "removal_gate": uses[0]["removal_gate"],
                }
    used = _deprecations(tmp_path / f"{policy}.db")
    tool_uses = [u for u in used if u.use_kind == "tool_name"]
    assert [u.old_name for u in tool_uses] == list(OLD_TOOLS)
    assert all(
        u.client_name == "agentteam-tests"
        and u.client_version == "9.9.9"
        and u.agent_id == file_runtime.agent_id
        for u in tool_uses
    )


ALIASES: list[tuple[str, dict[str, Any], str]] = [
    ("task_list", {"channel": "general", "includeSubtasks": True}, "$.includeSubtasks"),
    ("task_update", {"channel": "general", "number": 1, "title": "flat"}, "$.title"),
    (
        "task_update",
        {
            "channel": "general",
            "number": 1,
            "patch": {"title": "x"},
            "expectedUpdatedAt": "2020-01-01T00:00:00Z",
        },
        "$.expectedUpdatedAt",
    ),
    ("task_delete", {"channel": "general", "number": 1, "subtaskMode": "promote"}, "$.subtaskMode"),
]


@pytest.mark.parametrize("policy", ["strict", "hint", "forward"])
async def test_old_argument_spellings_under_each_policy(
    file_runtime: Runtime, tmp_path: Path, policy: str
) -> None:
    async with _bridge(file_runtime, tmp_path, policy) as bridge:
        for tool, args, old_path in ALIASES:
            result = await bridge.call(tool, args)
            content = result.structured_content
            assert content is not None
            if policy == "strict":
                error = content["error"]
                assert error["code"] == "invalid_arguments"
                assert old_path in error["field_errors"]
                assert "use `" in error["field_errors"][old_path]
            else:
                uses = content["meta"]["deprecation"]["uses"]
                assert any(u["old"] == old_path for u in uses), content
    assert {u.old_name for u in _deprecations(tmp_path / f"{policy}.db")} >= {
        path for _, _, path in ALIASES
    }


async def test_nested_camel_case_is_translated(bridge: BridgeSession) -> None:
    parent = await bridge.ok("task_create", {"channel": "eng", "tasks": [{"title": "p"}]})
    scope = parent["data"]["tasks"][0]["scope_id"]
    child = await bridge.ok(
        "task_create",
        {"parentTaskScope": {"kind": "task", "scopeId": scope}, "tasks": [{"title": "c"}]},
    )
    olds = [u["old"] for u in child["meta"]["deprecation"]["uses"]]
    assert olds == ["$.parentTaskScope", "$.parent_task_scope.scopeId"]


async def test_an_alias_beside_its_canonical_field_is_refused(bridge: BridgeSession) -> None:
    error = await bridge.fails(
        "task_list",
        {"channel": "general", "includeSubtasks": True, "include_subtasks": False},
        code="invalid_arguments",
    )
    assert "$.includeSubtasks" in error["field_errors"]


@pytest.mark.parametrize("policy", ["strict", "hint", "forward"])
async def test_names_in_no_table_fail_closed(
    file_runtime: Runtime, tmp_path: Path, policy: str
) -> None:
    async with _bridge(file_runtime, tmp_path, policy) as bridge:
        await bridge.fails("tasks_list", {"channel": "general"}, code="unknown_tool")
        await bridge.fails(
            "task_get",
            {"channel": "general", "number": 1, "taskNumber": 1},
            code="invalid_arguments",
        )


async def test_upstream_deprecation_headers_are_journaled(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"
    async with open_bridge(file_runtime.bridge_env(), path, runtime=file_runtime) as bridge:
        file_runtime.faults.arm(FaultSpec(kind="deprecated", op="list"))
        await bridge.ok("task_list", {"channel": "general"})
    (use,) = _deprecations(path)
    assert use.use_kind == "upstream_route"
    assert use.old_name.startswith("GET /api/v1/workspaces/")
    assert use.replacement is not None and "successor-version" in use.replacement


# An old name whose mapping fixes an argument, called stating the opposite (issue 28, A8).
OPPOSED: list[tuple[str, dict[str, Any], str]] = [
    ("task_claim", {"channel": "general", "numbers": [1], "claimed": False}, "$.claimed"),
    ("task_claim", {"channel": "general", "number": 1, "claimed": "false"}, "$.claimed"),
    ("task_release", {"channel": "general", "numbers": [1], "claimed": True}, "$.claimed"),
    ("task_release", {"channel": "general", "number": 1, "claimed": 0}, "$.claimed"),
]


@pytest.mark.parametrize("policy", ["strict", "hint", "forward"])
async def test_an_old_name_never_runs_or_suggests_the_opposite_of_the_call(
    file_runtime: Runtime, tmp_path: Path, policy: str
) -> None:
    async with _bridge(file_runtime, tmp_path, policy) as bridge:
        before = await bridge.ok("task_get", {"channel": "general", "number": 1})
        for old, args, field in OPPOSED:
            error = await bridge.fails(old, args, code="invalid_arguments")
            assert list(error["field_errors"]) == [field], error
            assert "suggested_action" not in error
        after = await bridge.ok("task_get", {"channel": "general", "number": 1})
        assert after["data"]["task"] == before["data"]["task"]  # nothing was claimed or released
        # Stating what the old name means anyway is no contradiction.
        same = await bridge.call(
            "task_claim", {"channel": "general", "numbers": [1], "claimed": True}
        )
        content = same.structured_content
        assert content is not None
        if policy == "forward":
            assert not same.is_error and content["data"]["tasks"][0]["number"] == 1
        else:
            assert content["error"]["code"] in ("unknown_tool", "deprecated_tool")


async def test_hint_suggests_no_replacement_call_that_would_be_invalid(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    # The audit's A10: `get_task` without `number` was answered with `task_get {channel}`.
    async with _bridge(file_runtime, tmp_path, "hint") as bridge:
        error = await bridge.fails("get_task", {"channel": "general"}, code="deprecated_tool")
        assert "suggested_action" not in error
        assert error["field_errors"] == {"$.number": "required"}
        assert "task_get" in error["message"]
