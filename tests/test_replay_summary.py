"""``CallStory.summary`` finds a call's line in one pass over its events; it must say what the
story's properties say one by one, for calls of every shape and for events in any order (a
hostile or damaged journal's calls need not be the bridge's)."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.journal import (
    CallCancelled,
    CallError,
    CallResult,
    DeprecatedUsage,
    Payload,
    Record,
)
from agentteam_task_bridge.replay._source import open_journals
from agentteam_task_bridge.replay._story import CallStory, CallSummary, iter_stories
from tools.bench.bench_replay import generate


def _by_properties(story: CallStory) -> CallSummary:
    """The line as the properties give it, one scan of the events each."""
    first, last = story.records[0], story.records[-1]
    s = story.session
    res = story.result
    return CallSummary(
        journal_id=story.journal_id,
        call_id=story.call_id,
        session_id=story.session_id,
        tool=story.tool,
        requested_tool=story.requested_tool,
        agent_id=story.injected.get("agent_id") or (s.agent_id if s else None),
        workspace_id=story.injected.get("workspace_id") or (s.workspace_id if s else None),
        client_name=s.client_name if s else None,
        request_id=first.jsonrpc_request_id,
        first_seq=first.seq,
        last_seq=last.seq,
        started_at=first.ts_wall,
        ended_at=last.ts_wall,
        status=story.status,
        error_code=story.error_code,
        in_doubt=story.in_doubt,
        bridge_ms=story.bridge_ms,
        upstream_ms=story.upstream_ms,
        upstream_requests=len(story.all("upstream_request")),
        http_status=story.responses[-1].status if story.responses else None,
        token_refreshes=len(story.all("token_refreshed")),
        truncated=bool(res and res.truncated),
        deprecated_uses=len(story.all("deprecated_usage")),
        mutation=story.mutation,
        channel=story.channel,
    )


@pytest.fixture(scope="module")
def stories(tmp_path_factory: pytest.TempPathFactory) -> list[CallStory]:
    path = Path(tmp_path_factory.mktemp("summary")) / "j.db"
    generate(path, 4_000)
    with open_journals([path]) as journals:
        found = list(iter_stories(journals.records(None)))
    # Events the generator does not write, each as the next event of one of its calls.
    extra: list[Payload] = [
        CallCancelled(reason="client"),
        CallError(error_code="outcome_unknown", retryable=False, message="?"),
        CallError(error_code="internal_error", retryable=False, message="?"),
        CallResult(result={"data": {"task": {"channel": "ops"}}}, truncated=True),
        CallResult(result={"data": {"channel": "qa"}}),
        DeprecatedUsage(use_kind="tool_name", old_name="tasks_list"),
    ]
    for i, payload in enumerate(extra * 20):
        story = found[i * 7 % len(found)]
        last = story.records[-1]
        story.add(_event(last, payload))
    return found


def _event(after: Record, payload: Payload) -> Record:
    return msgspec.structs.replace(after, seq=after.seq + 1, kind=payload.kind, payload=payload)


def test_every_generated_call_has_the_same_line(stories: list[CallStory]) -> None:
    assert len(stories) > 500
    assert {s.summary().status for s in stories} >= {"result", "error", "rejected"}
    for story in stories:
        assert story.summary() == _by_properties(story)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), picks=st.integers(1, 6))
def test_calls_of_any_shape_have_the_same_line(
    stories: list[CallStory], seed: int, picks: int
) -> None:
    """Events of a few calls mixed, dropped, repeated and shuffled into one story."""
    rng = random.Random(seed)
    pool = [r for story in rng.sample(stories, picks) for r in story.records]
    chosen = rng.choices(pool, k=rng.randint(1, len(pool) + 2))
    base = stories[rng.randrange(len(stories))]
    session = base.session if rng.random() < 0.8 else None
    story = CallStory(base.journal_id, base.call_id, base.session_id, session)
    for record in chosen:
        story.add(record)
    assert story.summary() == _by_properties(story)
