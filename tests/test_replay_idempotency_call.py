"""The idempotency check reads a call's events in one pass: what it finds equals what the
:class:`CallStory` properties say (the tool, the call received, the injected context, the
requests, the outcome, the result's data), for calls of any shape: erased payloads, several
outcomes, an old tool name, a second request, events missing or out of order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._idempotency import _Call
from agentteam_task_bridge.replay._story import CallStory, is_mutation

from .replay_helpers import bare_record

ERASED = {"erased": True}
PAYLOADS: dict[str, list[Any]] = {
    "call_received": [
        journal.CallReceived(arguments={"channel": "eng", "idempotency_key": " k "}),
        ERASED,
    ],
    "context_injected": [
        journal.ContextInjected(
            fields=[journal.InjectedField(name="workspace_id", source="env:X", value="ws_1")]
        ),
        ERASED,
    ],
    "upstream_request": [
        journal.UpstreamRequest(method="POST", route="/r", body={"channel": "eng", "number": 1}),
        journal.UpstreamRequest(method="GET", route="/r/get", body=["not", "an", "object"]),
        ERASED,
    ],
    "upstream_response": [journal.UpstreamResponse(status=200, body={}, duration_ms=1.0)],
    "call_result": [
        journal.CallResult(result={"data": {"changed": True}, "meta": {}}, duration_ms=1.0),
        journal.CallResult(result={"data": ["a list"]}, duration_ms=1.0),
        journal.CallResult(result="text", duration_ms=1.0),
        ERASED,
    ],
    "call_error": [
        journal.CallError(error_code="task_not_found", retryable=False, message="m"),
    ],
}
EVENT = st.sampled_from(sorted(PAYLOADS)).flatmap(
    lambda kind: st.tuples(
        st.just(kind), st.sampled_from(PAYLOADS[kind]), st.sampled_from([None, "", "old", "new"])
    )
)


@settings(max_examples=400, deadline=None)
@given(st.lists(EVENT, max_size=8))
def test_one_pass_reads_what_the_story_says(events: list[tuple[str, Any, str | None]]) -> None:
    story = CallStory("j", "c", "s", None)
    for seq, (kind, payload, tool) in enumerate(events, 1):
        story.add(bare_record(seq, kind, payload, tool))
    call = _Call(story)
    assert call.tool == story.tool
    assert call.received == story.received
    assert call.injected == story.injected
    assert call.requests == story.requests
    assert call.outcome == story.outcome
    assert call.mutation == story.mutation
    result = story.result
    data = result.result.get("data") if result and isinstance(result.result, dict) else None
    assert call.data == (data if isinstance(data, dict) else None)
    last = story.requests[-1].body if story.requests else None
    assert call.body == (last if isinstance(last, dict) else None)
    assert call.mutation == any(is_mutation(r) for r in story.requests)
