"""Cancellation anywhere in a call leaves one journaled outcome and a journal that verifies.

The call is cancelled at its k-th scheduling point, for every k until it completes: during the
token command (trio's `run_process` raises an ExceptionGroup there), the journal's durable wait,
the upstream pool's wait, the send and the receive, the outcome's wait. The parts are real: the
token command is a process, the upstream is the reference runtime over loopback HTTP through the
bridge's own pool, the journal is SQLite with its worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge.bridge._context import CommandToken, Credentials
from agentteam_task_bridge.runtime import Runtime

from .bridge_inprocess import inprocess_bridge, kinds_of, verified

MAX_STEPS = 5000  # bounds one walk; a call takes about ten scheduling points
# The walk goes on past the first call that completes uncut: how many scheduling points a call
# takes varies with the machine's load (the token command's process, the journal's thread), so
# one short call must not end the walk before the points of a longer one were visited.
COMPLETIONS = 3
# The token command's process takes a varying number of scheduling points (3-6 here), so the
# k-th point of one call is not the k-th point of the next: the exchange's one point (the
# response's wait) can fall between two calls' k. A walk that did not cut a call there is walked
# again on a new journal; each walk is a few dozen calls.
MAX_WALKS = 40


class _CancelAtStep(trio.abc.Instrument):
    """Cancel `scope` once `task` has run `steps` steps (it then stands at an await point)."""

    def __init__(self, scope: trio.CancelScope, steps: int) -> None:
        self.scope = scope
        self.steps = steps
        self.task: trio.lowlevel.Task | None = None
        self.seen = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.seen += 1
            if self.seen == self.steps:
                self.scope.cancel()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("task_create", {"channel": "general", "tasks": [{"title": "c"}]}),
        ("task_get", {"channel": "general", "number": 1}),
    ],
)
async def test_a_call_cancelled_at_every_await_point_leaves_a_sound_journal(
    runtime: Runtime, tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    token = runtime.mint_token()
    command = CommandToken(f"printf %s {token}")
    for walk in range(MAX_WALKS):
        path = tmp_path / f"walk-{walk}.db"
        outcomes = await _walk(runtime, path, command, tool, arguments)
        stories = kinds_of(path)
        assert len(stories) == len(outcomes) + COMPLETIONS + 1
        for call_id, kinds in stories.items():
            assert kinds[-1] in ("call_result", "call_cancelled"), (call_id, kinds)
        # A cut after the outcome is on record (in its durable wait) leaves that outcome; how
        # many scheduling points that wait has depends on the journal's thread.
        assert sum(kinds[-1] == "call_cancelled" for kinds in stories.values()) > len(outcomes) // 2
        verified(path)  # every call closed, grammatical; the chain and checkpoints hold
        # The walk met the waits before the request (token command, journal) and the HTTP
        # exchange itself, as the journal shows (not a number of steps: see MAX_WALKS).
        cut = [kinds for kinds in stories.values() if kinds[-1] == "call_cancelled"]
        assert any("upstream_request" not in kinds for kinds in cut), stories
        if any("upstream_request" in kinds for kinds in cut):
            break
    else:
        pytest.fail(f"no walk of {MAX_WALKS} cut a call in its HTTP exchange")


async def _walk(
    runtime: Runtime, path: Path, command: CommandToken, tool: str, arguments: dict[str, Any]
) -> list[str]:
    """Cancel a call at its k-th scheduling point for k = 1, 2, ... until COMPLETIONS calls
    complete uncut; the cut calls' outcomes."""
    outcomes: list[str] = []
    async with inprocess_bridge(
        path,
        None,
        tokens=command,
        url=runtime.url,
        workspace_id=runtime.workspace_id,
        agent_id=runtime.agent_id,
    ) as (bridge, _):
        await bridge.call(
            "task_create", {"channel": "general", "tasks": [{"title": "seed"}]}, {}, 0
        )
        completed = 0
        for steps in range(1, MAX_STEPS):
            bridge.credentials = Credentials(command)  # the token command runs in every call
            scope = trio.CancelScope()
            cancel = _CancelAtStep(scope, steps)
            answered: list[Any] = []
            cancel.task = trio.lowlevel.current_task()  # the call runs in this task
            trio.lowlevel.add_instrument(cancel)
            try:
                with scope:
                    answered.append(await bridge.call(tool, arguments, {}, steps))
            finally:
                trio.lowlevel.remove_instrument(cancel)
            if not scope.cancelled_caught:
                assert answered and not answered[0].is_error, answered
                completed += 1
                if completed == COMPLETIONS:
                    return outcomes
                continue
            outcomes.append("cancelled")
    pytest.fail(f"the call never completed within {MAX_STEPS} steps")


async def test_a_call_cancelled_during_the_token_command_is_journaled(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    from agentteam_task_bridge import journal, replay

    from .bridge_harness import journal_calls, open_bridge

    started = tmp_path / "token-command-started"
    token = file_runtime.mint_token()
    # The first run hangs (until cancelled), later runs print the token at once.
    script = f"if [ -e {started} ]; then printf %s {token}; else touch {started}; exec sleep 60; fi"
    env = {**file_runtime.bridge_env(), "AGENTTEAM_TOKEN_COMMAND": f'sh -c "{script}"'}
    path = tmp_path / "j.db"
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        await bridge.cancel_in_flight(
            "task_get", {"channel": "general", "number": 1}, reached=started.exists
        )
        await bridge.ok("task_list", {"channel": "general"})  # the next call gets its token
    first, second = journal_calls(path).values()
    assert first == ["call_received", "context_injected", "call_cancelled"]
    assert second[-1] == "call_result"
    key = journal.load_key(
        tmp_path / "config" / "agentteam-bridge" / "journal-signing.key", create=False
    )
    result = replay.verify([path], key=key)
    assert result.ok, result.findings
