"""Calls rebuilt from the event stream: each call's events grouped, with bounded state.

Events of concurrent calls interleave in a journal. ``iter_stories`` keeps the calls still open
(a handful: those in flight at that point of the journal) and hands each one over as soon as its
outcome arrives, when its session ends, or at the end of the stream. A call left open when its
bridge died is handed over at the end (``closed_by``), and the number held open is capped.
Asked for them ``in_order`` (``calls`` is), it hands the calls over in the order they began.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple

import msgspec

from agentteam_task_bridge.journal import (
    OUTCOMES,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    Record,
    SessionEnded,
    SessionFields,
    SessionHandshake,
    SessionStarted,
    UpstreamRequest,
    UpstreamResponse,
)

__all__ = [
    "MAX_OPEN_CALLS",
    "CallStory",
    "CallSummary",
    "SessionInfo",
    "is_mutation",
    "iter_stories",
    "parse_wall",
]

MAX_OPEN_CALLS: Final = 10_000
MAX_EVENTS_PER_CALL: Final = 64

Status = Literal["result", "error", "rejected", "cancelled", "in_doubt", "incomplete"]
ClosedBy = Literal["outcome", "session_ended", "end_of_stream", "evicted"]
STATUSES: Final = ("result", "error", "rejected", "cancelled", "in_doubt", "incomplete")


class SessionInfo(SessionFields, kw_only=True):
    """One MCP session as its ``session_started``, ``session_handshake`` and ``session_ended``
    tell it: the start's own fields (``SessionFields``, declared once with the event) and where
    and when it began and ended."""

    journal_id: str
    session_id: str
    seq: int
    started_at: str
    ended_at: str | None = None
    end_reason: str | None = None

    @classmethod
    def from_record(cls, record: Record) -> SessionInfo:
        info = cls(
            journal_id=record.journal_id,
            session_id=record.session_id,
            seq=record.seq,
            started_at=record.ts_wall,
        )
        p = record.payload
        if isinstance(p, SessionStarted):
            for name in SessionFields.__struct_fields__:
                setattr(info, name, getattr(p, name))
        return info

    def handshake(self, record: Record) -> None:
        """Who the client is, from the session's `session_handshake` (kind set 7)."""
        p = record.payload
        if isinstance(p, SessionHandshake):
            self.client_name, self.client_version = p.client_name, p.client_version
            self.protocol_version = p.protocol_version

    @classmethod
    def of(cls, started: Record | None, handshake: Record | None) -> SessionInfo | None:
        """A session from its start and its handshake records (either may be missing)."""
        if started is None:
            return None
        info = cls.from_record(started)
        if handshake is not None:
            info.handshake(handshake)
        return info


def is_mutation(request: UpstreamRequest) -> bool:
    """Whether an upstream request can change state (contract 13.3: only list and get read)."""
    return request.method.upper() != "GET" and not request.route.endswith("/get")


def parse_wall(text: str) -> datetime:
    """A journal ``ts_wall`` (RFC 3339 UTC with ``Z``) as an aware datetime."""
    return datetime.fromisoformat(text)


class CallSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One call in a line: who, what, how it ended, how long it took."""

    journal_id: str
    call_id: str
    session_id: str
    tool: str | None
    requested_tool: str | None
    agent_id: str | None
    workspace_id: str | None
    client_name: str | None
    request_id: str | None
    first_seq: int
    last_seq: int
    started_at: str
    ended_at: str
    status: Status
    error_code: str | None
    in_doubt: str | None
    bridge_ms: float | None
    upstream_ms: float | None
    upstream_requests: int
    http_status: int | None
    token_refreshes: int
    truncated: bool
    deprecated_uses: int
    mutation: bool
    channel: str | None


class CallStory:
    """Every event of one call, in seq order, and what they add up to."""

    __slots__ = (
        "call_id",
        "closed_by",
        "dropped",
        "journal_id",
        "records",
        "scanned",
        "session",
        "session_id",
    )

    def __init__(
        self, journal_id: str, call_id: str, session_id: str, session: SessionInfo | None
    ) -> None:
        self.journal_id = journal_id
        self.call_id = call_id
        self.session_id = session_id
        self.session = session
        self.records: list[Record] = []
        self.closed_by: ClosedBy = "outcome"
        self.dropped = 0
        self.scanned: Scan | None = None

    def add(self, record: Record) -> None:
        if len(self.records) < MAX_EVENTS_PER_CALL:
            self.records.append(record)
            self.scanned = None
        else:
            self.dropped += 1

    def scan(self) -> Scan:
        """What the events say, found in one pass and kept until another event is added."""
        if self.scanned is None:
            self.scanned = Scan.of(self.records)
        return self.scanned

    # --- what the events say ----------------------------------------------------------

    def first(self, kind: str) -> Record | None:
        return next((r for r in self.records if r.kind == kind), None)

    def all(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]

    @property
    def received(self) -> CallReceived | None:
        r = self.first("call_received")
        return r.payload if r is not None and isinstance(r.payload, CallReceived) else None

    @property
    def outcome(self) -> Record | None:
        return next((r for r in reversed(self.records) if r.kind in OUTCOMES), None)

    @property
    def requests(self) -> list[UpstreamRequest]:
        return [r.payload for r in self.records if isinstance(r.payload, UpstreamRequest)]

    @property
    def responses(self) -> list[UpstreamResponse]:
        return [r.payload for r in self.records if isinstance(r.payload, UpstreamResponse)]

    @property
    def injected(self) -> dict[str, Any]:
        """The injected hidden context by name (values as journaled; secrets redacted)."""
        r = self.first("context_injected")
        if r is None or not isinstance(r.payload, ContextInjected):
            return {}
        return {f.name: f.value for f in r.payload.fields}

    @property
    def tool(self) -> str | None:
        """The canonical tool served (the last name journaled: an old name maps forward)."""
        return next(
            (r.gen_ai_tool_name for r in reversed(self.records) if r.gen_ai_tool_name), None
        )

    @property
    def requested_tool(self) -> str | None:
        return self.records[0].gen_ai_tool_name if self.records else None

    @property
    def mutation(self) -> bool:
        return any(is_mutation(req) for req in self.requests)

    @property
    def result(self) -> CallResult | None:
        o = self.outcome
        return o.payload if o is not None and isinstance(o.payload, CallResult) else None

    @property
    def error_code(self) -> str | None:
        o = self.outcome
        if o is not None and isinstance(o.payload, CallError | CallRejected):
            return o.payload.error_code
        return None

    @property
    def status(self) -> Status:
        o = self.outcome
        if o is None:
            return "in_doubt" if self.mutation else "incomplete"
        return _STATUS_OF[o.kind]

    @property
    def in_doubt(self) -> str | None:
        """Why a mutation's effect upstream is unknown, or None when it is known.

        ``no_outcome``: sent, and the journal ends without an outcome (the bridge died);
        ``cancelled_in_flight``: cancelled after sending, before an answer;
        ``outcome_unknown``: the bridge told the model the outcome is unknown;
        ``internal_error``: the bridge failed after the request was durable.
        """
        if not self.mutation:
            return None
        o = self.outcome
        if o is None:
            return "no_outcome"
        if o.kind == "call_cancelled" and self._last_sent_unanswered():
            return "cancelled_in_flight"
        if self.error_code in ("outcome_unknown", "internal_error"):
            return self.error_code
        return None

    def _last_sent_unanswered(self) -> bool:
        kinds = [r.kind for r in self.records if r.kind.startswith("upstream_")]
        return bool(kinds) and kinds[-1] == "upstream_request"

    @property
    def channel(self) -> str | None:
        return _channel(self.requests, self.result)

    @property
    def bridge_ms(self) -> float | None:
        """call_received to outcome, from the journal's monotonic stamps."""
        o = self.outcome
        first = self.first("call_received")
        if o is None or first is None:
            return None
        return round((o.ts_mono_ns - first.ts_mono_ns) / 1e6, 3)

    @property
    def upstream_ms(self) -> float | None:
        durations = [r.duration_ms for r in self.responses if r.duration_ms is not None]
        return round(sum(durations), 3) if durations else None

    def summary(self) -> CallSummary:
        """The call's line, found in one pass over its events: the same values the properties
        above give one by one (tests/test_replay_summary.py holds it to them)."""
        records = self.records
        first, last = records[0], records[-1]
        scan = self.scan()
        injected_record, outcome, received = scan.injected, scan.outcome, scan.received
        requests, responses = scan.requests, scan.responses
        injected = (
            injected_record.payload.fields
            if injected_record is not None and isinstance(injected_record.payload, ContextInjected)
            else ()
        )
        agent_id = workspace_id = None
        for field in injected:  # the last of each name, as the dict `injected` builds keeps
            if field.name == "agent_id":
                agent_id = field.value
            elif field.name == "workspace_id":
                workspace_id = field.value
        mutation = scan.mutation
        opayload = outcome.payload if outcome is not None else None
        error_code = opayload.error_code if isinstance(opayload, CallError | CallRejected) else None
        result = opayload if isinstance(opayload, CallResult) else None
        if outcome is None:
            status: Status = "in_doubt" if mutation else "incomplete"
        else:
            status = _STATUS_OF[outcome.kind]
        in_doubt: str | None = None
        if mutation:
            if outcome is None:
                in_doubt = "no_outcome"
            elif outcome.kind == "call_cancelled" and scan.last_upstream == "upstream_request":
                in_doubt = "cancelled_in_flight"
            elif error_code in ("outcome_unknown", "internal_error"):
                in_doubt = error_code
        durations = [r.duration_ms for r in responses if r.duration_ms is not None]
        s = self.session
        return CallSummary(
            journal_id=self.journal_id,
            call_id=self.call_id,
            session_id=self.session_id,
            tool=scan.tool,
            requested_tool=first.gen_ai_tool_name,
            agent_id=agent_id or (s.agent_id if s else None),
            workspace_id=workspace_id or (s.workspace_id if s else None),
            client_name=s.client_name if s else None,
            request_id=first.jsonrpc_request_id,
            first_seq=first.seq,
            last_seq=last.seq,
            started_at=first.ts_wall,
            ended_at=last.ts_wall,
            status=status,
            error_code=error_code,
            in_doubt=in_doubt,
            bridge_ms=(
                round((outcome.ts_mono_ns - received.ts_mono_ns) / 1e6, 3)
                if outcome is not None and received is not None
                else None
            ),
            upstream_ms=round(sum(durations), 3) if durations else None,
            upstream_requests=scan.sent,  # the envelope: erased ones too
            http_status=responses[-1].status if responses else None,
            token_refreshes=scan.refreshes,
            truncated=bool(result and result.truncated),
            deprecated_uses=scan.deprecated,
            mutation=mutation,
            channel=_channel(requests, result),
        )


class Scan(NamedTuple):
    """A call's events read once: the tool the last named, the first ``call_received`` and
    ``context_injected``, the last outcome, every upstream request and response payload, the
    kind of the last ``upstream_*`` event, whether a request can change state, and the counts
    the call's line gives."""

    tool: str | None
    received: Record | None
    injected: Record | None
    outcome: Record | None
    requests: list[UpstreamRequest]
    responses: list[UpstreamResponse]
    last_upstream: str
    mutation: bool
    sent: int
    refreshes: int
    deprecated: int

    @classmethod
    def of(cls, records: list[Record]) -> Scan:
        tool: str | None = None
        received: Record | None = None
        injected: Record | None = None
        outcome: Record | None = None
        requests: list[UpstreamRequest] = []
        responses: list[UpstreamResponse] = []
        sent = refreshes = deprecated = 0
        last_upstream = ""
        for r in records:
            kind = r.kind
            if r.gen_ai_tool_name:
                tool = r.gen_ai_tool_name
            payload = r.payload
            if isinstance(payload, UpstreamRequest):
                requests.append(payload)
            elif isinstance(payload, UpstreamResponse):
                responses.append(payload)
            if kind in OUTCOMES:
                outcome = r
            elif kind[:9] == "upstream_":
                last_upstream = kind
                if kind == "upstream_request":
                    sent += 1
            elif kind == "call_received":
                if received is None:
                    received = r
            elif kind == "context_injected":
                if injected is None:
                    injected = r
            elif kind == "token_refreshed":
                refreshes += 1
            elif kind == "deprecated_usage":
                deprecated += 1
        return cls(
            tool,
            received,
            injected,
            outcome,
            requests,
            responses,
            last_upstream,
            any(is_mutation(req) for req in requests),
            sent,
            refreshes,
            deprecated,
        )


_STATUS_OF: Final[dict[str, Status]] = {
    "call_result": "result",
    "call_error": "error",
    "call_rejected": "rejected",
    "call_cancelled": "cancelled",
}


def _channel(requests: list[UpstreamRequest], result: CallResult | None) -> str | None:
    """The board a call addressed: its first request body's, else its result's (see
    :attr:`CallStory.channel`)."""
    for req in requests:
        if isinstance(req.body, dict) and isinstance(req.body.get("channel"), str):
            return str(req.body["channel"])
    if result is not None and isinstance(result.result, dict):
        data = result.result.get("data")
        if isinstance(data, dict) and isinstance(data.get("channel"), str):
            return str(data["channel"])
        task = data.get("task") if isinstance(data, dict) else None
        if isinstance(task, dict) and isinstance(task.get("channel"), str):
            return str(task["channel"])
    return None


def iter_stories(
    records: Iterable[Record],
    *,
    sessions_out: list[SessionInfo] | None = None,
    max_open: int = MAX_OPEN_CALLS,
    in_order: bool = False,
) -> Iterator[CallStory]:
    """Group records (ordered by journal id and seq) into calls; yield each when it closes.

    ``sessions_out``, when given, receives every session as it ends or at the end of the stream.
    ``in_order``: yield the calls in the order of their first event (journal id, then seq)
    instead, each as soon as every call begun before it has closed; a journal's calls still
    open when the stream moves on to the next journal close then (none of their events can
    follow). What is held back is the calls that closed while an earlier one is still open.
    """
    if not in_order:
        yield from _group(records, {}, sessions_out, max_open, close_each_journal=False)
        return
    open_calls: dict[tuple[str, str], CallStory] = {}
    closed: list[tuple[str, int, int, CallStory]] = []  # a heap by (journal id, first seq)
    tiebreak = itertools.count()  # (journal id, first seq) is unique: never reached
    for story in _group(records, open_calls, sessions_out, max_open, close_each_journal=True):
        heapq.heappush(closed, (story.journal_id, story.records[0].seq, next(tiebreak), story))
        # Insertion order is first-event order: the first open call is the oldest one. One
        # with no event yet is being opened now, after every call in the heap began.
        oldest = next(iter(open_calls.values()), None)
        bound = (oldest.journal_id, oldest.records[0].seq) if oldest and oldest.records else None
        while closed and (bound is None or closed[0][:2] < bound):
            yield heapq.heappop(closed)[3]
    while closed:
        yield heapq.heappop(closed)[3]


def _group(
    records: Iterable[Record],
    open_calls: dict[tuple[str, str], CallStory],
    sessions_out: list[SessionInfo] | None,
    max_open: int,
    *,
    close_each_journal: bool,
) -> Iterator[CallStory]:
    sessions: dict[tuple[str, str], SessionInfo] = {}
    journal_id: str | None = None
    for record in records:
        if close_each_journal and record.journal_id != journal_id:
            journal_id = record.journal_id
            for story in open_calls.values():
                story.closed_by = "end_of_stream"
                yield story
            open_calls.clear()
        if record.call_id is None:
            key = (record.journal_id, record.session_id)
            if record.kind == "session_started":
                sessions[key] = SessionInfo.from_record(record)
            elif record.kind == "session_handshake" and key in sessions:
                sessions[key].handshake(record)
            elif record.kind == "session_ended":
                info = sessions.pop(key, None)
                for story in [s for k, s in open_calls.items() if s.session_id == key[1]]:
                    del open_calls[(story.journal_id, story.call_id)]
                    story.closed_by = "session_ended"
                    yield story
                if info is not None:
                    info.ended_at = record.ts_wall
                    if isinstance(record.payload, SessionEnded):
                        info.end_reason = record.payload.reason
                    if sessions_out is not None:
                        sessions_out.append(info)
            continue
        key = (record.journal_id, record.call_id)
        found = open_calls.get(key)
        if found is not None:
            story = found
        else:
            session = sessions.get((record.journal_id, record.session_id))
            story = open_calls[key] = CallStory(
                record.journal_id, record.call_id, record.session_id, session
            )
            if len(open_calls) > max_open:
                oldest = next(iter(open_calls))
                evicted = open_calls.pop(oldest)
                evicted.closed_by = "evicted"
                yield evicted
        story.add(record)
        if record.kind in OUTCOMES:
            del open_calls[key]
            yield story
    for story in open_calls.values():
        story.closed_by = "end_of_stream"
        yield story
    if sessions_out is not None:
        sessions_out.extend(sessions.values())
