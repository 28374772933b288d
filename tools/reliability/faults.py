"""Upstream faults, injected by the reference runtime, and how the bridge must classify each.

Every scenario arms one fault for one operation and makes one call; the answer must carry the
contract's code and retryability (``bridge._errors``), the journal must show exactly the upstream
attempts expected (one; two only around a 401, whose first attempt had no effect), and the
runtime must hold exactly the side effects the fault allows - never one more, which would be the
bridge retrying a mutation on its own. A 401 storm and an idempotent retry after a lost answer
complete the set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .audit import read_journal, runtime_marked
from .stand import MARKER, Stand
from .wire import RawBridge

UPSTREAM_TIMEOUT_S = 0.5  # the bridge is launched with --upstream-timeout this
RUN_ID, CALLBACK_ID = "run-rel-1", "cb-rel-1"


@dataclass(frozen=True)
class Scenario:
    name: str
    tool: str  # "task_get" (a read) or "task_create" (a mutation)
    fault: dict[str, Any]  # FaultSpec fields; `op` is implied by the tool
    code: str | None  # the expected error code, None for success
    retryable: bool | None = None
    effects: int = 0  # tasks this call may leave in the runtime (mutations)
    attempts: int = 1  # upstream_request events journaled for the call
    retry_after: float | None = None
    keyed: bool = False  # task_create with an idempotency key inside a workflow callback


def _status(code: int, **extra: Any) -> dict[str, Any]:
    return {"kind": "status", "status": code, **extra}


_LATE = {"kind": "latency", "delay_ms": 1500}  # three times the bridge's upstream timeout
_READ, _CREATE = "task_get", "task_create"
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("read: latency beyond the timeout", _READ, _LATE, "upstream_timeout", True),
    Scenario("read: 503", _READ, _status(503), "upstream_unavailable", True),
    Scenario("read: 502", _READ, _status(502), "upstream_unavailable", True),
    Scenario("read: 500", _READ, _status(500), "upstream_failure", True),
    Scenario(
        "read: 429 with Retry-After",
        _READ,
        _status(429, retry_after_seconds=7),
        "rate_limited",
        True,
        retry_after=7,
    ),
    Scenario("read: dropped connection", _READ, {"kind": "drop"}, "upstream_failure", True),
    Scenario("read: malformed body", _READ, {"kind": "malformed"}, "upstream_malformed", True),
    Scenario(
        "read: one 401, refreshed, replayed", _READ, {"kind": "unauthorized"}, None, attempts=2
    ),
    Scenario(
        "read: 401 twice",
        _READ,
        {"kind": "unauthorized", "times": 2},
        "unauthorized",
        False,
        attempts=2,
    ),
    Scenario("create: latency beyond the timeout", _CREATE, _LATE, "outcome_unknown", False, 1),
    Scenario("create: 503", _CREATE, _status(503), "upstream_unavailable", True),
    Scenario("create: 500", _CREATE, _status(500), "outcome_unknown", False),
    Scenario(
        "create: 429 with Retry-After",
        _CREATE,
        _status(429, retry_after_seconds=3),
        "rate_limited",
        True,
        retry_after=3,
    ),
    Scenario(
        "create: dropped before the effect", _CREATE, {"kind": "drop"}, "outcome_unknown", False
    ),
    Scenario(
        "create: dropped after the commit",
        _CREATE,
        {"kind": "drop_after_commit"},
        "outcome_unknown",
        False,
        effects=1,
    ),
    Scenario(
        "create: malformed body after the commit",
        _CREATE,
        {"kind": "malformed"},
        "outcome_unknown",
        False,
        effects=1,
    ),
    Scenario(
        "create: one 401, refreshed, replayed",
        _CREATE,
        {"kind": "unauthorized"},
        None,
        effects=1,
        attempts=2,
    ),
    Scenario(
        "create: 401 twice",
        _CREATE,
        {"kind": "unauthorized", "times": 2},
        "unauthorized",
        False,
        attempts=2,
    ),
    Scenario(
        "create with a key: dropped after the commit",
        _CREATE,
        {"kind": "drop_after_commit"},
        "outcome_unknown",
        True,
        effects=1,
        keyed=True,
    ),
)


@dataclass
class Outcome:
    scenario: Scenario
    title: str
    request_id: int
    answer: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def _arguments(scenario: Scenario, title: str, number: int) -> dict[str, Any]:
    if scenario.tool == "task_get":
        return {"channel": "general", "number": number}
    arguments: dict[str, Any] = {"channel": "general", "tasks": [{"title": title}]}
    if scenario.keyed:
        arguments["idempotency_key"] = title
    return arguments


def _meta(scenario: Scenario) -> dict[str, str] | None:
    if not scenario.keyed:
        return None
    return {"agentteam/workflow_run_id": RUN_ID, "agentteam/callback_effect_id": CALLBACK_ID}


def check_answer(scenario: Scenario, answer: dict[str, Any]) -> list[str]:
    result = answer.get("result", {})
    structured = result.get("structuredContent") or {}
    if scenario.code is None:
        return [] if result.get("isError") is False else [f"expected success: {structured}"]
    error = structured.get("error", {})
    problems = []
    if not result.get("isError") or error.get("code") != scenario.code:
        problems.append(f"expected {scenario.code}, got {error.get('code') or 'success'}")
    if error.get("retryable") is not scenario.retryable:
        problems.append(f"retryable should be {scenario.retryable}: {error}")
    if (
        scenario.retry_after is not None
        and error.get("retry_after_seconds") != scenario.retry_after
    ):
        problems.append(f"retry_after_seconds should be {scenario.retry_after}: {error}")
    return problems


async def run_scenarios(
    stand: Stand, raw: RawBridge, tag: str, scenarios: Iterable[Scenario] = SCENARIOS
) -> list[Outcome]:
    """Run each scenario on `raw` (a bridge launched with --upstream-timeout 0.5)."""
    stand.runtime.store.open_callback(
        stand.runtime.workspace_id, RUN_ID, CALLBACK_ID, stand.runtime.agent_id
    )
    seeded = await raw.call("task_create", {"channel": "general", "tasks": [{"title": "read me"}]})
    number = seeded["result"]["structuredContent"]["data"]["tasks"][0]["number"]
    outcomes = []
    for i, scenario in enumerate(scenarios):
        title = f"{MARKER}{tag}-{i}"
        op = "get" if scenario.tool == "task_get" else "create"
        stand.arm(op=op, **scenario.fault)
        rid = raw.next_id()
        params: dict[str, Any] = {
            "name": scenario.tool,
            "arguments": _arguments(scenario, title, number),
        }
        if (meta := _meta(scenario)) is not None:
            params["_meta"] = meta
        frame = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        answer = await raw.exchange(frame, rid)
        stand.runtime.faults.clear()
        outcomes.append(Outcome(scenario, title, rid, answer, check_answer(scenario, answer)))
        if scenario.keyed:  # the documented recovery: the same call again, with the same key
            again = await raw.call(scenario.tool, _arguments(scenario, title, number), meta=meta)
            data = again["result"]["structuredContent"].get("data") or {}
            if data.get("reused") is not True:
                outcomes[-1].problems.append(f"the keyed retry did not replay: {again}")
    return outcomes


async def check_effects_and_attempts(
    outcomes: list[Outcome], journal_path: Path, runtime_db: Path, session_client: str
) -> None:
    """Side effects per title and upstream attempts per call, once late effects have landed."""
    await trio.sleep(1.6)  # a latency fault's request completes after the bridge gave up
    effects = runtime_marked(runtime_db, MARKER)
    read = read_journal(journal_path)
    sessions = {s for s, p in read.started.items() if p.get("client_name") == session_client}
    attempts = {
        trace.request_id: trace.kinds.count("upstream_request")
        for trace in read.calls.values()
        if trace.session_id in sessions
    }
    for outcome in outcomes:
        scenario = outcome.scenario
        made = effects.count(outcome.title)
        if scenario.tool == "task_create" and made != scenario.effects:
            outcome.problems.append(f"{made} tasks created, expected {scenario.effects}")
        seen = attempts.get(str(outcome.request_id))
        if seen != scenario.attempts:
            outcome.problems.append(f"{seen} upstream attempts journaled, {scenario.attempts} due")


async def storm_401(stand: Stand, raw: RawBridge, calls: int = 16) -> list[str]:
    """Every request answered 401 while `calls` run at once: each refreshes once, replays once,
    fails `unauthorized`; then the faults stop and the next call succeeds."""
    stand.arm(kind="unauthorized", op="*", times=calls * 4)
    answers: list[dict[str, Any]] = []

    async def one() -> None:
        answers.append(await raw.call("task_list", {"channel": "general", "limit": 1}))

    async with trio.open_nursery() as nursery:
        for _ in range(calls):
            nursery.start_soon(one)
    stand.runtime.faults.clear()
    problems = [
        f"storm call answered {a['result']['structuredContent'].get('error')}"
        for a in answers
        if a["result"]["structuredContent"].get("error", {}).get("code") != "unauthorized"
    ]
    after = await raw.call("task_list", {"channel": "general", "limit": 1})
    if after["result"]["isError"]:
        problems.append(f"after the storm: {after['result']['structuredContent']}")
    return problems
