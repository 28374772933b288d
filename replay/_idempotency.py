"""``idempotency``: did keys, desired-state setters and idempotent hints behave as promised?

Three checks over the calls of the journals (contract sections 7.2 and 13.2):

* **keyed creates** — every ``task_create`` with an idempotency key, grouped by its full scope
  (workspace, agent, run, callback, tool, key). The first success sets the baseline; a later call
  with the same canonical payload (the upstream body without key, run and callback) must return
  the same task identities with ``reused: true`` and no new number; another payload must be an
  ``idempotency_conflict``; a key outside a workflow callback must never be honoured.
* **desired state** — ``task_set_claim`` repeated on a task whose state no observed call changed
  in between must report it ``unchanged``, and what it reports unchanged must be in that state.
* **idempotent hints** — a call repeated with identical arguments and nothing observed changing
  its tasks in between must change nothing when its tool declares ``idempotentHint`` (the
  declared hints are the bridge registry's annotations).

"Observed" means within the journals given: a change made by someone who does not write to them
is invisible, so these checks can miss a fault but do not invent one from others' activity
except through such a change. Memory is one small entry per key scope and per task touched, and
a bounded window of recent call signatures for repeats (a request's canonical text up to
``_RAW_SIGNATURE`` bytes, a digest of a longer one: :func:`_kept`): a repeat is compared with
the previous identical call when that one is among the last ``REPEAT_WINDOW`` calls (a rule
``idempotency --from`` computes the same way in SQL).

Every call of a report passes :meth:`_Checker.feed`, so it reads only what every call needs and
leaves the rest to the methods of the tools that need it; tests/idempotency_oracle.py keeps the
checker as it was before it was made cheaper, and the tests hold this one to it.

What the upstream's results hold is read as the store's SQL reads it (``_fleet_calls``), whatever
its shape: a list it names (``changed``, ``unchanged``, ``tasks``) is read only when it is a
list; a task's number is an integer only when it is one (``true`` is not 1); two tasks are the
same when their numbers are equal numbers (1 and 1.0 alike) or equal JSON texts otherwise
(:func:`_number`); a payload and a set of identities are compared as ``jsonb`` compares them,
numbers by their value (:func:`_by_value`). Only a number written with more digits than a float
keeps (``0.30000000000000001``, ``1e400``) may be read otherwise than the store reads it.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, Final, TypeGuard

import msgspec

from agentteam_task_bridge import bridge
from agentteam_task_bridge.journal import (
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    InjectedField,
)

from ._findings import Finding
from ._source import Progress, open_journals
from ._story import CallStory, iter_stories

__all__ = ["HintCheck", "IdempotencyResult", "KeyGroup", "check_idempotency"]

REPEAT_WINDOW: Final = 65_536
_KEY_FIELDS: Final = ("idempotencyKey", "workflowRunId", "callbackEffectId")
_RAW_SIGNATURE: Final = 256  # a request's text kept as it is up to this many bytes
_RAW_KEPT: Final = 64  # a baseline's payload and identities, kept for every key scope
_FLOAT_TEXT: Final = re.compile(rb"[0-9][.eE]")  # in canonical JSON: a float, or a string's text
_canonical = msgspec.json.Encoder(order="sorted").encode

Task = tuple[str | None, str | None, Hashable]  # workspace, channel, number (see _number)


class KeyGroup(msgspec.Struct, kw_only=True):
    """The calls sharing one idempotency scope and what they did."""

    workspace_id: str | None
    agent_id: str | None
    workflow_run_id: str | None
    callback_effect_id: str | None
    tool: str
    key: str
    first_seq: int
    journal_id: str
    calls: int = 0
    created: int = 0
    replays: int = 0
    conflicts: int = 0
    violations: int = 0
    numbers: list[int] = []
    baseline_call: str | None = None
    baseline_reused: bool = False

    @property
    def ok(self) -> bool:
        return self.violations == 0


class HintCheck(msgspec.Struct, kw_only=True):
    """One tool's declared ``idempotentHint`` against the repeats observed."""

    tool: str
    declared: bool | None
    repeats: int = 0
    safe: int = 0
    unsafe: int = 0
    verdict: str = "not observed"

    def judge(self) -> None:
        """holds / violated (declared idempotent) or conservative / not idempotent, as
        declared (declared not idempotent), from the repeats observed."""
        self.verdict = self._verdict()

    def _verdict(self) -> str:
        if self.repeats == 0:
            return "not observed"
        if self.declared and self.unsafe:
            return "violated"
        if self.declared:
            return "holds"
        return "conservative" if self.unsafe == 0 else "not idempotent, as declared"


class IdempotencyResult(msgspec.Struct, kw_only=True):
    """Key groups, claim repeats, hint checks and the findings; ``ok`` when nothing broke."""

    groups: list[KeyGroup]
    hints: list[HintCheck]
    findings: list[Finding]
    keyed_calls: int = 0
    claim_calls: int = 0
    claim_repeats: int = 0
    calls: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


def declared_hints() -> dict[str, bool]:
    """``idempotentHint`` of every tool, from the bridge's registry (the annotations served)."""
    return {name: spec.idempotent_hint for name, spec in bridge.TOOLS.items()}


def check_idempotency(
    paths: Sequence[str | Path],
    *,
    hints: dict[str, bool] | None = None,
    progress: Progress | None = None,
) -> IdempotencyResult:
    """Check keyed creates, claim repeats and idempotent hints over the journals' calls."""
    checker = _Checker(declared_hints() if hints is None else hints)
    with open_journals(paths) as journals:
        for story in iter_stories(journals.records(progress)):
            checker.feed(story)
    return checker.result()


class _Checker:
    def __init__(self, hints: dict[str, bool]) -> None:
        self.hints = hints
        self.groups: dict[tuple[Any, ...], KeyGroup] = {}
        # scope -> the canonical payload and the task identities of its first success (_value_key)
        self.baselines: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
        self.hint_checks: dict[str, HintCheck] = {}
        self.findings: list[Finding] = []
        self.epochs: dict[Task, int] = {}
        self.claims: dict[Task, tuple[str | None, int]] = {}  # holder, epoch it was seen at
        # a call's signature (its request, _kept) -> its place in the feed, then the epochs of
        # its tasks after it; oldest first, at most REPEAT_WINDOW entries, and one placed more
        # than REPEAT_WINDOW calls ago counts as absent
        self.recent: OrderedDict[bytes, tuple[int, ...]] = OrderedDict()
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
        """One call, in the order of the feed: its key, its claim, then its repeat and the
        epochs it advances (the hot path: every call passes here; what only some tools need is
        read by those tools' methods)."""
        self.calls += 1
        call = _Call(story)
        tool = call.tool
        if tool is None or call.received is None:
            return
        data = call.data
        claim = tool == "task_set_claim" and data is not None
        if tool != "task_create" and not claim and (not call.requests or call.outcome is None):
            return  # not a key nor a claim, and no repeat: nothing to check or keep
        workspace = agent = None
        for field in call.fields:  # the last of each name, as `injected` keeps
            name = field.name
            if name == "workspace_id":
                workspace = field.value
            elif name == "agent_id":
                agent = field.value
        session = story.session  # where the call's own is missing or empty
        workspace = workspace or (session.workspace_id if session is not None else None)
        agent = agent or (session.agent_id if session is not None else None)
        workspace = sys.intern(workspace) if isinstance(workspace, str) else None
        agent = sys.intern(agent) if isinstance(agent, str) else None
        if tool == "task_create":
            key = _key_of(call)
            if key is not None:
                self._keyed_create(call, key, workspace, agent, data)
        elif claim:
            self._claim(story, workspace, agent, data)
        self._repeat(call, tool, workspace, agent, data)

    # --- keyed creates ----------------------------------------------------------------

    def _keyed_create(
        self, call: _Call, key: str, workspace: str | None, agent: str | None, data: Any
    ) -> None:
        self.keyed += 1
        story = call.story
        body = call.body
        if body is not None and not (body.get("workflowRunId") and body.get("callbackEffectId")):
            run, callback = body.get("workflowRunId"), body.get("callbackEffectId")
        else:
            injected = call.injected
            run, callback = injected.get("workflow_run_id"), injected.get("callback_effect_id")
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
        outcome = call.outcome.payload if call.outcome is not None else None
        if isinstance(outcome, CallError | CallRejected) and (
            outcome.error_code == "idempotency_conflict"
        ):
            group.conflicts += 1
            return
        if data is None or body is None:
            return
        digest = _value_key({k: v for k, v in body.items() if k not in _KEY_FIELDS})
        identities = [
            (t.get("channel"), t.get("number"), t.get("scope_id"))
            for t in _listed(data, "tasks")
            if isinstance(t, dict)
        ]
        reused = data.get("reused") is True
        baseline = self.baselines.get(scope)
        if baseline is None:
            self.baselines[scope] = (digest, _value_key(identities))
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
        elif _value_key(identities) != baseline[1]:
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
        self, call: _Call, tool: str, workspace: str | None, agent: str | None, data: Any
    ) -> None:
        """The previous identical call (its signature's), clean when nothing observed changed
        its tasks since; then what this one leaves for the next, and the epochs it advances."""
        requests = call.requests
        if not requests or call.outcome is None:
            return  # no request sent, or no outcome: no repeat, nothing changed
        req = requests[-1]
        text = _canonical([workspace, agent, tool, req.method, req.route, req.body])
        signature = _kept(text, _RAW_SIGNATURE)
        place, recent, epochs = self.calls, self.recent, self.epochs
        previous = recent.pop(signature, None)
        if previous is not None and previous[0] < place - REPEAT_WINDOW:
            previous = None  # the identical call is more than REPEAT_WINDOW calls ago
        if previous is None and data is None:
            return  # nothing to compare with, nothing to keep or change
        tasks = _tasks_touched(call.body, tool, workspace, data)  # the same before and after
        if previous is not None:  # a repeat: clean when nothing changed its tasks since
            if not tasks:
                clean = len(previous) == 1
            elif len(tasks) == 1:
                clean = len(previous) == 2 and previous[1] == epochs.get(tasks[0], 0)
            else:
                clean = previous[1:] == tuple([epochs.get(t, 0) for t in tasks])
            if clean:
                self._hint(call, tool, data)
        if data is None:
            return
        changes = _changes(tool, data) if tasks else 0
        if not tasks:  # the epochs its tasks have after it
            recent[signature] = (place,)
        elif isinstance(changes, int):
            recent[signature] = (place, *[epochs.get(t, 0) + changes for t in tasks])
        else:
            recent[signature] = (place, *[epochs.get(t, 0) + (t[2] in changes) for t in tasks])
        if len(recent) > REPEAT_WINDOW:  # the oldest is more than REPEAT_WINDOW calls ago
            recent.popitem(last=False)  # by the next call
        if call.mutation:
            self._advance_epochs(tool, workspace, agent, data, tasks, changes)

    def _hint(self, call: _Call, tool: str, data: dict[str, Any] | None) -> None:
        """A clean repeat (nothing observed changed its tasks since the identical call)."""
        check = self.hint_checks.get(tool)
        if check is None:
            check = self.hint_checks[tool] = HintCheck(tool=tool, declared=self.hints.get(tool))
        check.repeats += 1
        if _repeat_was_safe(tool, call, data):
            check.safe += 1
        else:
            check.unsafe += 1
            if check.declared:
                self.report(
                    call.story,
                    "idempotent_hint_unsafe",
                    f"{tool} declares idempotentHint but an identical repeat changed state",
                )

    def _advance_epochs(
        self,
        tool: str,
        workspace: str | None,
        agent: str | None,
        data: dict[str, Any],
        tasks: Sequence[Task],
        changes: int | set[int | float],
    ) -> None:
        """A successful mutation: its changes to its tasks, then the claims it reports."""
        epochs = self.epochs
        for task in tasks:
            if changes if isinstance(changes, int) else task[2] in changes:
                epochs[task] = epochs.get(task, 0) + 1
        if tool == "task_set_claim" and isinstance(data.get("claimed"), bool):
            desired = agent if data["claimed"] else None
            channel = _intern(data.get("channel"))
            for number in [*_listed(data, "changed"), *_listed(data, "unchanged")]:
                task = (workspace, channel, _number(number))
                self.claims[task] = (desired, epochs.get(task, 0))

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


def _value_key(value: Any) -> bytes:
    """:func:`_kept` of the canonical JSON of :func:`_by_value` of ``value``, without that copy
    when the text holds no float (every float's text has a digit before a ``.`` or an ``e``; a
    non-finite one is ``null`` either way)."""
    text = _canonical(value)
    if _FLOAT_TEXT.search(text) is not None:
        text = _canonical(_by_value(value))
    return _kept(text, _RAW_KEPT)


def _kept(text: bytes, limit: int) -> bytes:
    """A canonical text as kept to be compared: itself when longer than 16 bytes and at most
    ``limit`` (no hashing), else 16 bytes of its SHA-256 (so a text never equals a digest)."""
    return text if 16 < len(text) <= limit else hashlib.sha256(text).digest()[:16]


def _held(holder: str | None) -> str:
    return f"claimed by {holder}" if holder else "unclaimed"


class _Call:
    """What the checks read of one call, from its story's one pass (:meth:`CallStory.scan`,
    shared with the call's summary; a property scans the events at each use): the tool the
    last named, the first ``call_received`` and ``context_injected`` (its fields), every
    upstream request, the last outcome and its result's ``data``."""

    __slots__ = (
        "body",
        "data",
        "fields",
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
        self.tool = scan.tool
        received = scan.received
        payload = received.payload if received is not None else None
        self.received = payload if isinstance(payload, CallReceived) else None
        injected = scan.injected
        payload = injected.payload if injected is not None else None
        self.fields: list[InjectedField] = (
            payload.fields if isinstance(payload, ContextInjected) else []
        )
        self.requests = requests = scan.requests
        self.outcome = outcome = scan.outcome
        last = requests[-1].body if requests else None
        # The upstream body as sent (the last request's), when it is an object.
        self.body: dict[str, Any] | None = last if isinstance(last, dict) else None
        result = outcome.payload if outcome is not None else None
        data = None
        if isinstance(result, CallResult) and isinstance(result.result, dict):
            data = result.result.get("data")
        self.data: dict[str, Any] | None = data if isinstance(data, dict) else None
        self.mutation = scan.mutation

    @property
    def injected(self) -> dict[str, Any]:
        """The injected context by name (the last of each)."""
        return {f.name: f.value for f in self.fields}


def _key_of(call: _Call) -> str | None:
    body = call.body
    if body is not None and isinstance(body.get("idempotencyKey"), str):
        return str(body["idempotencyKey"])
    received = call.received
    key = received.arguments.get("idempotency_key") if received is not None else None
    return key.strip() if isinstance(key, str) else None


def _tasks_touched(
    body: dict[str, Any] | None, tool: str, workspace: str | None, data: dict[str, Any] | None
) -> Sequence[Task]:
    """The tasks a call addresses, from its upstream body (the request as sent)."""
    if body is None:
        return ()
    number = body.get("number")
    if _is_int(number):
        return [(workspace, _intern(body.get("channel")), number)]
    numbers = body.get("numbers")
    if isinstance(numbers, list):
        channel = _intern(body.get("channel"))
        return [(workspace, channel, n) for n in numbers if _is_int(n)]
    if tool == "task_create" and data is not None:
        return [
            (workspace, _intern(t.get("channel")), t["number"])
            for t in _listed(data, "tasks")
            if isinstance(t, dict) and _is_int(t.get("number"))
        ]
    return ()


def _changes(tool: str, data: dict[str, Any]) -> int | set[int | float]:
    """What a successful call changed, by its own report: 1 (each task it addresses) or 0, or a
    claim's numbers ``changed`` (1 and 1.0 alike, as :func:`_number` keys them; not ``true``)."""
    if tool == "task_update":
        return 1 if data.get("changed") else 0
    if tool == "task_set_claim":
        return {
            v
            for v in _listed(data, "changed")
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
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
