"""Idempotent task_create inside a workflow callback: durable receipts, replays, conflicts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agentteam_task_bridge.runtime import Runtime

from .conftest import Api, admin

RUN = {"workflowRunId": "run_1", "callbackEffectId": "cb_1"}


@pytest.fixture
async def callback(http: httpx.AsyncClient, runtime: Runtime) -> dict[str, str]:
    await admin(
        http,
        runtime,
        "callbacks",
        {
            "workspaceId": runtime.workspace_id,
            "runId": "run_1",
            "callbackEffectId": "cb_1",
            "responderAgentId": runtime.agent_id,
        },
    )
    return RUN


def _body(key: str = "k-1", **extra: Any) -> dict[str, Any]:
    return {
        "channel": "general",
        "tasks": [{"title": "from callback"}],
        "idempotencyKey": key,
        **RUN,
        **extra,
    }


async def test_replay_returns_the_original_tasks_without_side_effects(
    api: Api, callback: dict[str, str]
) -> None:
    first = await api.ok("create", _body())
    assert first["reused"] is False
    before = api.runtime.store.stats()
    again = await api.ok("create", _body())
    assert again["reused"] is True
    assert [t["scopeId"] for t in again["tasks"]] == [t["scopeId"] for t in first["tasks"]]
    assert api.runtime.store.stats() == before  # no number, activity or live event
    assert [t["number"] for t in await api.create("general", "next")] == [2]


async def test_the_key_is_trimmed(api: Api, callback: dict[str, str]) -> None:
    first = await api.ok("create", _body("  k-1 "))
    again = await api.ok("create", _body("k-1"))
    assert again["reused"] and again["tasks"] == first["tasks"]


async def test_replay_still_works_after_the_callback_completed(
    http: httpx.AsyncClient, runtime: Runtime, api: Api, callback: dict[str, str]
) -> None:
    first = await api.ok("create", _body())
    await admin(
        http,
        runtime,
        "callbacks/complete",
        {"workspaceId": runtime.workspace_id, "runId": "run_1", "callbackEffectId": "cb_1"},
    )
    again = await api.ok("create", _body())
    assert again["reused"] and again["tasks"] == first["tasks"]
    await api.fails("create", _body("k-new"), expect=409, code="callback_not_active")


@pytest.mark.parametrize(
    "change",
    [
        {"tasks": [{"title": "another title"}]},
        {"target": "#general:th_9"},
        {"channel": "eng"},
    ],
)
async def test_same_key_with_another_payload_conflicts(
    api: Api, callback: dict[str, str], change: dict[str, Any]
) -> None:
    await api.ok("create", _body())
    before = api.runtime.store.stats()
    await api.fails("create", {**_body(), **change}, expect=409, code="idempotency_conflict")
    assert api.runtime.store.stats() == before


async def test_another_parent_scope_under_the_same_key_conflicts(
    api: Api, callback: dict[str, str]
) -> None:
    a, b = await api.create("general", "a", "b")
    base = {"tasks": [{"title": "child"}], "idempotencyKey": "k-scope", **RUN}
    await api.ok("create", {**base, "parentTaskScope": {"kind": "task", "scopeId": a["scopeId"]}})
    await api.fails(
        "create",
        {**base, "parentTaskScope": {"kind": "task", "scopeId": b["scopeId"]}},
        expect=409,
        code="idempotency_conflict",
    )


async def test_key_outside_a_callback_is_refused(api: Api) -> None:
    body = {"channel": "general", "tasks": [{"title": "x"}], "idempotencyKey": "k"}
    await api.fails("create", body, expect=422, code="idempotency_key_requires_callback")
    await api.fails("create", {**body, **RUN}, expect=409, code="callback_not_active")
    assert api.runtime.store.stats()["tasks"] == 0


async def test_only_the_callback_responder_may_use_it(api: Api, callback: dict[str, str]) -> None:
    other = api.as_agent("agt_helper")
    await other.fails("create", _body(), expect=403, code="callback_responder_mismatch")


@pytest.mark.parametrize("key", ["", "   ", "é" * 65])
async def test_blank_or_oversized_keys_are_refused(
    api: Api, callback: dict[str, str], key: str
) -> None:
    error = await api.fails("create", _body(key), expect=422, code="validation_failed")
    assert "$.idempotencyKey" in error["fieldErrors"]


async def test_a_128_byte_key_is_accepted(api: Api, callback: dict[str, str]) -> None:
    assert (await api.ok("create", _body("é" * 64)))["reused"] is False


async def test_keys_are_scoped_to_the_callback(
    http: httpx.AsyncClient, runtime: Runtime, api: Api, callback: dict[str, str]
) -> None:
    await admin(
        http,
        runtime,
        "callbacks",
        {
            "workspaceId": runtime.workspace_id,
            "runId": "run_1",
            "callbackEffectId": "cb_2",
            "responderAgentId": runtime.agent_id,
        },
    )
    first = await api.ok("create", _body())
    other = await api.ok("create", {**_body(), "callbackEffectId": "cb_2"})
    assert other["reused"] is False
    assert other["tasks"][0]["number"] != first["tasks"][0]["number"]


# Every default of a new task a caller can spell out, camelCase as on the wire.
SPELLED_DEFAULTS: dict[str, Any] = {
    "description": "",
    "labels": [],
    "status": "todo",
    "checklist": [],
    "urls": [],
}


@pytest.mark.parametrize("spelled_first", [False, True])
async def test_defaults_written_out_replay_the_same_intent(
    api: Api, callback: dict[str, str], spelled_first: bool
) -> None:
    plain = _body(tasks=[{"title": "from callback"}])
    spelled = _body(tasks=[{"title": "from callback", **SPELLED_DEFAULTS}])
    first = await api.ok("create", spelled if spelled_first else plain)
    again = await api.ok("create", plain if spelled_first else spelled)
    assert again["reused"] is True and again["tasks"] == first["tasks"]
    detail = await api.ok("get", {"channel": "general", "number": 1})
    assert detail["task"]["description"] is None and detail["task"]["status"] == "todo"


async def test_a_checklist_item_done_false_is_the_default(
    api: Api, callback: dict[str, str]
) -> None:
    first = await api.ok("create", _body(tasks=[{"title": "t", "checklist": [{"text": "a"}]}]))
    again = await api.ok(
        "create", _body(tasks=[{"title": "t", "checklist": [{"text": "a", "done": False}]}])
    )
    assert again["reused"] is True and again["tasks"] == first["tasks"]


@pytest.mark.parametrize(
    "different",
    [
        {"status": "in_progress"},
        {"description": " "},
        {"labels": ["x"]},
        {"checklist": [{"text": "a", "done": True}]},
    ],
)
async def test_a_real_difference_still_conflicts(
    api: Api, callback: dict[str, str], different: dict[str, Any]
) -> None:
    await api.ok("create", _body(tasks=[{"title": "from callback"}]))
    await api.fails(
        "create",
        _body(tasks=[{"title": "from callback", **different}]),
        expect=409,
        code="idempotency_conflict",
    )


async def test_a_batch_with_defaults_written_out_is_still_title_only(api: Api) -> None:
    body = {"channel": "general", "tasks": [{"title": "a", "status": "todo"}, {"title": "b"}]}
    assert [t["number"] for t in (await api.ok("create", body))["tasks"]] == [1, 2]
