"""``calls`` and ``show``: the calls of a journal, filtered, and one call's whole story."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from agentteam_task_bridge.journal import (
    OUTCOMES,
    CallCancelled,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Record,
    TokenRefreshed,
    UpstreamRequest,
    UpstreamResponse,
)

from ._source import Journals, Progress, ReplayInputError, open_journals
from ._story import STATUSES, CallStory, CallSummary, SessionInfo, iter_stories

ERASED: Final = {"erased": True}  # how a reader decodes an erased payload

__all__ = [
    "CallDetail",
    "CallFilter",
    "CallList",
    "CallStream",
    "Exchange",
    "StoryEvent",
    "list_calls",
    "show_call",
    "story_detail",
    "stream_calls",
    "wall",
]


def wall(moment: datetime) -> str:
    """A datetime in the journal's ``ts_wall`` form, so that times compare as strings."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class CallFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which calls to list; every criterion given must hold. Times are inclusive bounds on the
    call's start; ``status`` is one of result, error, rejected, cancelled, in_doubt,
    incomplete (``in_doubt`` also matches a mutation whose outcome is unknown)."""

    session: str | None = None
    tool: str | None = None
    agent: str | None = None
    status: str | None = None
    error_code: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ReplayInputError(
                f"unknown status {self.status!r}; expected one of {', '.join(STATUSES)}"
            )

    def matches(self, call: CallSummary) -> bool:
        if self.session is not None and call.session_id != self.session:
            return False
        if self.tool is not None and self.tool not in (call.tool, call.requested_tool):
            return False
        if self.agent is not None and call.agent_id != self.agent:
            return False
        if self.status is not None:
            if self.status == "in_doubt":
                if call.in_doubt is None:
                    return False
            elif call.status != self.status:
                return False
        if self.error_code is not None and call.error_code != self.error_code:
            return False
        if self.since is not None and call.started_at < wall(self.since):
            return False
        return not (self.until is not None and call.started_at > wall(self.until))


class CallList(msgspec.Struct, frozen=True, kw_only=True):
    """The calls that matched, in journal order, and how many were scanned."""

    calls: list[CallSummary]
    scanned: int
    matched: int


def list_calls(
    paths: Sequence[str | Path],
    where: CallFilter | None = None,
    *,
    limit: int | None = None,
    progress: Progress | None = None,
) -> CallList:
    """Every call of the journals matching ``where``, the first ``limit`` in journal order."""
    stream = stream_calls(paths, where, limit=limit, progress=progress)
    with stream:
        calls = list(stream)
    return CallList(calls=calls, scanned=stream.scanned, matched=stream.matched)


def stream_calls(
    paths: Sequence[str | Path],
    where: CallFilter | None = None,
    *,
    limit: int | None = None,
    progress: Progress | None = None,
) -> CallStream:
    """:func:`list_calls` as it is read, for journals of any size: the journals are opened now
    (ReplayInputError for one that cannot be used), the calls come as the stream is iterated."""
    return CallStream(open_journals(paths), where or CallFilter(), limit, progress)


class CallStream:
    """The calls that match, in journal order (the first ``limit``), yielded as the journals are
    read, with memory that does not grow with them; ``scanned`` and ``matched`` count every call
    once the iteration has ended. Iterate it once, within ``with`` (which closes the journals)."""

    def __init__(
        self, journals: Journals, where: CallFilter, limit: int | None, progress: Progress | None
    ) -> None:
        self._journals = journals
        self._where = where
        self._limit = limit
        self._progress = progress
        self.scanned = 0
        self.matched = 0

    def __iter__(self) -> Iterator[CallSummary]:
        where, limit = self._where, self._limit
        for story in iter_stories(self._journals.records(self._progress), in_order=True):
            self.scanned += 1
            call = story.summary()
            if where.matches(call):
                self.matched += 1
                if limit is None or self.matched <= limit:
                    yield call

    def __enter__(self) -> CallStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._journals.close()


class StoryEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a call: when, relative to the call's start, and what it holds."""

    seq: int
    kind: str
    at: str
    offset_ms: float
    payload: Any


class Exchange(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream request and its answer (none when the transport failed or the bridge died)."""

    attempt: int
    method: str
    route: str
    body: Any
    sent_ms: float
    status: int | None = None
    response_body: Any = None
    headers: dict[str, str] = {}
    duration_ms: float | None = None
    answered_ms: float | None = None


class CallDetail(msgspec.Struct, frozen=True, kw_only=True):
    """One call's story: what the model sent, what the bridge injected and from where, what
    went upstream, what came back, what the model saw, with timings."""

    summary: CallSummary
    session: SessionInfo | None
    arguments: Any
    meta_keys: list[str]
    injected: list[dict[str, Any]]
    exchanges: list[Exchange]
    token_refreshes: list[dict[str, Any]]
    deprecated: list[dict[str, Any]]
    outcome_kind: str | None
    outcome: Any
    events: list[StoryEvent]
    # The call's W3C trace (hex): the bridge's live span, or the client's traceparent.
    trace_id: str | None = None
    span_id: str | None = None


def show_call(paths: Sequence[str | Path], call_id: str) -> CallDetail:
    """The whole story of one call; ReplayInputError when no journal holds it."""
    with open_journals(paths) as journals:
        records = journals.events_of_call(call_id)
        if not records:
            raise ReplayInputError(f"no call {call_id!r} in the journals given")
        journal_ids = {r.journal_id for r in records}
        if len(journal_ids) > 1:
            raise ReplayInputError(
                f"call {call_id!r} is in several journals ({', '.join(sorted(journal_ids))})"
            )
        journal_id, session_id = records[0].journal_id, records[0].session_id
        session = SessionInfo.of(
            journals.session_started(journal_id, session_id),
            journals.session_started(journal_id, session_id, "session_handshake"),
        )
    story = CallStory(records[0].journal_id, call_id, records[0].session_id, session)
    for record in records:
        story.add(record)
    return story_detail(story)


def story_detail(story: CallStory) -> CallDetail:
    """The whole of one call's story, as ``show`` prints it."""
    records = story.records
    t0 = records[0].ts_mono_ns

    def offset(r: Record) -> float:
        return round((r.ts_mono_ns - t0) / 1e6, 3)

    received = story.received
    injected: list[dict[str, Any]] = []
    exchanges: list[Exchange] = []
    refreshes: list[dict[str, Any]] = []
    deprecated: list[dict[str, Any]] = []
    outcome_kind: str | None = None
    outcome: Any = None
    for r in records:
        p = r.payload
        if isinstance(p, ContextInjected):
            injected = [msgspec.to_builtins(f) for f in p.fields]
        elif isinstance(p, UpstreamRequest):
            exchanges.append(
                Exchange(
                    attempt=p.attempt,
                    method=p.method,
                    route=p.route,
                    body=p.body,
                    sent_ms=offset(r),
                )
            )
        elif isinstance(p, UpstreamResponse) and exchanges:
            exchanges[-1] = msgspec.structs.replace(
                exchanges[-1],
                status=p.status,
                response_body=p.body,
                headers=dict(p.headers),
                duration_ms=p.duration_ms,
                answered_ms=offset(r),
            )
        elif isinstance(p, TokenRefreshed):
            refreshes.append({"source": p.source, "reason": p.reason, "at_ms": offset(r)})
        elif isinstance(p, DeprecatedUsage):
            deprecated.append(msgspec.to_builtins(p))
        elif isinstance(p, CallResult | CallError | CallRejected | CallCancelled):
            outcome_kind = r.kind
            outcome = _model_view(p)
        elif p == ERASED and r.kind in OUTCOMES:  # erased (journal._erase): said, not guessed
            outcome_kind, outcome = r.kind, ERASED
    first = records[0]
    if first.kind == "call_received" and first.payload == ERASED:
        received_view: Any = ERASED
    else:
        received_view = received.arguments if isinstance(received, CallReceived) else None
    return CallDetail(
        summary=story.summary(),
        session=story.session,
        arguments=received_view,
        meta_keys=list(received.meta_keys) if isinstance(received, CallReceived) else [],
        injected=injected,
        exchanges=exchanges,
        token_refreshes=refreshes,
        deprecated=deprecated,
        outcome_kind=outcome_kind,
        outcome=outcome,
        trace_id=received.trace_id if isinstance(received, CallReceived) else None,
        span_id=received.span_id if isinstance(received, CallReceived) else None,
        events=[
            StoryEvent(
                seq=r.seq,
                kind=r.kind,
                at=r.ts_wall,
                offset_ms=offset(r),
                payload=msgspec.to_builtins(r.payload),
            )
            for r in records
        ],
    )


def _model_view(p: CallResult | CallError | CallRejected | CallCancelled) -> Any:
    """What the model saw: the result envelope, or the whole error envelope as the bridge
    answered it (fields a journal older than them lacks are left out, never guessed)."""
    if isinstance(p, CallResult):
        return p.result
    if isinstance(p, CallCancelled):
        return {"cancelled": p.reason}
    error: dict[str, Any] = {"code": p.error_code, "message": p.message}
    if p.retryable is not None:
        error["retryable"] = p.retryable
    if p.field_errors:
        error["field_errors"] = dict(p.field_errors)
    if p.suggested_action:
        error["suggested_action"] = p.suggested_action
    if p.candidates:
        error["candidates"] = p.candidates
    if isinstance(p, CallError) and p.retry_after_seconds is not None:
        error["retry_after_seconds"] = p.retry_after_seconds
    return {"error": error}
