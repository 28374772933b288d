"""`replay.rerun`: today's bridge against the recorded answers (or a live runtime), diffed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge import _call
from agentteam_task_bridge.bridge.testing import Fail, FailureKind, ScriptedTransport
from agentteam_task_bridge.journal import CallError
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import BridgeSession
from .bridge_inprocess import inprocess_bridge
from .replay_helpers import Built, drive, everyday_journal

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers


def test_today_s_bridge_answers_every_recorded_call_the_same(everyday_journal: Built) -> None:
    result = replay.rerun([everyday_journal.path], include_same=True)
    assert (result.same, result.differs, result.skipped) == (18, 0, 0), result.calls
    assert result.ok and result.mode == "recorded"
    assert {c.verdict for c in result.calls} == {"same"}
    # the refresh-and-replay went the same way, against the recorded 401 then 200
    [refreshed] = [c for c in result.calls if c.tool == "task_list"][:1]
    assert refreshed.recorded == refreshed.today == "result"


def test_a_changed_normalizer_is_found_call_by_call(
    everyday_journal: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = _call.Bridge._normalize

    def shouting(self: Any, spec: Any, body: Any, list_state: Any) -> Any:
        data, meta = honest(self, spec, body, list_state)
        for task in [data.get("task"), *data.get("tasks", []), *data.get("items", [])]:
            if isinstance(task, dict) and isinstance(task.get("title"), str):
                task["title"] = task["title"].upper()
        return data, meta

    monkeypatch.setattr(_call.Bridge, "_normalize", shouting)
    result = replay.rerun([everyday_journal.path])
    assert not result.ok and result.differs > 0
    first = result.calls[0]
    assert (first.tool, first.verdict) == ("task_create", "differs")
    [difference] = first.differences
    assert difference.path == "$.outcome.result.data.tasks[0].title"
    assert (difference.recorded, difference.today) == ("first", "FIRST")
    # calls whose results hold no title are not reported
    assert {c.tool for c in result.calls} >= {"task_create", "task_get", "task_update"}
    assert "task_delete" not in {c.tool for c in result.calls}


def test_a_changed_upstream_request_matches_no_recorded_answer(
    everyday_journal: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = _call.prepare

    def chatty(spec: Any, base: str, arguments: dict[str, Any], injected: Any) -> Any:
        if spec.name == "task_get":
            arguments = {**arguments, "verbose": True}
        return honest(spec, base, arguments, injected)

    monkeypatch.setattr(_call, "prepare", chatty)
    result = replay.rerun([everyday_journal.path], tool="task_get")
    assert result.differs == 2  # the one rejected locally never reaches upstream
    paths = {d.path: d for c in result.calls for d in c.differences}
    assert paths["$.upstream[0].body.verbose"].recorded == "<absent>"
    assert paths["$.upstream[1].status"].today == 502  # replay_unmatched


async def test_recorded_transport_failures_replay_the_same(tmp_path: Path) -> None:
    async def script(bridge_session: BridgeSession, rt: Runtime) -> None:
        await bridge_session.ok("task_create", {"channel": "general", "tasks": [{"title": "a"}]})
        rt.faults.arm(FaultSpec(kind="drop", op="get"))
        await bridge_session.fails(
            "task_get", {"channel": "general", "number": 1}, code="upstream_failure"
        )
        rt.faults.arm(FaultSpec(kind="drop_after_commit", op="create"))
        await bridge_session.fails(
            "task_create", {"channel": "general", "tasks": [{"title": "b"}]}, code="outcome_unknown"
        )

    built = await drive(tmp_path, script)
    result = await replay.rerun_async([built.path])
    assert (result.same, result.differs, result.skipped) == (3, 0, 0), result.calls


_GET = ("task_get", {"channel": "general", "number": 1})
_CREATE = ("task_create", {"channel": "general", "tasks": [{"title": "a"}]})


@pytest.mark.parametrize(
    ("kind", "call", "code"),
    [
        ("connect_refused", _GET, "upstream_unreachable"),
        ("connect_refused", _CREATE, "upstream_unreachable"),
        ("dropped_before_send", _GET, "upstream_unreachable"),
        ("dropped_before_send", _CREATE, "upstream_unreachable"),
        ("timeout_before_send", _GET, "upstream_timeout"),
        ("timeout_before_send", _CREATE, "upstream_timeout"),  # not outcome_unknown
        ("timeout_after_send", _GET, "upstream_timeout"),
        ("timeout_after_send", _CREATE, "outcome_unknown"),
        ("dropped_after_send", _GET, "upstream_failure"),  # a reset mid-exchange
        ("dropped_after_send", _CREATE, "outcome_unknown"),
        ("unusable_answer", _GET, "upstream_malformed"),  # a body over the size limit
        ("unusable_answer", _CREATE, "outcome_unknown"),
    ],
)
async def test_each_recorded_failure_kind_reruns_with_its_recorded_code_and_reason(
    tmp_path: Path, kind: FailureKind, call: tuple[str, dict[str, Any]], code: str
) -> None:
    path = tmp_path / "journal.db"
    reason = f"recorded: {kind} on 127.0.0.1"
    async with inprocess_bridge(path, ScriptedTransport([Fail(kind, reason)])) as (bridge, _):
        answer = await bridge.answer(*call, {}, 7)
    assert answer.envelope["error"]["code"] == code
    with journal.open_reader(path) as reader:
        [error] = [r.payload for r in reader.events(kind="call_error")]
    assert isinstance(error, CallError) and (error.error_code, error.reason) == (code, reason)

    result = await replay.rerun_async([path], include_same=True)
    [rerun] = result.calls
    assert rerun.verdict == "same", rerun.differences
    assert rerun.recorded == rerun.today == code


async def test_against_a_live_runtime_mutations_need_a_flag(
    everyday_journal: Built, file_runtime: Runtime
) -> None:
    env = file_runtime.bridge_env()
    reads = await replay.rerun_async([everyday_journal.path], against=file_runtime.url, env=env)
    assert reads.mode == "live" and reads.skipped == 11
    assert {c.reason for c in reads.calls if c.verdict == "skipped"} == {
        "a mutation: pass --allow-mutations to send it to a live runtime"
    }
    assert file_runtime.store.stats()["tasks"] == 0  # nothing was changed

    file_runtime.store.open_callback(file_runtime.workspace_id, "run_1", "cb_1", "agt_local")
    everything = await replay.rerun_async(
        [everyday_journal.path], against=file_runtime.url, env=env, allow_mutations=True
    )
    # Ids and timestamps are normalized; the same calls in the same order give the same answers,
    # except the list that met a 401 when recorded: the live runtime accepted it at once.
    assert (everything.same, everything.differs, everything.skipped) == (17, 1, 0)
    [changed] = everything.calls
    assert changed.tool == "task_list"
    assert changed.differences[0].path == "$.kinds[4]"
    assert (changed.differences[0].recorded, changed.differences[0].today) == (
        "token_refreshed",
        "call_result",
    )


def test_live_mode_needs_a_credential(everyday_journal: Built) -> None:
    with pytest.raises(replay.ReplayInputError, match="credential"):
        replay.rerun([everyday_journal.path], against="http://127.0.0.1:9", env={})


def test_normalization_keeps_error_codes_and_statuses_as_values() -> None:
    from agentteam_task_bridge.replay._diff import normalize

    for word in ("task_not_found", "task_deleted", "in_progress", "stale_update"):
        assert normalize(word) == word
    for generated in ("tsk_3f9a00bb12cd34ef", "atk_Xy-Z9_abcdefgh", "0123456789abcdef"):
        assert normalize(generated) == "<id>"
