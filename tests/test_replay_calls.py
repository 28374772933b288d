"""`replay.list_calls` filters; `replay.show_call` tells one call's whole story."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentteam_task_bridge import replay

from .replay_helpers import Built, everyday_journal

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers


def tools(listed: replay.CallList) -> list[str | None]:
    return [c.tool for c in listed.calls]


def test_every_call_is_listed_in_journal_order(everyday_journal: Built) -> None:
    listed = replay.list_calls([everyday_journal.path])
    assert listed.scanned == listed.matched == 18
    seqs = [c.first_seq for c in listed.calls]
    assert seqs == sorted(seqs)
    first = listed.calls[0]
    assert (first.tool, first.status, first.mutation, first.channel) == (
        "task_create",
        "result",
        True,
        "general",
    )
    assert first.agent_id == "agt_local" and first.client_name == "agentteam-tests"


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (replay.CallFilter(tool="task_update"), ["task_update", "task_update"]),
        (replay.CallFilter(status="rejected"), ["task_get", "nope", "list_tasks"]),
        (replay.CallFilter(error_code="task_not_found"), ["task_get"]),
        (replay.CallFilter(status="error"), ["task_get", "task_create"]),
        (replay.CallFilter(tool="list_tasks"), ["list_tasks"]),  # the name the model used
        (replay.CallFilter(agent="agt_helper"), []),
        (replay.CallFilter(since=datetime.now(UTC) + timedelta(days=1)), []),
        (replay.CallFilter(until=datetime.now(UTC) - timedelta(days=1)), []),
    ],
)
def test_filters(everyday_journal: Built, where: replay.CallFilter, expected: list[str]) -> None:
    assert tools(replay.list_calls([everyday_journal.path], where)) == expected


def test_session_filter_and_limit(everyday_journal: Built) -> None:
    everything = replay.list_calls([everyday_journal.path])
    session = everything.calls[0].session_id
    assert (
        replay.list_calls([everyday_journal.path], replay.CallFilter(session=session)).matched == 18
    )
    assert (
        replay.list_calls([everyday_journal.path], replay.CallFilter(session="nope")).matched == 0
    )
    first_three = replay.list_calls([everyday_journal.path], limit=3)
    assert first_three.calls == everything.calls[:3] and first_three.matched == 18


def test_an_unknown_status_is_an_input_error() -> None:
    with pytest.raises(replay.ReplayInputError, match="unknown status"):
        replay.CallFilter(status="bogus")


def test_show_tells_a_refreshed_call_from_request_to_answer(everyday_journal: Built) -> None:
    [listed] = replay.list_calls(
        [everyday_journal.path], replay.CallFilter(tool="task_list", status="result"), limit=1
    ).calls
    story = replay.show_call([everyday_journal.path], listed.call_id)
    assert story.arguments == {"channel": "general"}
    assert {f["name"]: f["source"] for f in story.injected} == {
        "workspace_id": "env:AGENTTEAM_WORKSPACE_ID",
        "agent_id": "env:AGENTTEAM_AGENT_ID",
        "bearer_token": "command:AGENTTEAM_TOKEN_COMMAND",
    }
    assert [f["value"] for f in story.injected][2] == "[REDACTED]"
    first, replayed = story.exchanges
    assert (first.status, replayed.status) == (401, 200)
    assert first.body == replayed.body == {"channel": "general", "limit": 20}
    assert first.route.endswith("/agents/agt_local/runtime/tasks") and first.method == "GET"
    assert replayed.response_body["items"][0]["title"] == "first"
    assert story.token_refreshes[0]["source"] == "command:AGENTTEAM_TOKEN_COMMAND"
    assert story.outcome_kind == "call_result"
    assert story.outcome["data"]["channel"] == "general"
    offsets = [e.offset_ms for e in story.events]
    assert offsets == sorted(offsets) and offsets[0] == 0.0
    assert first.sent_ms <= (first.answered_ms or 0) <= replayed.sent_ms
    assert story.session is not None and story.session.protocol_version == "2025-11-25"
    assert story.summary.bridge_ms is not None and story.summary.upstream_ms is not None


def test_show_tells_what_the_model_saw_of_an_error_and_a_rejection(
    everyday_journal: Built,
) -> None:
    def story_of(**where: str) -> replay.CallDetail:
        [call] = replay.list_calls([everyday_journal.path], replay.CallFilter(**where)).calls
        return replay.show_call([everyday_journal.path], call.call_id)

    missing = story_of(error_code="task_not_found")
    assert missing.outcome == {
        "error": {
            "code": "task_not_found",
            "message": missing.outcome["error"]["message"],
            "retryable": False,
            "field_errors": {"$.number": "unknown task number"},
            "suggested_action": {"tool": "task_list", "arguments": {"channel": "general"}},
            "candidates": [{"channel": "general", "number": 1, "title": "first"}],
        }
    }
    assert missing.exchanges[0].status == 404
    rejected = story_of(error_code="invalid_arguments")
    assert rejected.exchanges == [] and rejected.injected == []
    assert rejected.outcome["error"]["field_errors"] == {"$.number": "Expected `int`, got `str`"}
    deprecated = story_of(tool="list_tasks")
    assert deprecated.deprecated[0]["old_name"] == "list_tasks"
    assert deprecated.deprecated[0]["replacement"] == "task_list"


def test_show_of_an_unknown_call_is_an_input_error(everyday_journal: Built) -> None:
    with pytest.raises(replay.ReplayInputError, match="no call"):
        replay.show_call([everyday_journal.path], "s000.1")
