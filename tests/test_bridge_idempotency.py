"""The idempotent task_create inside a workflow callback, through the real bridge."""

from __future__ import annotations

from typing import Any

import pytest

from .bridge_harness import BridgeSession, journal_calls

META = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}


def _open_callback(bridge: BridgeSession) -> None:
    rt = bridge.runtime
    assert rt is not None
    rt.store.open_callback(rt.workspace_id, "run_1", "cb_1", rt.agent_id)


@pytest.mark.wire
async def test_a_replay_reuses_the_original_tasks_and_allocates_nothing(
    bridge: BridgeSession,
) -> None:
    _open_callback(bridge)
    args: dict[str, Any] = {
        "channel": "general",
        "tasks": [{"title": "from the callback"}],
        "idempotency_key": "effect-1",
    }
    first = await bridge.ok("task_create", args, meta=META)
    assert bridge.runtime is not None
    before = bridge.runtime.store.stats()
    again = await bridge.ok("task_create", args, meta=META)
    assert again["data"]["reused"] is True and first["data"]["reused"] is False
    assert again["data"]["tasks"] == first["data"]["tasks"]
    assert bridge.runtime.store.stats() == before
    nxt = await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "n"}]})
    assert nxt["data"]["tasks"][0]["number"] == 2


async def test_the_same_key_with_other_arguments_conflicts(bridge: BridgeSession) -> None:
    _open_callback(bridge)
    args: dict[str, Any] = {
        "channel": "general",
        "tasks": [{"title": "a"}],
        "idempotency_key": "effect-2",
    }
    await bridge.ok("task_create", args, meta=META)
    error = await bridge.fails(
        "task_create", {**args, "tasks": [{"title": "b"}]}, code="idempotency_conflict", meta=META
    )
    assert error["retryable"] is False


async def test_a_key_without_callback_context_fails_locally(bridge: BridgeSession) -> None:
    args = {"channel": "general", "tasks": [{"title": "a"}], "idempotency_key": "k"}
    await bridge.fails("task_create", args, code="idempotency_key_requires_callback")
    await bridge.fails("task_create", args, code="callback_not_active", meta=META)
    assert bridge.runtime is not None and bridge.runtime.store.stats()["tasks"] == 0


async def test_model_arguments_cannot_supply_the_workflow_run(bridge: BridgeSession) -> None:
    await bridge.fails(
        "task_create",
        {
            "channel": "general",
            "tasks": [{"title": "a"}],
            "idempotency_key": "k",
            "workflow_run_id": "run_1",
        },
        code="hidden_context_field",
        meta=META,
    )


async def test_defaults_written_out_replay_and_a_real_difference_conflicts(
    bridge: BridgeSession,
) -> None:
    """Idempotency on meaning: every default of a new task spelled out is the same create."""
    _open_callback(bridge)
    base: dict[str, Any] = {"channel": "general", "idempotency_key": "effect-3"}
    first = await bridge.ok("task_create", {**base, "tasks": [{"title": "t"}]}, meta=META)
    spelled = {
        "title": "t",
        "description": "",
        "labels": [],
        "status": "todo",
        "checklist": [],
        "urls": [],
    }
    again = await bridge.ok("task_create", {**base, "tasks": [spelled]}, meta=META)
    assert again["data"]["reused"] is True
    assert again["data"]["tasks"] == first["data"]["tasks"]
    await bridge.fails(
        "task_create",
        {**base, "tasks": [{**spelled, "status": "in_progress"}]},
        code="idempotency_conflict",
        meta=META,
    )
    assert bridge.runtime is not None and bridge.runtime.store.stats()["tasks"] == 1


async def test_workflow_ids_over_the_limit_are_refused_never_cut(bridge: BridgeSession) -> None:
    # Two runs whose ids share their first 128 bytes: cut to 128, they would share one scope
    # and the second would replay the first's tasks.
    rt = bridge.runtime
    assert rt is not None
    run, longer = "r" * 128, "r" * 128 + "-second"
    rt.store.open_callback(rt.workspace_id, run, "cb_1", rt.agent_id)
    args = {"channel": "general", "tasks": [{"title": "first"}], "idempotency_key": "effect"}
    await bridge.ok("task_create", args, meta={**META, "agentteam/workflow_run_id": run})
    before = rt.store.stats()
    for meta, key in (
        ({**META, "agentteam/workflow_run_id": longer}, "_meta.agentteam/workflow_run_id"),
        # 43 four-byte emoji: 43 characters, 172 UTF-8 bytes.
        ({**META, "agentteam/callback_effect_id": "😀" * 43}, "_meta.agentteam/callback_effect_id"),
    ):
        error = await bridge.fails("task_create", args, code="invalid_arguments", meta=meta)
        assert list(error["field_errors"]) == [key] and error["retryable"] is False
    assert rt.store.stats() == before
    # At the limit exactly (32 emoji = 128 bytes) the id is passed on whole.
    rt.store.open_callback(rt.workspace_id, run, "😀" * 32, rt.agent_id)
    at_limit = {"agentteam/workflow_run_id": run, "agentteam/callback_effect_id": "😀" * 32}
    created = await bridge.ok("task_create", {**args, "tasks": [{"title": "b"}]}, meta=at_limit)
    assert created["data"]["reused"] is False
    refused = [
        kinds for kinds in journal_calls(bridge.journal).values() if "call_rejected" in kinds
    ]
    assert len(refused) == 2 and all("upstream_request" not in kinds for kinds in refused)
