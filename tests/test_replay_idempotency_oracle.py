"""The idempotency checker gives, call for call, what it gave before it was made cheaper: fed the
same calls, it and the oracle (tests/idempotency_oracle.py, the checker as it was) give the same
groups, hint checks, counts and findings, for calls of any shape: hostile result shapes
(``changed``/``unchanged``/``tasks`` that are null, a string, ``true`` or nested lists; task
numbers that are ``true``, ``"1"``, ``1.0``, ``[1]``), floats that equal integers in payloads
and identities, keys inside and outside a workflow callback, failed and unfinished calls, bodies
that are not objects, erased payloads, context missing or not a string, and repeats inside and
beyond a small repeat window."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay import _idempotency
from agentteam_task_bridge.replay._idempotency import _Checker, declared_hints
from agentteam_task_bridge.replay._source import open_journals
from agentteam_task_bridge.replay._story import CallStory, SessionInfo, iter_stories

from . import idempotency_oracle
from .fleet_helpers import write_idempotency_fleet
from .replay_helpers import bare_record

ERASED = {"erased": True}
LONG = "t" * 300  # a payload and a request longer than the checker keeps as they are
# Few values of each, most of them well formed, so that calls repeat, keys meet again and claims
# land on known tasks; the hostile shapes among them.
NUMBER = st.sampled_from([1, 1, 1, 2, 2, 1.0, 2.0, True, "1", None, [1], 1.5, -0.0])
CHANNEL = st.sampled_from(["eng", "eng", "eng", "ops", 5, None])
LISTED = st.one_of(
    st.lists(NUMBER, max_size=2),
    st.lists(NUMBER, max_size=2),
    st.sampled_from([None, "1", True, 1, [[1]], {"a": [1]}]),
)
TASK = st.one_of(
    st.fixed_dictionaries(
        {"number": NUMBER, "channel": CHANNEL, "scope_id": st.sampled_from(["tsk_1", "tsk_2"])}
    ),
    st.fixed_dictionaries(
        {"number": NUMBER},
        optional={"channel": CHANNEL, "scope_id": st.sampled_from([None, 1.0, 1])},
    ),
    st.sampled_from(["tsk_1", 1, None, [1]]),
)
CLAIMED = st.sampled_from([[1], [True], [1.0], [], [2], [1, 2]])
DATA = st.one_of(
    st.fixed_dictionaries(
        {
            "claimed": st.booleans(),
            "channel": st.just("eng"),
            "changed": CLAIMED,
            "unchanged": CLAIMED,
            "reused": st.booleans(),
            "tasks": st.lists(TASK, max_size=2),
        }
    ),
    st.fixed_dictionaries(
        {
            "changed": st.one_of(LISTED, st.booleans()),
            "unchanged": LISTED,
            "tasks": st.lists(TASK, max_size=2),
            "reused": st.sampled_from([True, False]),
            "claimed": st.sampled_from([True, False]),
            "channel": st.just("eng"),
        }
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "changed": st.one_of(LISTED, st.booleans(), st.just("yes")),
            "unchanged": LISTED,
            "tasks": st.one_of(st.lists(TASK, max_size=3), st.sampled_from([None, "x", True])),
            "reused": st.sampled_from([True, False, 1, "true", None]),
            "claimed": st.sampled_from([True, False, 1, None, "true"]),
            "channel": CHANNEL,
        },
    ),
    st.sampled_from([None, "text", ["a"], 1]),
)
BODY = st.one_of(
    st.fixed_dictionaries(
        {"channel": st.just("eng")},
        optional={
            "number": NUMBER,
            "numbers": st.lists(NUMBER, max_size=2),
            "idempotencyKey": st.sampled_from(["k1", "k2"]),
            "workflowRunId": st.just("run"),
            "callbackEffectId": st.just("cb"),
            "tasks": st.sampled_from([[{"title": "t"}], [{"title": "t", "priority": 1.0}]]),
            "claimed": st.booleans(),
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "channel": CHANNEL,
            "number": NUMBER,
            "numbers": st.one_of(st.lists(NUMBER, max_size=3), st.sampled_from([None, "1", 1])),
            "idempotencyKey": st.sampled_from(["k1", "k2", 5]),
            "workflowRunId": st.sampled_from(["run", "", None]),
            "callbackEffectId": st.sampled_from(["cb", "", None]),
            "priority": st.sampled_from([1, 1.0, 1.5, 1e300, "1"]),
        },
    ),
    st.sampled_from([None, ["x"], "text", 1.0]),
)
REQUEST = st.builds(
    lambda route, body: journal.UpstreamRequest(method=route[0], route=route[1], body=body),
    st.sampled_from(
        [("POST", "/tasks"), ("POST", "/tasks"), ("GET", "/tasks/get"), ("post", "/tasks/claim")]
    ),
    BODY,
)
OUTCOME = st.one_of(
    st.builds(lambda d: journal.CallResult(result={"data": d}), DATA),
    st.builds(lambda d: journal.CallResult(result={"data": d}), DATA),
    st.sampled_from(
        [
            journal.CallResult(result="text"),
            ERASED,
            journal.CallError(error_code="idempotency_conflict", retryable=False, message="m"),
            journal.CallError(error_code="outcome_unknown", retryable=True, message="m"),
            journal.CallRejected(error_code="idempotency_conflict", message="m"),
            journal.CallRejected(error_code="invalid_arguments", message="m"),
            journal.CallCancelled(reason="client"),
            None,  # no outcome: the journal ends first
        ]
    ),
)
INJECTED = st.one_of(
    st.just([("workspace_id", "ws_1"), ("agent_id", "agt_1")]),
    st.just(
        [
            ("workspace_id", "ws_1"),
            ("agent_id", "agt_2"),
            ("workflow_run_id", "run"),
            ("callback_effect_id", "cb"),
        ]
    ),
    st.lists(
        st.tuples(
            st.sampled_from(["workspace_id", "agent_id", "workflow_run_id", "callback_effect_id"]),
            st.sampled_from(["ws_1", "agt_1", "run", "cb", "", None, 5]),
        ),
        max_size=4,
    ),
)
# What a call is but for its outcome: calls drawn from a few of these repeat each other.
CALL = st.fixed_dictionaries(
    {
        "tool": st.sampled_from(
            [
                "task_create",
                "task_create",
                "task_set_claim",
                "task_set_claim",
                "task_update",
                "task_checkpoint",
                "task_delete",
                "task_get",
                "task_list",
                None,
            ]
        ),
        "key": st.sampled_from([None, " k1 ", "k2", 5]),
        "received": st.sampled_from([True, True, True, False, "erased"]),
        "injected": st.one_of(INJECTED, INJECTED, st.sampled_from([None, "erased"])),
        "requests": st.one_of(
            st.lists(REQUEST, min_size=1, max_size=1), st.lists(REQUEST, max_size=2)
        ),
        "answered": st.booleans(),
        "session": st.sampled_from([None, "ws_s", "agt_s"]),
        "journal": st.sampled_from(["j1", "j1", "j2"]),
    }
)
WELL_FORMED = st.fixed_dictionaries(
    {
        "tool": st.sampled_from(["task_create", "task_set_claim", "task_update"]),
        "key": st.sampled_from([None, "k1"]),
        "received": st.just(True),
        "injected": st.sampled_from(
            [
                [("workspace_id", "ws_1"), ("agent_id", "agt_1")],
                [("workflow_run_id", "run"), ("callback_effect_id", "cb")],
            ]
        ),
        "requests": st.builds(
            lambda body: [journal.UpstreamRequest(method="POST", route="/tasks", body=body)],
            st.fixed_dictionaries(
                {"channel": st.just("eng")},
                optional={
                    "numbers": st.sampled_from([[1], [1, 2]]),
                    "idempotencyKey": st.just("k1"),
                    "workflowRunId": st.just("run"),
                    "callbackEffectId": st.just("cb"),
                    "tasks": st.sampled_from([[{"title": "t"}], [{"title": "t", "priority": 1.0}]]),
                },
            ),
        ),
        "answered": st.just(True),
        "session": st.just("agt_s"),
        "journal": st.just("j1"),
    }
)
KEYED_CREATE = st.builds(
    lambda body, received: {
        "tool": "task_create",
        "key": received,
        "received": True,
        "injected": [("workflow_run_id", "run"), ("callback_effect_id", "cb")],
        "requests": [journal.UpstreamRequest(method="POST", route="/tasks", body=body)],
        "answered": True,
        "session": "agt_s",
        "journal": "j1",
    },
    st.fixed_dictionaries(
        {
            "channel": st.just("eng"),
            "tasks": st.sampled_from(
                [
                    [{"title": "t", "priority": 1}],
                    [{"title": "t", "priority": 1.0}],
                    [{"title": LONG, "priority": 1}],  # kept as a digest, signed as one
                    [{"title": LONG, "priority": 1.0}],
                ]
            ),
            "workflowRunId": st.just("run"),
            "callbackEffectId": st.just("cb"),
        },
        optional={"idempotencyKey": st.just("k1"), "priority": st.sampled_from([1, 1.0, 2, 2.5])},
    ),
    st.sampled_from(["k1", None]),
)
CLAIM = st.builds(
    lambda numbers: {
        "tool": "task_set_claim",
        "key": None,
        "received": True,
        "injected": [("workspace_id", "ws_1"), ("agent_id", "agt_1")],
        "requests": [
            journal.UpstreamRequest(
                method="POST", route="/tasks/set-claim", body={"channel": "eng", "numbers": numbers}
            )
        ],
        "answered": True,
        "session": None,
        "journal": "j1",
    },
    st.sampled_from([[1], [1, 2], [1.0]]),
)
CALLS = st.lists(st.one_of(CALL, WELL_FORMED, KEYED_CREATE, CLAIM), min_size=1, max_size=4).flatmap(
    lambda kinds: st.lists(
        st.builds(
            lambda kind, outcome: {**kind, "outcome": outcome}, st.sampled_from(kinds), OUTCOME
        ),
        min_size=4,
        max_size=30,
    )
)


def _story(n: int, call: dict[str, Any]) -> CallStory:
    jid = call["journal"]
    session = None
    if call["session"] is not None:
        session = SessionInfo(
            journal_id=jid, session_id="s", seq=1, started_at="2026-12-04T00:00:00Z"
        )
        session.workspace_id = "ws_s" if call["session"] == "ws_s" else None
        session.agent_id = "agt_s"
    story = CallStory(jid, f"c{n}", "s", session)
    events: list[tuple[str, Any]] = []
    if call["received"]:
        arguments = {} if call["key"] is None else {"idempotency_key": call["key"]}
        received = (
            ERASED if call["received"] == "erased" else journal.CallReceived(arguments=arguments)
        )
        events.append(("call_received", received))
    if call["injected"] is not None:
        fields = [] if call["injected"] == "erased" else call["injected"]
        injected = journal.ContextInjected(
            fields=[journal.InjectedField(name=k, source="env:X", value=v) for k, v in fields]
        )
        events.append(("context_injected", ERASED if call["injected"] == "erased" else injected))
    for request in call["requests"]:
        events.append(("upstream_request", request))
        if call["answered"]:
            events.append(("upstream_response", journal.UpstreamResponse(status=200, body={})))
    outcome = call["outcome"]
    if outcome is ERASED:
        events.append(("call_result", ERASED))
    elif outcome is not None:
        events.append((outcome.kind, outcome))
    for seq, (kind, payload) in enumerate(events or [("call_received", ERASED)], 100 * n + 1):
        story.add(bare_record(seq, kind, payload, call["tool"], journal_id=jid, call_id=f"c{n}"))
    return story


def _both(calls: list[dict[str, Any]], window: int) -> tuple[Any, Any]:
    return _fed([_story(n, call) for n, call in enumerate(calls)], window)


def _fed(stories: list[CallStory], window: int) -> tuple[Any, Any]:
    hints = declared_hints()
    with (
        mock.patch.object(_idempotency, "REPEAT_WINDOW", window),
        mock.patch.object(idempotency_oracle, "REPEAT_WINDOW", window),
    ):
        checker, oracle = _Checker(hints), idempotency_oracle.OracleChecker(hints)
        for story in stories:
            checker.feed(story)
            oracle.feed(story)
    return msgspec.to_builtins(checker.result()), msgspec.to_builtins(oracle.result())


@settings(max_examples=300, deadline=None)
@given(CALLS, st.sampled_from([1, 3, 65_536]))
def test_the_checker_gives_what_the_oracle_gives(calls: list[dict[str, Any]], window: int) -> None:
    checked, expected = _both(calls, window)
    assert checked == expected


def test_the_generated_calls_reach_every_finding_and_verdict() -> None:
    """The strategy above is worth its examples: over a fixed draw the oracle reports every rule
    and the checks count repeats, safe and unsafe, and key groups of every kind."""
    seen: set[str] = set()
    counts = {"safe": 0, "unsafe": 0, "conflicts": 0, "replays": 0, "claim_repeats": 0}

    @settings(max_examples=500, deadline=None, database=None, derandomize=True)
    @given(CALLS)
    def draw(calls: list[dict[str, Any]]) -> None:
        checked, expected = _both(calls, 3)
        assert checked == expected
        seen.update(f["rule"] for f in expected["findings"])
        counts["safe"] += sum(h["safe"] for h in expected["hints"])
        counts["unsafe"] += sum(h["unsafe"] for h in expected["hints"])
        counts["conflicts"] += sum(g["conflicts"] for g in expected["groups"])
        counts["replays"] += sum(g["replays"] for g in expected["groups"])
        counts["claim_repeats"] += expected["claim_repeats"]

    draw()
    assert seen == {
        "key_outside_callback",
        "conflict_not_reported",
        "replay_allocated_numbers",
        "replay_identities_differ",
        "replay_not_reused",
        "claim_repeat_changed",
        "claim_state_wrong",
        "idempotent_hint_unsafe",
    }
    assert all(counts.values()), counts


def _call(tool: str, body: Any, data: Any, route: str = "/tasks") -> dict[str, Any]:
    return {
        "tool": tool,
        "key": None,
        "received": True,
        "injected": [("workspace_id", "ws_1"), ("agent_id", "agt_1")],
        "requests": [journal.UpstreamRequest(method="POST", route=route, body=body)],
        "answered": True,
        "outcome": journal.CallResult(result={"data": data}),
        "session": None,
        "journal": "j1",
    }


KEYED = {"channel": "eng", "idempotencyKey": "k", "workflowRunId": "r", "callbackEffectId": "c"}
UPDATE = _call("task_update", {"channel": "eng", "number": 1}, {"changed": False})


def _create(
    priority: object, number: object, scope: object, reused: bool, title: str = "t"
) -> dict[str, Any]:
    body = {**KEYED, "tasks": [{"title": title, "priority": priority}]}
    task = {"channel": "eng", "number": number, "scope_id": scope}
    call = _call("task_create", body, {"reused": reused, "tasks": [task]})
    call["injected"] = [*call["injected"], ("workflow_run_id", "r"), ("callback_effect_id", "c")]
    return call


def _claim(changed: list[Any]) -> dict[str, Any]:
    body = {"channel": "eng", "numbers": [1]}
    data = {"claimed": True, "channel": "eng", "changed": changed, "unchanged": []}
    return _call("task_set_claim", body, data)


# (calls, what the result must hold besides equality with the oracle)
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "a payload's 1.0 equals its 1": (
        [_create(1, 1, "s1", False), _create(1.0, 1, "s1", True)],
        {"findings": [], "replays": 2},
    ),
    "a long payload's 1.0 equals its 1": (
        [_create(1, 1, "s1", False, LONG), _create(1.0, 1, "s1", True, LONG)],
        {"findings": [], "replays": 2},
    ),
    "a long payload's 1.5 is not its 1": (
        [_create(1, 1, "s1", False, LONG), _create(1.5, 1, "s1", True, LONG)],
        {"findings": ["conflict_not_reported"], "replays": 1},
    ),
    "a replay's number 1.0 and scope 1.0 equal 1": (
        [_create(1, 1, 1, False), _create(1, 1.0, 1.0, True)],
        {"findings": [], "replays": 2},
    ),
    "a replay's number true is not 1": (
        [_create(1, 1, "s1", False), _create(1, True, "s1", True)],
        {"findings": ["replay_allocated_numbers"], "replays": 2},
    ),
    "a payload's 1.5 is not its 1": (
        [_create(1, 1, "s1", False), _create(1.5, 1, "s1", True)],
        {"findings": ["conflict_not_reported"], "replays": 1},
    ),
    "a claim's changed true does not change task 1": (
        [UPDATE, _claim([True]), UPDATE],
        {"findings": [], "repeats": 1},
    ),
    "a claim's changed 1.0 changes task 1": (
        [UPDATE, _claim([1.0]), UPDATE],
        {"findings": [], "repeats": 0},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_store_s_reading_holds_case_by_case(name: str) -> None:
    calls, holds = CASES[name]
    checked, expected = _both(calls, 65_536)
    assert checked == expected
    assert [f["rule"] for f in checked["findings"]] == holds["findings"]
    if "replays" in holds:
        assert sum(g["replays"] + g["created"] for g in checked["groups"]) == holds["replays"]
    if "repeats" in holds:
        update = next(h for h in checked["hints"] if h["tool"] == "task_update")
        assert update["repeats"] == holds["repeats"]


@pytest.mark.parametrize("window", [3, 65_536])
def test_journals_written_and_read_back_give_what_the_oracle_gives(
    tmp_path: Path, window: int
) -> None:
    """Journals written by the journal's writer (the fleet's idempotency journals: every rule
    broken somewhere), read back as ``report`` reads them."""
    with open_journals(write_idempotency_fleet(tmp_path)) as journals:
        stories = list(iter_stories(journals.records(None), in_order=True))
    checked, expected = _fed(stories, window)
    assert checked == expected
    assert checked["findings"] and checked["groups"] and checked["claim_repeats"]
