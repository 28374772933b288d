"""The bridge's invariants, checked on one journal's events in seq order (part of ``verify``).

:class:`EventChecks` keeps bounded state per session and per open call and reports these rules
(the table is in :mod:`replay._verify`): ``call_grammar``, ``call_incomplete``,
``refresh_replay_exceeded``, ``replay_differs``, ``hidden_context_in_arguments``,
``context_mismatch`` and ``secret_in_payload`` (:mod:`replay._secrets`). A mutation sent
upstream whose effect is unknown (no outcome, cancelled in flight, an unknown outcome, or closed
by a ``journal_gap``) is listed as an :class:`InDoubtCall`, which is no fault of the journal.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import (
    ERASED_PAYLOAD,
    OUTCOMES,
    CallReceived,
    ContextInjected,
    Grammar,
    SessionStarted,
    UpstreamRequest,
    is_hidden_name,
)

from ._secrets import SecretScreen
from ._source import _DECODERS, decode_payload
from ._story import MAX_OPEN_CALLS, is_mutation

__all__ = ["UNREAD", "EventChecks", "InDoubtCall", "Report", "find_hidden_names"]

# Hidden context the bridge itself puts in an upstream body, and the injected field it must equal.
_INJECTED_INTO_BODY: Final = {
    "workflowRunId": "workflow_run_id",
    "callbackEffectId": "callback_effect_id",
}
# The kinds of a call's events whose payload the checks read (for the session's events, all).
_READ: Final = frozenset(("call_received", "context_injected", "upstream_request", "call_error"))
# The kinds whose payload, in a call's event, no check reads: decoded only to find it invalid.
UNREAD: Final = frozenset(journal.PAYLOAD_TYPES) - _READ

_ROUTE_IDS: Final = re.compile(r"/workspaces/(?P<ws>[^/]+)/agents/(?P<agent>[^/]+)/")


class Report(Protocol):
    """Where a check reports a broken rule."""

    def __call__(
        self, seq: int | None, rule: str, detail: str, call_id: str | None = None
    ) -> None: ...


class InDoubtCall(msgspec.Struct, frozen=True, kw_only=True):
    """A mutation sent upstream whose effect is unknown: reconcile it with the server."""

    journal_id: str
    call_id: str
    session_id: str
    tool: str | None
    seq: int
    at: str
    method: str
    route: str
    body: Any
    reason: str


# Whether a key names hidden context, by key: the same few keys come in every call. Bounded:
# at most 4,096 keys of at most 64 characters kept; any other is looked at each time.
_HIDDEN: Final[dict[str, bool]] = {}


def _is_hidden(key: str) -> bool:
    hidden = _HIDDEN.get(key)
    if hidden is None:
        hidden = is_hidden_name(key)
        if len(_HIDDEN) < 4096 and len(key) <= 64:
            _HIDDEN[key] = hidden
    return hidden


_NESTED: Final = (dict, list)  # a tuple made once, not a union each time it is tested


def find_hidden_names(node: Any, path: str = "$", depth: int = 0) -> list[str]:
    """JSON paths of every mapping key that names hidden context, at any depth."""
    found: list[str] = []
    if depth > 32:
        return found
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and _is_hidden(key):
                found.append(f"{path}.{key}")
            if isinstance(value, _NESTED):
                found += find_hidden_names(value, f"{path}.{key}", depth + 1)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, _NESTED):
                found += find_hidden_names(item, f"{path}[{i}]", depth + 1)
    return found


class _Call:
    """The bounded state verify keeps for one open call."""

    __slots__ = (
        "broken",
        "call_id",
        "first_request",
        "first_seq",
        "grammar",
        "hidden",
        "injected",
        "last_request",
        "refreshes",
        "requests",
        "sent_unanswered",
        "session_id",
        "tool",
    )

    def __init__(self, call_id: str, session_id: str, seq: int, tool: str | None) -> None:
        self.call_id = call_id
        self.session_id = session_id
        self.first_seq = seq
        self.tool = tool
        self.grammar = Grammar()
        self.broken = False
        self.hidden: list[str] = []
        self.injected: dict[str, Any] = {}
        self.refreshes = 0
        self.requests = 0
        self.first_request: tuple[str, str, bytes] | None = None
        self.last_request: tuple[int, str, UpstreamRequest] | None = None  # seq, at, request
        self.sent_unanswered = False


class EventChecks:
    """The call and session checks over one journal's events, fed in seq order."""

    def __init__(
        self,
        journal_id: str | None,
        report: Report,
        *,
        starts_late: bool,
        decode_unread: bool = True,
        screen: bool = True,
    ) -> None:
        self.journal_id = journal_id
        self.report = report
        # Without ``decode_unread`` a call's event of an :data:`UNREAD` kind is not decoded and
        # its payload_invalid not found: for a caller that decodes every payload itself.
        self._unread: frozenset[str] = frozenset() if decode_unread else UNREAD
        # The journal's first file here starts after seq 1 (a pruned start, or segment_missing):
        # sessions and calls may have begun before it.
        self._starts_late = starts_late
        self.in_doubt: list[InDoubtCall] = []
        self.calls = 0
        self._open: dict[str, _Call] = {}
        # A session's (workspace, agent) from its start; None when that start was erased.
        self._sessions: dict[str, tuple[Any, Any] | None] = {}
        # Without ``screen`` the rows' texts are not screened for secrets: for a caller that
        # screens every row itself (replay._secrets).
        self._screen = SecretScreen(report).row if screen else None

    def check_event(self, row: tuple[Any, ...]) -> None:
        seq, kind, version, text = row[0], row[6], row[7], row[14]
        # One lookup says whether the kind is known and decodes it (decode_payload's decoders,
        # one per kind and version): decode_payload itself for an erased payload or a failure.
        decoder = _DECODERS.get((kind, version))
        if decoder is None:
            self.report(seq, "kind_unknown", f"kind {kind!r} version {version!r}")
        if not isinstance(text, str):
            return
        call_id = row[3]
        if decoder is not None and text != ERASED_PAYLOAD:
            if kind in self._unread and call_id is not None:
                payload, problem = None, ""  # no check reads it; the caller decodes it
            else:
                try:
                    payload, problem = decoder.decode(text), ""
                except (msgspec.DecodeError, msgspec.ValidationError, TypeError, RecursionError):
                    payload, problem = decode_payload(kind, version, text)  # it names the problem
        else:
            payload, problem = decode_payload(kind, version, text)
        if problem:
            self.report(seq, "payload_invalid", problem)
        if self._screen is not None:
            self._screen(seq, row)
        if call_id is None:
            self._session_event(seq, row[2], kind, payload)
        else:
            self._call_event(seq, row, kind, payload)

    def _session_event(self, seq: int, session_id: str, kind: str, payload: Any) -> None:
        if kind == "journal_gap" and isinstance(payload, journal.JournalGap):
            # The writer lost an event of these calls and wrote none of theirs after it.
            for call_id in payload.calls:
                call = self._open.get(call_id)
                if call is not None:
                    self._close(call, gap=True)
        elif kind == "session_started" and isinstance(payload, SessionStarted):
            self._sessions[session_id] = (payload.workspace_id, payload.agent_id)
        elif kind == "session_started" and payload == {"erased": True}:
            self._sessions[session_id] = None  # erased (payload_erased): nothing to compare
        elif kind == "session_ended":
            for call in [c for c in self._open.values() if c.session_id == session_id]:
                if not call.broken:  # one finding per call: the grammar's, if it broke
                    self.report(
                        call.first_seq,
                        "call_incomplete",
                        "no outcome before the session ended",
                        call.call_id,
                    )
                self._close(call)
            self._sessions.pop(session_id, None)

    def _call_event(self, seq: int, row: tuple[Any, ...], kind: str, payload: Any) -> None:
        call_id: str = row[3]
        call = self._open.get(call_id)
        if call is None:
            call = self._open[call_id] = _Call(call_id, row[2], seq, row[9])
            if len(self._open) > MAX_OPEN_CALLS:
                self._close(self._open[next(iter(self._open))])
            if self._starts_late and kind != "call_received":
                call.broken = True  # begun in a segment before the journal's first file here
        if not call.broken:
            wrong = call.grammar.step(kind)
            if wrong is not None:
                call.broken = True
                self.report(seq, "call_grammar", wrong, call_id)
        if kind == "call_received" and isinstance(payload, CallReceived):
            call.hidden = find_hidden_names(payload.arguments)
        elif kind == "context_injected" and isinstance(payload, ContextInjected):
            self._check_injected(seq, call, payload)
        elif kind == "upstream_request" and isinstance(payload, UpstreamRequest):
            self._check_request(seq, row[5], call, payload)
        elif kind == "upstream_response":
            call.sent_unanswered = False
        elif kind == "token_refreshed":
            call.refreshes += 1
            if call.refreshes == 2:
                self.report(seq, "refresh_replay_exceeded", "a second token refresh", call_id)
        if kind in OUTCOMES:
            self._close(call, (kind, payload))

    def _check_injected(self, seq: int, call: _Call, payload: ContextInjected) -> None:
        call.injected = {f.name: f.value for f in payload.fields}
        if call.hidden:
            self.report(
                call.first_seq,
                "hidden_context_in_arguments",
                f"arguments {', '.join(call.hidden[:5])} name hidden context and were not rejected",
                call.call_id,
            )
        if call.session_id in self._sessions and self._sessions[call.session_id] is None:
            return  # its session's start was erased: nothing left to compare with
        session = self._sessions.get(call.session_id)
        if session is None:
            if not self._starts_late:  # else it started in a segment before the first here
                self.report(
                    seq, "context_mismatch", "no session_started for this call", call.call_id
                )
            return
        for i, name in enumerate(("workspace_id", "agent_id")):
            value = call.injected.get(name)
            if value != session[i]:
                self.report(
                    seq,
                    "context_mismatch",
                    f"injected {name} {value!r}, the session's is {session[i]!r}",
                    call.call_id,
                )

    def _check_request(self, seq: int, at: str, call: _Call, req: UpstreamRequest) -> None:
        call.requests += 1
        call.sent_unanswered = True
        call.last_request = (seq, at, req)
        operation = (req.method, req.route, msgspec.json.encode(req.body, order="sorted"))
        if call.first_request is None:
            call.first_request = operation
        elif operation != call.first_request:
            self.report(seq, "replay_differs", "the replay is not the same operation", call.call_id)
        if call.requests == 3:
            self.report(seq, "refresh_replay_exceeded", "a third upstream request", call.call_id)
        ids = _ROUTE_IDS.search(req.route)
        session = self._sessions.get(call.session_id)
        if ids is not None and session is not None and (ids["ws"], ids["agent"]) != session:
            self.report(
                seq,
                "context_mismatch",
                f"route names workspace {ids['ws']!r} and agent {ids['agent']!r}",
                call.call_id,
            )
        if isinstance(req.body, dict):
            for path in find_hidden_names(req.body):
                name = path[2:]
                injected_as = _INJECTED_INTO_BODY.get(name)
                if injected_as is not None and call.injected.get(injected_as) == req.body[name]:
                    continue
                self.report(
                    seq,
                    "hidden_context_in_arguments",
                    f"upstream body carries {path}, which the bridge did not inject",
                    call.call_id,
                )

    def _close(
        self, call: _Call, outcome: tuple[str, Any] | None = None, *, gap: bool = False
    ) -> None:
        self._open.pop(call.call_id, None)
        self.calls += 1
        if call.last_request is None or not is_mutation(call.last_request[2]):
            return
        reason = None
        if outcome is None:
            reason = "journal_gap" if gap else "no_outcome"
        elif outcome[0] == "call_cancelled" and call.sent_unanswered:
            reason = "cancelled_in_flight"
        elif outcome[0] == "call_error" and getattr(outcome[1], "error_code", None) in (
            "outcome_unknown",
            "internal_error",  # the bridge failed after the request was durable
        ):
            reason = outcome[1].error_code
        if reason is None:
            return
        seq, at, req = call.last_request
        self.in_doubt.append(
            InDoubtCall(
                journal_id=self.journal_id or "",
                call_id=call.call_id,
                session_id=call.session_id,
                tool=call.tool,
                seq=seq,
                at=at,
                method=req.method,
                route=req.route,
                body=req.body,
                reason=reason,
            )
        )

    def end_of_stream(self) -> None:
        """Close the calls still open (their outcome is not in the journal)."""
        for call in list(self._open.values()):
            self._close(call)
