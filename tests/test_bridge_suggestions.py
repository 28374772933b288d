"""Every `suggested_action` is a valid call that succeeds when sent back unchanged (issue 28).

A sweep over the error paths that can suggest a next call (product errors, cursors, calls in
doubt after every kind of upstream fault on every mutation tool, old tool names), under each
`--compat` policy, against the reference runtime: each suggestion is checked against its tool's
`inputSchema` and then sent as it is; it must not fail. Paths where no call would succeed (a
delete in doubt, an old name called with arguments its replacement refuses) suggest nothing.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, cast

import jsonschema
import msgspec
import pytest

from agentteam_task_bridge.bridge._compat import Policy
from agentteam_task_bridge.runtime import FaultSpec, RuntimeConfig, open_runtime

from .bridge_harness import BridgeSession
from .bridge_inprocess import inprocess_session
from .test_bridge_compat import OLD_TOOLS

FAULTS = [
    FaultSpec(kind="drop_after_commit"),
    FaultSpec(kind="malformed"),
    FaultSpec(kind="status", status=500),
    FaultSpec(kind="status", status=502),
    FaultSpec(kind="status", status=503),
    FaultSpec(kind="drop"),
]
TITLES = ["plain", "!!!", "  padded  ", "\U0001f600" * 200, "quote \" and ' and OR AND"]


def _mutations(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """One call of each mutation tool, on tasks the setup made."""
    return [
        ("task_create", {"channel": "general", "tasks": [{"title": rng.choice(TITLES)}]}),
        ("task_update", {"channel": "general", "number": 1, "patch": {"title": "t"}}),
        ("task_checkpoint", {"channel": "general", "number": 1, "summary": "s"}),
        ("task_set_claim", {"channel": "general", "numbers": [1], "claimed": rng.random() < 0.5}),
        ("task_delete", {"channel": "general", "number": 5}),
    ]


async def _setup(bridge: BridgeSession) -> str:
    """Tasks #1-#5 (#3 a subtask of #2, #4 deleted); the stale revision of #1."""
    made = await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": "one"}, {"title": "two"}]}
    )
    stale: str = made["data"]["tasks"][0]["updated_at"]
    await bridge.ok(
        "task_create", {"channel": "general", "parent": 2, "tasks": [{"title": "three"}]}
    )
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "four"}]})
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "five"}]})
    await bridge.ok("task_delete", {"channel": "general", "number": 4})
    await bridge.ok("task_update", {"channel": "general", "number": 1, "patch": {"title": "1"}})
    return stale


async def _product_errors(bridge: BridgeSession, stale: str) -> list[tuple[str, dict[str, Any]]]:
    page = await bridge.ok("task_list", {"channel": "general", "limit": 1})
    cursor = page["meta"]["next_cursor"]
    return [
        ("task_update", {"channel": "general", "number": 1, "expected_updated_at": stale,
                         "patch": {"title": "x"}}),
        ("task_get", {"channel": "general", "number": 999}),
        ("task_get", {"channel": "general", "number": 4}),
        ("task_update", {"channel": "general", "number": 999, "patch": {"title": "x"}}),
        ("task_checkpoint", {"channel": "general", "number": 4, "summary": "x"}),
        ("task_delete", {"channel": "general", "number": 2}),
        ("task_list", {"channel": "genral"}),
        ("task_get", {"channel": "engg", "number": 1}),
        ("task_list", {"channel": "general", "cursor": "bt1.forged.00"}),
        ("task_list", {"channel": "general", "cursor": "not-a-cursor"}),
        ("task_list", {"channel": "general", "status": "done", "cursor": cursor}),
        ("task_list", {"channel": "general", "query": "x", "cursor": cursor}),
    ]  # fmt: skip


async def _check(
    bridge: BridgeSession, name: str, args: dict[str, Any], seen: dict[str, int]
) -> None:
    """Call; if the error suggests a next call, validate it and send it unchanged."""
    result = await bridge.call(name, args)
    content = result.structured_content
    assert content is not None
    if not result.is_error:
        return
    error = content["error"]
    action = error.get("suggested_action")
    if action is None:
        return
    seen[error["code"]] = seen.get(error["code"], 0) + 1
    tool = next(t for t in bridge.tools if t.name == action["tool"])
    jsonschema.validate(action["arguments"], tool.input_schema)
    again = await bridge.call(action["tool"], action["arguments"])
    assert not again.is_error, (name, args, error, again.structured_content)


@pytest.mark.parametrize("policy", ["strict", "hint", "forward"])
async def test_every_suggested_action_is_a_valid_call_that_succeeds(
    tmp_path: Path, policy: str
) -> None:
    rng = random.Random(policy)
    seen: dict[str, int] = {}
    async with (
        open_runtime(RuntimeConfig()) as runtime,
        inprocess_session(runtime, tmp_path / "j.db", compat=cast(Policy, policy)) as bridge,
    ):
        stale = await _setup(bridge)
        for name, args in await _product_errors(bridge, stale):
            await _check(bridge, name, args, seen)
        for fault in FAULTS:
            for name, args in _mutations(rng):
                op = {"task_set_claim": "set-claim"}.get(name, name.removeprefix("task_"))
                runtime.faults.arm(msgspec.structs.replace(fault, op=op))
                await _check(bridge, name, args, seen)
                runtime.faults.clear()
        for old, (args, _) in OLD_TOOLS.items():
            await _check(bridge, old, args, seen)
            await _check(bridge, old, {"channel": "general"}, seen)  # too little to map
    expected = {
        "stale_update",
        "task_not_found",
        "subtask_mode_required",
        "channel_not_found",
        "cursor_invalid",
        "cursor_mismatch",
        "outcome_unknown",
    }
    if policy == "hint":
        expected.add("deprecated_tool")
    assert expected <= set(seen), seen
