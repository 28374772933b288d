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
from agentteam_task_bridge.bridge._call_record import CallRecord, OutOfOrder
from agentteam_task_bridge.bridge._call_upstream import UpstreamStage
from agentteam_task_bridge.bridge.testing import (
    MemoryJournal,
    ScriptedTokens,
    bridge_over,
    upstream_task,
)
from agentteam_task_bridge.journal import (
    CallCancelled,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    TokenRefreshed,
    UpstreamRequest,
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
    from agentteam_task_bridge.bridge._upstream_errors import classify_upstream_error

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


async def test_an_event_out_of_the_call_grammar_fails_at_once_and_is_never_written() -> None:
    journal = MemoryJournal()
    call = CallRecord(journal, "s_test", "s_test.1", "task_get", 1)
    with pytest.raises(OutOfOrder, match="upstream_request after start"):
        await call.record(UpstreamRequest(method="GET", route="/x", body={}))
    with pytest.raises(OutOfOrder, match="call_result after received"):  # received goes first
        await call.record(CallResult(result={}, truncated=False, duration_ms=0.0))
    assert call.position == "start" and journal.kinds() == []
    assert await call.record(CallReceived(arguments={}))
    with pytest.raises(OutOfOrder, match="upstream_request after received"):
        await call.record(UpstreamRequest(method="GET", route="/x", body={}))
    with pytest.raises(OutOfOrder, match="call_error after received"):  # an error needs a stage
        await call.record(CallError(error_code="internal_error", retryable=False, message="m"))
    assert await call.record(CallRejected(error_code="unknown_tool", message="m"), durable=True)
    # The one outcome is in: a late cancellation changes nothing, any other event is a bug.
    assert not await call.record(CallCancelled(reason="late"))
    with pytest.raises(OutOfOrder, match="nothing \\(the call had ended\\)"):
        await call.record(ContextInjected(fields=[]))
    assert journal.kinds() == ["call_received", "call_rejected"]


async def test_the_call_flow_stepping_out_of_order_ends_in_an_internal_error_at_that_event(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    honest = UpstreamStage.exchange

    async def refreshed_too_early(self: UpstreamStage, call: CallRecord, *args: Any) -> Any:
        await call.record(TokenRefreshed(source="test", reason="before any request"))
        return await honest(self, call, *args)

    monkeypatch.setattr(UpstreamStage, "exchange", refreshed_too_early)
    sent: list[httpx.Request] = []
    journal = MemoryJournal()
    bridge, _ = make_bridge(
        lambda r: sent.append(r) or httpx.Response(200, json={"task": TASK}), journal
    )
    result = await bridge.call("task_get", {"channel": "general", "number": 1}, {}, 1)
    assert result.structured_content["error"]["code"] == "internal_error"  # type: ignore[index]
    assert sent == []  # failed at the event, before the request
    assert journal.kinds() == ["call_received", "context_injected", "call_error"]
    assert "OutOfOrder" in caplog.text
