"""The call flow against `httpx.MockTransport`: refresh-once, fail-closed, in-flight keys."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from agentteam_task_bridge.bridge._call import Bridge
from agentteam_task_bridge.bridge.testing import (
    MemoryJournal,
    ScriptedTokens,
    bridge_over,
    upstream_task,
)

TASK = upstream_task()


def make_bridge(
    handler: Callable[[httpx.Request], httpx.Response],
    journal: MemoryJournal,
    tokens: ScriptedTokens | None = None,
) -> tuple[Bridge, ScriptedTokens]:
    tokens = tokens or ScriptedTokens(["tok-1", "tok-2", "tok-3"])
    return bridge_over(handler, journal=journal, tokens=tokens), tokens


async def test_a_401_refreshes_once_and_replays_the_same_request() -> None:
    seen: list[tuple[str, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers["authorization"], request.content))
        if request.headers["authorization"] == "Bearer tok-1":
            return httpx.Response(401, json={"error": {"code": "token_expired", "message": "x"}})
        return httpx.Response(
            200,
            json={
                "checkpoint": {
                    "id": 1,
                    "summary": "s",
                    "author": "@a",
                    "createdAt": "2026-12-02T00:00:00Z",
                },
                "task": TASK,
            },
        )

    journal = MemoryJournal()
    bridge, tokens = make_bridge(handler, journal)
    result = await bridge.call(
        "task_checkpoint", {"channel": "general", "number": 1, "summary": "s"}, {}, 7
    )
    assert not result.is_error, result.structured_content
    assert [auth for auth, _ in seen] == ["Bearer tok-1", "Bearer tok-2"]
    assert seen[0][1] == seen[1][1]  # the same operation, replayed
    assert tokens.fetched == 2
    assert journal.kinds() == [
        "call_received",
        "context_injected",
        "upstream_request",
        "upstream_response",
        "token_refreshed",
        "upstream_request",
        "upstream_response",
        "call_result",
    ]
    durable = [kind for (e, d), kind in zip(journal.events, journal.kinds(), strict=True) if d]
    assert durable == ["upstream_request", "upstream_request", "call_result"]


async def test_a_second_401_is_unauthorized_with_no_third_attempt() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no"}})

    bridge, _ = make_bridge(handler, MemoryJournal())
    result = await bridge.call("task_get", {"channel": "general", "number": 1}, {}, 1)
    assert result.is_error and result.structured_content["error"]["code"] == "unauthorized"  # type: ignore[index]
    assert calls == 2


async def test_a_401_storm_refreshes_the_token_once() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["authorization"] == "Bearer tok-1":
            return httpx.Response(401, json={})
        return httpx.Response(200, json={"channel": "general", "items": []})

    bridge, tokens = make_bridge(handler, MemoryJournal())
    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(bridge.call, "task_list", {"channel": "general"}, {}, 1)
    assert tokens.fetched == 2


async def test_a_broken_journal_refuses_mutations_before_sending() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"channel": "general", "items": []})

    journal = MemoryJournal(broken=True)
    bridge, _ = make_bridge(handler, journal)
    result = await bridge.call(
        "task_create", {"channel": "general", "tasks": [{"title": "x"}]}, {}, 1
    )
    error = result.structured_content["error"]  # type: ignore[index]
    assert (error["code"], error["retryable"]) == ("journal_unavailable", True)
    unrecorded = {"recorded": False, "reason": "disk_full"}
    assert result.structured_content["meta"]["journal"] == unrecorded  # type: ignore[index]
    assert sent == []
    read = await bridge.call("task_list", {"channel": "general"}, {}, 2)
    assert not read.is_error and read.structured_content["meta"]["journal"] == unrecorded  # type: ignore[index]


async def test_the_same_key_in_flight_answers_idempotency_in_progress() -> None:
    release = trio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(
            200, json={"channel": "general", "parent": None, "tasks": [TASK], "reused": False}
        )

    class Slow(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await slow(request)

    journal = MemoryJournal()
    bridge = bridge_over(Slow(), journal=journal)
    meta = {"agentteam/workflow_run_id": "r", "agentteam/callback_effect_id": "c"}
    args = {"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": "k"}
    results: list[Any] = []

    async def first() -> None:
        results.append(await bridge.call("task_create", args, meta, 1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        second = await bridge.call("task_create", args, meta, 2)
        error = second.structured_content["error"]  # type: ignore[index]
        assert (error["code"], error["retryable"]) == ("idempotency_in_progress", True)
        release.set()
    assert not results[0].is_error
    assert journal.kinds().count("upstream_request") == 1


async def test_hidden_workflow_context_comes_only_from_meta() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            200, json={"channel": "general", "parent": None, "tasks": [TASK], "reused": False}
        )

    journal = MemoryJournal()
    bridge, _ = make_bridge(handler, journal)
    result = await bridge.call(
        "task_create",
        {"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": " k "},
        {"agentteam/workflow_run_id": "run_9", "agentteam/callback_effect_id": "cb_9"},
        1,
    )
    assert not result.is_error
    assert bodies == [
        {
            "channel": "general",
            "tasks": [{"title": "t"}],
            "idempotencyKey": "k",
            "workflowRunId": "run_9",
            "callbackEffectId": "cb_9",
        }
    ]
    no_meta = await bridge.call(
        "task_create",
        {"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": "k"},
        {},
        2,
    )
    assert no_meta.structured_content["error"]["code"] == "idempotency_key_requires_callback"  # type: ignore[index]
    assert len(bodies) == 1


def test_upstream_messages_name_fields_as_the_model_knows_them() -> None:
    from agentteam_task_bridge.bridge._errors import classify_upstream_error

    error = classify_upstream_error(
        409,
        {"error": {"code": "stale_update", "message": "Changed since `expectedUpdatedAt`."}},
        kind="mutation",
        retry_after=None,
    )
    assert error.message == "Changed since `expected_updated_at`."


@pytest.mark.parametrize(
    ("run", "callback", "refused"),
    [
        ("r" * 128, "c" * 128, []),
        ("r" * 129, "c", ["_meta.agentteam/workflow_run_id"]),
        ("😀" * 32, "数" * 42, []),  # 128 and 126 UTF-8 bytes
        (
            "😀" * 33,
            "数" * 43,
            ["_meta.agentteam/workflow_run_id", "_meta.agentteam/callback_effect_id"],
        ),
    ],
)
async def test_workflow_ids_are_measured_in_utf8_bytes_and_never_cut(
    run: str, callback: str, refused: list[str]
) -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            200, json={"channel": "general", "parent": None, "tasks": [TASK], "reused": False}
        )

    journal = MemoryJournal()
    bridge, _ = make_bridge(handler, journal)
    args = {"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": "k"}
    meta = {"agentteam/workflow_run_id": run, "agentteam/callback_effect_id": callback}
    result = await bridge.call("task_create", args, meta, 1)
    if refused:
        error = result.structured_content["error"]  # type: ignore[index]
        assert (error["code"], sorted(error["field_errors"])) == (
            "invalid_arguments",
            sorted(refused),
        )
        assert bodies == [] and "call_rejected" in journal.kinds()
    else:
        assert not result.is_error
        assert (bodies[0]["workflowRunId"], bodies[0]["callbackEffectId"]) == (run, callback)
