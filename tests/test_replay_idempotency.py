"""`replay.check_idempotency`: a sound runtime passes; a deliberately broken one is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import BridgeSession
from .replay_helpers import (
    META,
    Built,
    call_event,
    drive,
    everyday_journal,
    injected,
    route,
    session_started,
    write_events,
)

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers

KEYED = {"channel": "general", "tasks": [{"title": "from a callback"}], "idempotency_key": "k1"}


def rules(result: replay.IdempotencyResult) -> list[str]:
    return [f.rule for f in result.findings]


def test_a_sound_runtime_keeps_every_promise(everyday_journal: Built) -> None:
    result = replay.check_idempotency([everyday_journal.path])
    assert result.ok, result.findings
    [group] = result.groups
    assert (group.key, group.workflow_run_id, group.callback_effect_id) == ("k1", "run_1", "cb_1")
    assert (group.calls, group.created, group.replays, group.conflicts) == (3, 1, 1, 1)
    assert group.workspace_id == "ws_local" and group.agent_id == "agt_local"
    hints = {h.tool: h for h in result.hints}
    assert hints["task_update"].verdict == "holds" and hints["task_update"].repeats == 1
    assert hints["task_set_claim"].verdict == "holds"
    assert hints["task_create"].declared is False  # only a key makes a create replayable
    assert result.claim_calls == 2 and result.claim_repeats == 1


async def _keyed_twice(bridge: BridgeSession, rt: Runtime) -> None:
    rt.store.open_callback(rt.workspace_id, "run_1", "cb_1", rt.agent_id)
    await bridge.ok("task_create", KEYED, meta=META)
    await bridge.ok("task_create", KEYED, meta=META)


async def test_a_replay_that_allocates_new_tasks_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def script(bridge: BridgeSession, rt: Runtime) -> None:
        honest = rt.store.create_tasks

        def forgetful(p: Any, req: Any) -> dict[str, Any]:
            result = honest(p, req)
            if not result["reused"]:
                return result
            # A broken store: the receipt is found, yet the batch is created again.
            fresh = msgspec.structs.replace(
                req,
                idempotency_key=msgspec.UNSET,
                workflow_run_id=msgspec.UNSET,
                callback_effect_id=msgspec.UNSET,
            )
            return honest(p, fresh)

        monkeypatch.setattr(rt.store, "create_tasks", forgetful)
        await _keyed_twice(bridge, rt)

    built = await drive(tmp_path, script)
    result = replay.check_idempotency([built.path])
    assert rules(result) == ["replay_allocated_numbers", "replay_not_reused"]
    assert all(f.seq == result.findings[0].seq for f in result.findings)
    [group] = result.groups
    assert group.violations == 2 and group.numbers == [1]


async def test_another_payload_honoured_under_the_same_key_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def script(bridge: BridgeSession, rt: Runtime) -> None:
        from agentteam_task_bridge.runtime import _create as create_module

        # A broken store: every payload digests the same, so no conflict is ever seen.
        monkeypatch.setattr(create_module, "_payload_digest", lambda req: "same")
        await _keyed_twice(bridge, rt)
        await bridge.ok("task_create", {**KEYED, "tasks": [{"title": "other"}]}, meta=META)

    built = await drive(tmp_path, script)
    assert rules(replay.check_idempotency([built.path])) == ["conflict_not_reported"]


async def test_a_claim_that_toggles_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def script(bridge: BridgeSession, rt: Runtime) -> None:
        honest = rt.store.set_claim

        def toggling(p: Any, req: Any) -> dict[str, Any]:
            result = honest(p, req)
            if req.claimed and result["unchanged"]:
                # A broken store: claiming what one holds releases it (a toggle).
                released = honest(p, msgspec.structs.replace(req, claimed=False))
                result = {**released, "claimed": True}
            return result

        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
        monkeypatch.setattr(rt.store, "set_claim", toggling)
        claim = {"channel": "general", "numbers": [1], "claimed": True}
        await bridge.ok("task_set_claim", claim)
        await bridge.ok("task_set_claim", claim)

    built = await drive(tmp_path, script)
    result = replay.check_idempotency([built.path])
    assert rules(result) == ["claim_repeat_changed", "idempotent_hint_unsafe"]
    assert {h.tool: h.verdict for h in result.hints}["task_set_claim"] == "violated"


def test_a_key_honoured_outside_a_callback_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    body = {"channel": "general", "tasks": [{"title": "t"}], "idempotencyKey": "k"}
    task = {"channel": "general", "number": 1, "scope_id": "tsk_1"}
    steps: list[journal.Payload] = [
        journal.CallReceived(
            arguments={"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": "k"}
        ),
        injected(),
        journal.UpstreamRequest(method="POST", route=route(""), body=body),
        journal.UpstreamResponse(status=200, body={}, duration_ms=1.0),
        journal.CallResult(result={"data": {"tasks": [task], "reused": False}, "meta": {}}),
    ]
    write_events(
        path, [session_started(), *(call_event("c1", p, tool="task_create") for p in steps)]
    )
    result = replay.check_idempotency([path])
    assert [(f.seq, f.rule) for f in result.findings] == [(6, "key_outside_callback")]


def test_the_declared_hints_are_read_without_the_mcp_types() -> None:
    """The registry's data is read without building the MCP definitions (pydantic models and
    schemas, about 0.2 s at every `report` and `idempotency`): the server builds those."""
    code = (
        "import sys; from agentteam_task_bridge.replay._idempotency import declared_hints;"
        "hints = declared_hints(); assert hints['task_set_claim'] and not hints['task_create'];"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp_types', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
