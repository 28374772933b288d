"""Fuzzing the MCP surface of the real bridge: hypothesis tool calls and a malformed-frame corpus.

One bridge serves the whole module (through a trio loop on a thread, so that hypothesis can drive
a synchronous property and shrink what fails). Every frame and call must be answered with the
right protocol or tool error (or, for what is not a request, with nothing), the bridge must stay
alive and keep stdout pure JSON-RPC, and the journal must hold every tool answer it gave.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings

from tools.reliability import fuzz
from tools.reliability.audit import audit_journal
from tools.reliability.portal import Portal, background
from tools.reliability.stand import Stand, open_stand
from tools.reliability.wire import RawBridge

CASES = fuzz.frame_cases()
EXAMPLES = 150


@dataclass
class Fuzzed:
    stand: Stand
    raw: RawBridge
    portal: Portal
    journal: Path
    frame_answers: dict[str, dict[str, Any] | None]


async def _send_corpus(raw: RawBridge) -> dict[str, dict[str, Any] | None]:
    """Send every frame, each followed by a ping that must be answered (the bridge is alive)."""
    for case in CASES:
        await raw.send(case.frame)
        ping = await raw.request("ping")
        assert "result" in ping, (case.name, ping)
    await trio.sleep(1.0)  # a late answer to a known-bug frame would show up by now
    return {
        case.name: raw.transcript.answers.get(case.request_id)
        for case in CASES
        if case.request_id is not None
    }


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    directory = tmp_path_factory.mktemp("fuzz")
    journal = directory / "journal.db"

    @asynccontextmanager
    async def setup() -> AsyncIterator[tuple[Stand, RawBridge, dict[str, Any]]]:
        async with open_stand(directory) as stand, stand.bridge(journal, client_name="fuzz") as raw:
            raw.answer_timeout = 20.0
            yield stand, raw, await _send_corpus(raw)

    with background(setup) as ((stand, raw, answers), portal):
        yield Fuzzed(stand, raw, portal, journal, answers)


def _case_param(case: fuzz.FrameCase) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=case.known_bug)] if case.known_bug else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_case_param(c) for c in CASES if c.request_id is not None])
def test_each_malformed_frame_gets_the_right_answer(fuzzed: Fuzzed, case: fuzz.FrameCase) -> None:
    assert fuzz.check_frame_answer(case, fuzzed.frame_answers[case.name]) == []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(call=fuzz.tool_calls())
def test_fuzzed_tool_calls_get_well_formed_answers(fuzzed: Fuzzed, call: fuzz.ToolCall) -> None:
    answer = fuzzed.portal.run(partial(fuzzed.raw.call, call.name, call.arguments, meta=call.meta))
    assert fuzz.check_tool_answer(call, answer) == []


def test_the_bridge_survived_and_journaled_every_answer(fuzzed: Fuzzed) -> None:
    raw = fuzzed.raw
    assert raw.process.returncode is None
    assert raw.transcript.violations == []  # stdout carried nothing but JSON-RPC
    report = audit_journal(fuzzed.journal, answers={"fuzz": raw.transcript.answers})
    assert report.ok, report.findings[:20]
    tool_answers = [a for a in raw.transcript.answers.values() if "isError" in a.get("result", {})]
    assert report.answers_checked == len(tool_answers) > EXAMPLES // 2
    assert "Traceback" not in raw.stderr()


def test_a_call_without_arguments_keeps_the_journal_readable(fuzzed: Fuzzed) -> None:
    """On the module's bridge (one process for the whole corpus, as the fixture says)."""
    raw = fuzzed.raw
    answer = fuzzed.portal.run(partial(raw.request, "tools/call", {"name": "task_list"}))
    assert answer["result"]["structuredContent"]["error"]["code"] == "invalid_arguments"
    report = audit_journal(fuzzed.journal, answers={raw.client_name: raw.transcript.answers})
    assert report.ok, report.findings


def test_a_deprecated_name_without_arguments_gets_a_tool_error(fuzzed: Fuzzed) -> None:
    answer = fuzzed.portal.run(partial(fuzzed.raw.request, "tools/call", {"name": "create_tasks"}))
    assert answer["result"]["structuredContent"]["error"]["code"] == "deprecated_tool"
