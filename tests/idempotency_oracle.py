"""The idempotency checker as it was before it was made cheaper per call (commit 644e178's
``replay/_idempotency.py``, its ``_Checker`` and helpers unchanged but for the names), kept as
the oracle tests/test_replay_idempotency_oracle.py holds the production checker to: fed the same
calls, both must give the same result. Not used by the product."""

from __future__ import annotations

import hashlib
import sys
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Final, TypeGuard

import msgspec

from agentteam_task_bridge.journal import CallReceived, CallResult, ContextInjected
from agentteam_task_bridge.replay import (
    CallStory,
    Finding,
    HintCheck,
    IdempotencyResult,
    KeyGroup,
)

REPEAT_WINDOW = 65_536
_KEY_FIELDS: Final = ("idempotencyKey", "workflowRunId", "callbackEffectId")
_canonical = msgspec.json.Encoder(order="sorted").encode

Task = tuple[str | None, str | None, Hashable]


class OracleChecker:
    def __init__(self, hints: dict[str, bool]) -> None:
        self.hints = hints
        self.groups: dict[tuple[Any, ...], KeyGroup] = {}
        # scope -> (canonical payload digest, digest of the task identities) of the first success
        self.baselines: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
        self.hint_checks: dict[str, HintCheck] = {}
        self.findings: list[Finding] = []
        self.epochs: dict[Task, int] = {}
        self.claims: dict[Task, tuple[str | None, int]] = {}  # holder, epoch it was seen at
        # digest of a call's signature -> (epochs of its tasks after it, its place in the feed),
        # oldest first
        self.recent: OrderedDict[bytes, tuple[tuple[int, ...], int]] = OrderedDict()
        self.keyed = self.claim_calls = self.claim_repeats = self.calls = 0

    def report(self, story: CallStory, rule: str, detail: str) -> None:
        outcome = story.outcome or story.records[-1]
        self.findings.append(
            Finding(
                journal_id=story.journal_id,
                seq=outcome.seq,
                rule=rule,
                detail=detail,
                call_id=story.call_id,
            )
        )

    def feed(self, story: CallStory) -> None:
        self.calls += 1
        call = _Call(story)
        tool, received = call.tool, call.received
        if tool is None or received is None:
            return
        data = call.data
        injected = call.injected
        workspace = injected.get("workspace_id") or (
            story.session.workspace_id if story.session else None
        )
        agent = injected.get("agent_id") or (story.session.agent_id if story.session else None)
        workspace, agent = _intern(workspace), _intern(agent)
        key = _key_of(call) if tool == "task_create" else None
        if key is not None:
            self._keyed_create(call, key, workspace, agent, data)
        if tool == "task_set_claim" and data is not None:
            self._claim(story, workspace, agent, data)
        tasks = _tasks_touched(call, tool, workspace, data)  # the same before and after
        self._repeat(call, tool, workspace, agent, data, tasks)
        self._advance_epochs(call, tool, workspace, agent, data, tasks)

    # --- keyed creates ----------------------------------------------------------------

    def _keyed_create(
        self, call: _Call, key: str, workspace: str | None, agent: str | None, data: Any
    ) -> None:
        self.keyed += 1
        story = call.story
        injected = call.injected
        run, callback = injected.get("workflow_run_id"), injected.get("callback_effect_id")
        body = call.body
        if body is not None and not (body.get("workflowRunId") and body.get("callbackEffectId")):
            run, callback = body.get("workflowRunId"), body.get("callbackEffectId")
        scope = (workspace, agent, run, callback, "task_create", key)
        group = self.groups.get(scope)
        if group is None:
            group = self.groups[scope] = KeyGroup(
                workspace_id=workspace,
                agent_id=agent,
                workflow_run_id=run,
                callback_effect_id=callback,
                tool="task_create",
                key=key,
                first_seq=story.records[0].seq,
                journal_id=story.journal_id,
            )
        group.calls += 1
        outside = not (run and callback)
        if outside:
            if body is not None:
                group.violations += 1
                self.report(
                    story,
                    "key_outside_callback",
                    f"key {key!r} was sent upstream without a workflow callback",
                )
            elif data is not None:
                group.violations += 1
                self.report(story, "key_outside_callback", f"key {key!r} honoured")
            return
        if story.error_code == "idempotency_conflict":
            group.conflicts += 1
            return
        if data is None or body is None:
            return
        digest = _digest(_by_value({k: v for k, v in body.items() if k not in _KEY_FIELDS}))
        tasks = [t for t in _listed(data, "tasks") if isinstance(t, dict)]
        identities = [(t.get("channel"), t.get("number"), t.get("scope_id")) for t in tasks]
        reused = data.get("reused") is True
        baseline = self.baselines.get(scope)
        if baseline is None:
            self.baselines[scope] = (digest, _digest(_by_value(identities)))
            group.numbers = [n for _, n, _ in identities if _is_int(n)]
            group.baseline_call, group.baseline_reused = story.call_id, reused
            group.created += 0 if reused else 1
            group.replays += 1 if reused else 0
            return
        if digest != baseline[0]:
            group.violations += 1
            self.report(
                story,
                "conflict_not_reported",
                f"key {key!r} reused with another payload succeeded instead of conflicting",
            )
            return
        group.replays += 1
        new_numbers = [n for _, n, _ in identities if isinstance(n, bool) or n not in group.numbers]
        if new_numbers:
            group.violations += 1
            self.report(
                story,
                "replay_allocated_numbers",
                f"replay of key {key!r} returned new task numbers {new_numbers[:10]}",
            )
        elif _digest(_by_value(identities)) != baseline[1]:
            group.violations += 1
            self.report(
                story, "replay_identities_differ", f"replay of key {key!r} returned other tasks"
            )
        if not reused:
            group.violations += 1
            self.report(story, "replay_not_reused", f"replay of key {key!r} lacks reused: true")

    # --- desired state ----------------------------------------------------------------

    def _claim(self, story: CallStory, workspace: str | None, agent: str | None, data: Any) -> None:
        self.claim_calls += 1
        claimed = data.get("claimed")
        channel = _intern(data.get("channel"))
        if not isinstance(claimed, bool):
            return
        desired = agent if claimed else None
        repeated = False
        for field, listed in (("changed", True), ("unchanged", False)):
            for number in _listed(data, field):
                task = (workspace, channel, _number(number))
                known = self.claims.get(task)
                if known is None or known[1] != self.epochs.get(task, 0):
                    continue  # state unknown, or changed since by an observed call
                repeated = repeated or known[0] == desired
                if listed and known[0] == desired:
                    self.report(
                        story,
                        "claim_repeat_changed",
                        f"task {channel}#{number} already {_held(desired)}; the repeat changed it",
                    )
                if not listed and known[0] != desired:
                    self.report(
                        story,
                        "claim_state_wrong",
                        f"task {channel}#{number} reported unchanged but was {_held(known[0])}",
                    )
        self.claim_repeats += repeated

    # --- repeats and hints ------------------------------------------------------------

    def _repeat(
        self,
        call: _Call,
        tool: str,
        workspace: str | None,
        agent: str | None,
        data: Any,
        tasks: list[Task],
    ) -> None:
        requests, story = call.requests, call.story
        if not requests or call.outcome is None:
            return
        req = requests[-1]
        signature = _digest([workspace, agent, tool, req.method, req.route, req.body])
        recent = self.recent
        while recent and next(iter(recent.values()))[1] < self.calls - REPEAT_WINDOW:
            recent.popitem(last=False)  # more than REPEAT_WINDOW calls ago
        previous = recent.pop(signature, None)
        succeeded = data is not None
        if previous is not None:
            epochs, _ = previous
            clean = epochs == tuple(self.epochs.get(t, 0) for t in tasks)
            if clean:
                check = self.hint_checks.setdefault(
                    tool, HintCheck(tool=tool, declared=self.hints.get(tool))
                )
                check.repeats += 1
                if _repeat_was_safe(tool, call, data):
                    check.safe += 1
                else:
                    check.unsafe += 1
                    if check.declared:
                        self.report(
                            story,
                            "idempotent_hint_unsafe",
                            f"{tool} declares idempotentHint but an identical repeat changed state",
                        )
        if succeeded:
            after = tuple(self.epochs.get(t, 0) + _changes(story, tool, data, t) for t in tasks)
            recent[signature] = (after, self.calls)

    def _advance_epochs(
        self,
        call: _Call,
        tool: str,
        workspace: str | None,
        agent: str | None,
        data: Any,
        tasks: list[Task],
    ) -> None:
        if data is None or not call.mutation:
            return
        story = call.story
        for task in tasks:
            if _changes(story, tool, data, task):
                self.epochs[task] = self.epochs.get(task, 0) + 1
        if tool == "task_set_claim" and isinstance(data.get("claimed"), bool):
            desired = agent if data["claimed"] else None
            for number in [*_listed(data, "changed"), *_listed(data, "unchanged")]:
                task = (workspace, _intern(data.get("channel")), _number(number))
                self.claims[task] = (desired, self.epochs.get(task, 0))

    def result(self) -> IdempotencyResult:
        for tool, declared in self.hints.items():
            self.hint_checks.setdefault(tool, HintCheck(tool=tool, declared=declared))
        for check in self.hint_checks.values():
            check.judge()
        return IdempotencyResult(
            groups=sorted(self.groups.values(), key=lambda g: (g.journal_id, g.first_seq)),
            hints=sorted(self.hint_checks.values(), key=lambda h: h.tool),
            findings=sorted(self.findings, key=lambda f: (f.journal_id or "", f.seq or 0)),
            keyed_calls=self.keyed,
            claim_calls=self.claim_calls,
            claim_repeats=self.claim_repeats,
            calls=self.calls,
        )


def _intern(value: Any) -> str | None:
    """Strings kept in per-task keys are shared, not one copy per call."""
    return sys.intern(value) if isinstance(value, str) else None


def _listed(data: dict[str, Any], field: str) -> list[Any]:
    """The list ``data`` holds under ``field``; an empty one for anything else (as the store's
    ``jsonb_typeof(...) = 'array'`` reads it)."""
    value = data.get(field)
    return value if isinstance(value, list) else []


def _is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer, as the store's ``is_int`` reads one: ``true`` is not 1 here."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> Hashable:
    """A task's number as the store keys the task: a number by its value (1 and 1.0 alike),
    any other JSON value (``true``, ``"3"``, ``[1]``) by its text, never equal to a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return ("json", _canonical(value))


def _by_value(value: Any) -> Any:
    """A JSON value as ``jsonb`` compares it: a float that is a whole number is that integer
    (``{"a": 1.0}`` equals ``{"a": 1}``), members in any order (the digest sorts them)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list | tuple):
        return [_by_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _by_value(v) for k, v in value.items()}
    return value


def _digest(value: Any) -> bytes:
    """16 bytes of SHA-256 over the canonical JSON: compact keys for what is kept."""
    return hashlib.sha256(_canonical(value)).digest()[:16]


def _held(holder: str | None) -> str:
    return f"claimed by {holder}" if holder else "unclaimed"


class _Call:
    """What the checks read of one call, from its story's one pass (:meth:`CallStory.scan`,
    shared with the call's summary; a property scans the events at each use): the tool the
    last named, the first ``call_received`` and ``context_injected``, every upstream request,
    the last outcome and its result's ``data``."""

    __slots__ = (
        "body",
        "data",
        "injected",
        "mutation",
        "outcome",
        "received",
        "requests",
        "story",
        "tool",
    )

    def __init__(self, story: CallStory) -> None:
        self.story = story
        scan = story.scan()
        tool, received, injected, outcome = scan.tool, scan.received, scan.injected, scan.outcome
        requests = scan.requests
        self.tool = tool
        self.received = (
            received.payload
            if received is not None and isinstance(received.payload, CallReceived)
            else None
        )
        self.injected: dict[str, Any] = (
            {f.name: f.value for f in injected.payload.fields}
            if injected is not None and isinstance(injected.payload, ContextInjected)
            else {}
        )
        self.requests = requests
        self.outcome = outcome
        last = requests[-1].body if requests else None
        # The upstream body as sent (the last request's), when it is an object.
        self.body: dict[str, Any] | None = last if isinstance(last, dict) else None
        result = outcome.payload if outcome is not None else None
        data = None
        if isinstance(result, CallResult) and isinstance(result.result, dict):
            data = result.result.get("data")
        self.data: dict[str, Any] | None = data if isinstance(data, dict) else None
        self.mutation = scan.mutation


def _key_of(call: _Call) -> str | None:
    body = call.body
    if body is not None and isinstance(body.get("idempotencyKey"), str):
        return str(body["idempotencyKey"])
    received = call.received
    key = received.arguments.get("idempotency_key") if received is not None else None
    return key.strip() if isinstance(key, str) else None


def _tasks_touched(call: _Call, tool: str, workspace: str | None, data: Any) -> list[Task]:
    """The tasks a call addresses, from its upstream body (the request as sent)."""
    body = call.body
    if body is None:
        return []
    channel = _intern(body.get("channel"))
    numbers: list[Any] = []
    if _is_int(body.get("number")):
        numbers = [body["number"]]
    elif isinstance(body.get("numbers"), list):
        numbers = body["numbers"]
    elif tool == "task_create" and isinstance(data, dict):
        return [
            (workspace, _intern(t.get("channel")), t["number"])
            for t in _listed(data, "tasks")
            if isinstance(t, dict) and _is_int(t.get("number"))
        ]
    return [(workspace, channel, n) for n in numbers if _is_int(n)]


def _changes(story: CallStory, tool: str, data: Any, task: Task) -> int:
    """1 when the (successful) call changed that task, by its own report, else 0."""
    if data is None:
        return 0
    if tool == "task_update":
        return 1 if data.get("changed") else 0
    if tool == "task_set_claim":
        return 1 if any(_number(v) == task[2] for v in _listed(data, "changed")) else 0
    if tool in ("task_checkpoint", "task_delete"):
        return 1
    if tool == "task_create":
        return 0 if data.get("reused") else 1
    return 0


def _repeat_was_safe(tool: str, call: _Call, data: Any) -> bool:
    """Whether an identical repeat (nothing observed in between) changed nothing."""
    if not call.mutation:
        return True
    if data is None:  # a failed repeat changed nothing (a deleted task stays deleted)
        return call.story.in_doubt is None
    if tool == "task_update":
        return not data.get("changed")
    if tool == "task_set_claim":
        return not data.get("changed")
    if tool == "task_create":
        return data.get("reused") is True
    return False  # a checkpoint appended again, a delete succeeded again
