"""What a journal must prove after any run, crash or not, checked against the client and the server.

* the journal verifies (chain, sequence, signatures, the exported checkpoint) and replay's
  verifier agrees;
* every call follows the call grammar; a call without an outcome is allowed only in a session
  that did not end (the bridge was killed); a mutation that was sent upstream is *in doubt* when
  the model cannot know its effect (no outcome, ``outcome_unknown``, cancelled in flight), the
  definition ``agentteam-replay verify`` uses;
* every answer the client received is in the journal, with the same outcome (the result
  envelope, or the error code);
* every side effect in the runtime carrying a run's marker was preceded by a journaled
  ``upstream_request`` carrying it (write-ahead), and none happened twice (no retry of a
  mutation by the bridge).
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge import TOOLS

MUTATIONS = frozenset(name for name, spec in TOOLS.items() if spec.mutation)
OUTCOMES = frozenset({"call_result", "call_error", "call_rejected", "call_cancelled"})


@dataclass
class Event:
    """One stored event, its payload decoded as plain JSON (so that a bad row cannot hide)."""

    seq: int
    kind: str
    session_id: str
    payload: dict[str, Any]


@dataclass
class CallTrace:
    session_id: str
    tool: str | None
    request_id: str | None
    kinds: list[str] = field(default_factory=list)
    outcome: Event | None = None
    request_bodies: list[Any] = field(default_factory=list)


@dataclass
class JournalAudit:
    events: int = 0
    calls: int = 0
    sessions: int = 0
    findings: list[str] = field(default_factory=list)  # any entry is a failure
    incomplete: int = 0  # calls cut short by a kill
    in_doubt: list[str] = field(default_factory=list)  # call ids: a mutation sent, effect unknown
    in_doubt_replay: int = 0  # what `agentteam-replay verify` lists as in doubt
    answers_checked: int = 0
    effects_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass
class Journaled:
    calls: dict[str, CallTrace] = field(default_factory=dict)
    started: dict[str, dict[str, Any]] = field(default_factory=dict)  # session id -> payload
    ended: set[str] = field(default_factory=set)
    events: int = 0
    unreadable: list[str] = field(default_factory=list)


def read_journal(path: Path) -> Journaled:
    """Every event of a journal, grouped by call; rows are read raw, so none is skipped."""
    out = Journaled()
    with journal.open_reader(path) as reader:
        for row in reader.rows():
            out.events += 1
            kind, session_id, call_id = row.kind, row.session_id, row.call_id
            try:
                payload = msgspec.json.decode(row.payload)  # typed: journal.verify
            except msgspec.DecodeError as exc:
                out.unreadable.append(f"event {row.seq}: {exc}")
                continue
            if not isinstance(payload, dict):
                out.unreadable.append(f"event {row.seq}: the payload is not an object")
                continue
            event = Event(int(row.seq), str(kind), str(session_id), payload)
            if kind == "session_started":
                out.started[session_id] = payload
            elif kind == "session_handshake" and session_id in out.started:
                # Who the client is comes after the start (kind set 7): merged into it.
                out.started[session_id] = {
                    **out.started[session_id],
                    **{k: v for k, v in payload.items() if v is not None},
                }
            elif kind == "session_ended":
                out.ended.add(session_id)
            if call_id is None:
                continue
            trace = out.calls.get(call_id)
            if trace is None:
                trace = out.calls[call_id] = CallTrace(
                    session_id, row.gen_ai_tool_name, row.jsonrpc_request_id
                )
            trace.kinds.append(kind)
            if kind in OUTCOMES:
                trace.outcome = event
            elif kind == "upstream_request":
                trace.request_bodies.append(payload.get("body"))
    return out


def audit_journal(
    path: Path,
    *,
    answers: Mapping[str, Mapping[int | str, dict[str, Any]]] | None = None,
    runtime_db: Path | None = None,
    marker: str | None = None,
) -> JournalAudit:
    """Check `path` (see the module docstring).

    `answers`: per client name (the `clientInfo.name` a run initialized with), the JSON-RPC
    answers it received by request id. `runtime_db` and `marker`: the reference runtime's
    database and the prefix that tags this run's task titles and checkpoint summaries.
    """
    result = JournalAudit()
    _verify(path, result)
    read = read_journal(path)
    result.findings += read.unreadable
    result.events, result.calls, result.sessions = read.events, len(read.calls), len(read.started)
    for call_id, trace in read.calls.items():
        _check_grammar(call_id, trace, read.ended, result)
    if answers:
        _check_answers(read, answers, result)
    if runtime_db is not None and marker is not None:
        _check_effects(read.calls, runtime_db, marker, result)
    return result


def _verify(path: Path, result: JournalAudit) -> None:
    checkpoint_file = path.with_name(path.name + ".checkpoint.json")
    checkpoint = journal.load_checkpoint(checkpoint_file) if checkpoint_file.exists() else None
    # The run wrote these journals itself: signatures are checked under the key each names.
    with journal.open_reader(path) as reader:
        report = journal.verify(reader, checkpoint=checkpoint, trust_recorded_keys=True)
    result.findings += [f"journal.verify: {f.rule} at {f.seq}: {f.detail}" for f in report.findings]
    try:
        checked = replay.verify([path], trust_recorded_keys=True)
    except journal.JournalError as exc:  # replay cannot even read it: that is a finding too
        result.findings.append(f"replay.verify failed: {exc}")
        return
    result.findings += [f"replay.verify: {f}" for f in checked.findings]
    result.in_doubt_replay = len(checked.in_doubt)


def _check_grammar(call_id: str, trace: CallTrace, ended: set[str], result: JournalAudit) -> None:
    grammar = journal.Grammar()
    for kind in trace.kinds:
        problem = grammar.step(kind)
        if problem is not None:
            result.findings.append(f"{call_id}: {problem} ({' '.join(trace.kinds)})")
            return
    if trace.outcome is None:
        result.incomplete += 1
        if trace.session_id in ended:
            result.findings.append(f"{call_id}: no outcome in a session that ended normally")
    if trace.tool in MUTATIONS and "upstream_request" in trace.kinds and _unsettled(trace):
        result.in_doubt.append(call_id)


def _unsettled(trace: CallTrace) -> bool:
    """Whether the model cannot know if this sent mutation took effect (replay's definition)."""
    outcome = trace.outcome
    if outcome is None:
        return True  # killed after sending: answered upstream or not, the model never heard
    if outcome.kind == "call_error":
        return outcome.payload.get("error_code") == "outcome_unknown"
    if outcome.kind == "call_cancelled":
        return trace.kinds.count("upstream_request") > trace.kinds.count("upstream_response")
    return False


def _check_answers(
    read: Journaled,
    answers: Mapping[str, Mapping[int | str, dict[str, Any]]],
    result: JournalAudit,
) -> None:
    sessions_of: dict[str, list[str]] = defaultdict(list)
    for session_id, payload in read.started.items():
        if payload.get("client_name"):
            sessions_of[payload["client_name"]].append(session_id)
    by_request: dict[tuple[str, str], CallTrace] = {}
    for call in read.calls.values():
        if call.request_id is not None:
            by_request[(call.session_id, call.request_id)] = call
    for client, received in answers.items():
        sessions = sessions_of.get(client, [])
        for rid, answer in received.items():
            result_body = answer.get("result")
            if not isinstance(result_body, dict) or "isError" not in result_body:
                continue  # a protocol answer (initialize, tools/list, a JSON-RPC error)
            result.answers_checked += 1
            found = [by_request.get((s, str(rid))) for s in sessions]
            trace = next((t for t in found if t is not None), None)
            if trace is None or trace.outcome is None:
                result.findings.append(f"{client} request {rid}: answered but not journaled")
                continue
            problem = _compare(trace.outcome, result_body)
            if problem:
                result.findings.append(f"{client} request {rid}: {problem}")


def _compare(outcome: Event, answer: dict[str, Any]) -> str | None:
    structured = answer.get("structuredContent")
    payload = outcome.payload
    if not answer["isError"]:
        if outcome.kind != "call_result":
            return f"client got a result, the journal has {outcome.kind}"
        if payload.get("result") != structured:
            return "the journaled result differs from the answer"
        return None
    code = structured.get("error", {}).get("code") if isinstance(structured, dict) else None
    if outcome.kind in ("call_error", "call_rejected"):
        journaled = payload.get("error_code")
        return None if journaled == code else f"code {code} vs {journaled}"
    return f"client got an error, the journal has {outcome.kind}"


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def runtime_marked(runtime_db: Path, marker: str) -> list[str]:
    """Every task title and checkpoint summary in the runtime that starts with `marker`."""
    conn = sqlite3.connect(f"file:{runtime_db}?mode=ro", uri=True)
    try:
        pattern = marker.replace("%", "") + "%"
        rows = conn.execute("SELECT title FROM tasks WHERE title LIKE ?", (pattern,)).fetchall()
        rows += conn.execute(
            "SELECT summary FROM checkpoints WHERE summary LIKE ?", (pattern,)
        ).fetchall()
    finally:
        conn.close()
    return [str(r[0]) for r in rows]


def _check_effects(
    calls: dict[str, CallTrace], runtime_db: Path, marker: str, result: JournalAudit
) -> None:
    requested = {s for t in calls.values() for b in t.request_bodies for s in _strings(b)}
    effects = runtime_marked(runtime_db, marker)
    result.effects_checked = len(effects)
    for text, count in Counter(effects).items():
        if text not in requested:
            result.findings.append(f"side effect {text!r} has no journaled upstream_request")
        if count > 1:
            result.findings.append(f"side effect {text!r} happened {count} times")
