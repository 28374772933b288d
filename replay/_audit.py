"""``audit``: who called what, how it ended, how fast, what changed where, session by session.

Latency percentiles come from a log-bucketed histogram (buckets 1% wide), so they are within 1%
of the exact value and memory stays constant however many calls there are; count, mean and max
are exact. Bridge latency is ``call_received`` to the outcome (journal monotonic stamps); upstream
latency is each ``upstream_response.duration_ms``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from ._source import Progress, open_journals
from ._story import CallStory, CallSummary, SessionInfo, iter_stories

__all__ = [
    "AuditReport",
    "BoardMutations",
    "ErrorCount",
    "Histogram",
    "Latency",
    "SessionRow",
    "ToolUsage",
    "Truncation",
    "audit",
]

_GROWTH: Final = 1.01
_LOG_GROWTH: Final = math.log(_GROWTH)
_FLOOR_MS: Final = 0.001


class Histogram:
    """Constant-memory latency histogram: buckets 1% wide from 1 µs up.

    The total is kept in whole microseconds (an integer), so the mean does not depend on the
    order the values were added in: `audit` over files and `audit --from` a store (which adds
    them grouped by value) print the same figure to its last digit.
    """

    __slots__ = ("buckets", "count", "max", "min", "total_us")

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0
        self.total_us = 0
        self.max = 0.0
        self.min = math.inf

    def add(self, ms: float, times: int = 1) -> None:
        """Add the value ``times`` times (the store's reports add each value with its count)."""
        self.count += times
        self.total_us += round(ms * 1000) * times
        self.max = max(self.max, ms)
        self.min = min(self.min, ms)
        self.buckets[_bucket(ms)] += times

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        if rank >= self.count:
            return round(self.max, 3)  # the top is known exactly
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return round(min(self.max, max(self.min, _value(index))), 3)
        return round(self.max, 3)

    def summary(self, name: str) -> Latency:
        return Latency(
            name=name,
            count=self.count,
            mean_ms=round(self.total_us / self.count / 1000, 3) if self.count else None,
            p50_ms=self.quantile(0.50),
            p90_ms=self.quantile(0.90),
            p99_ms=self.quantile(0.99),
            max_ms=round(self.max, 3) if self.count else None,
        )


def _bucket(ms: float) -> int:
    return 0 if ms <= _FLOOR_MS else 1 + int(math.log(ms / _FLOOR_MS) / _LOG_GROWTH)


def _value(index: int) -> float:
    # the bucket's geometric middle
    return _FLOOR_MS if index == 0 else _FLOOR_MS * _GROWTH ** (index - 0.5)


class ToolUsage(msgspec.Struct, frozen=True, kw_only=True):
    tool: str
    agent_id: str
    status: str
    calls: int


class ErrorCount(msgspec.Struct, frozen=True, kw_only=True):
    error_code: str
    tool: str
    calls: int


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class Truncation(msgspec.Struct, frozen=True, kw_only=True):
    tool: str
    results: int
    truncated: int
    rate: float


class BoardMutations(msgspec.Struct, frozen=True, kw_only=True):
    workspace_id: str
    channel: str
    tool: str
    mutations: int


class SessionRow(msgspec.Struct, kw_only=True):
    """One session on the timeline: who, when, how much, how it ended."""

    journal_id: str
    session_id: str
    client: str | None
    agent_id: str | None
    started_at: str
    ended_at: str | None
    end_reason: str | None
    first_call_at: str | None = None
    last_call_at: str | None = None
    calls: int = 0
    errors: int = 0
    mutations: int = 0
    in_doubt: int = 0


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    calls: int
    tool_usage: list[ToolUsage]
    error_codes: list[ErrorCount]
    latency: list[Latency]
    latency_by_tool: list[Latency]
    truncation: list[Truncation]
    mutations_by_board: list[BoardMutations]
    sessions: list[SessionRow]
    truncation_rate: float


def audit(paths: Sequence[str | Path], *, progress: Progress | None = None) -> AuditReport:
    """Tool usage, errors, latency, truncation, mutations per board and the session timeline."""
    acc = _Audit()
    with open_journals(paths) as journals:
        ended: list[SessionInfo] = []
        for story in iter_stories(journals.records(progress), sessions_out=ended):
            acc.call(story)
            acc.sessions_ended(ended)
        acc.sessions_ended(ended)
    return acc.report()


class _Audit:
    def __init__(self) -> None:
        self.calls = 0
        self.usage: Counter[tuple[str, str, str]] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.bridge = Histogram()
        self.upstream = Histogram()
        self.by_tool: dict[str, Histogram] = {}
        self.results: Counter[str] = Counter()
        self.truncated: Counter[str] = Counter()
        self.boards: Counter[tuple[str, str, str]] = Counter()
        self.sessions: dict[tuple[str, str], SessionRow] = {}

    def call(self, story: CallStory, summary: CallSummary | None = None) -> None:
        """Count one call (``summary``: its summary, when the caller made it already)."""
        self.calls += 1
        s = summary or story.summary()
        tool = s.tool or "?"
        self.usage[(tool, s.agent_id or "?", s.status)] += 1
        if s.error_code is not None:
            self.errors[(s.error_code, tool)] += 1
        if s.bridge_ms is not None:
            self.bridge.add(s.bridge_ms)
            self.by_tool.setdefault(tool, Histogram()).add(s.bridge_ms)
        for response in story.scan().responses:  # the pass the summary made
            if response.duration_ms is not None:
                self.upstream.add(response.duration_ms)
        if s.status == "result":
            self.results[tool] += 1
            self.truncated[tool] += s.truncated
            if s.mutation:
                self.boards[(s.workspace_id or "?", s.channel or "?", tool)] += 1
        row = self._session(story)
        row.calls += 1
        row.errors += s.status in ("error", "rejected")
        row.mutations += s.mutation and s.status == "result"
        row.in_doubt += s.in_doubt is not None
        row.first_call_at = min(row.first_call_at or s.started_at, s.started_at)
        row.last_call_at = max(row.last_call_at or s.ended_at, s.ended_at)

    def _session(self, story: CallStory) -> SessionRow:
        key = (story.journal_id, story.session_id)
        row = self.sessions.get(key)
        if row is None:
            info = story.session
            row = self.sessions[key] = SessionRow(
                journal_id=story.journal_id,
                session_id=story.session_id,
                client=_client(info),
                agent_id=info.agent_id if info else None,
                started_at=info.started_at if info else story.records[0].ts_wall,
                ended_at=info.ended_at if info else None,
                end_reason=info.end_reason if info else None,
            )
        return row

    def sessions_ended(self, ended: list[SessionInfo]) -> None:
        for info in ended:
            row = self.sessions.get((info.journal_id, info.session_id))
            if row is None:
                row = self.sessions[(info.journal_id, info.session_id)] = SessionRow(
                    journal_id=info.journal_id,
                    session_id=info.session_id,
                    client=_client(info),
                    agent_id=info.agent_id,
                    started_at=info.started_at,
                    ended_at=info.ended_at,
                    end_reason=info.end_reason,
                )
            row.ended_at, row.end_reason = info.ended_at, info.end_reason
        ended.clear()

    def report(self) -> AuditReport:
        return AuditReport(
            calls=self.calls,
            tool_usage=[
                ToolUsage(tool=t, agent_id=a, status=st, calls=n)
                for (t, a, st), n in sorted(self.usage.items())
            ],
            error_codes=[
                ErrorCount(error_code=c, tool=t, calls=n)
                for (c, t), n in sorted(self.errors.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            latency=[self.bridge.summary("bridge"), self.upstream.summary("upstream")],
            latency_by_tool=[h.summary(t) for t, h in sorted(self.by_tool.items())],
            truncation=[
                Truncation(tool=t, results=n, truncated=self.truncated[t], rate=_rate(t_, n))
                for t, n, t_ in ((t, n, self.truncated[t]) for t, n in sorted(self.results.items()))
            ],
            truncation_rate=_rate(sum(self.truncated.values()), sum(self.results.values())),
            mutations_by_board=[
                BoardMutations(workspace_id=w, channel=c, tool=t, mutations=n)
                for (w, c, t), n in sorted(self.boards.items())
            ],
            sessions=sorted(self.sessions.values(), key=lambda r: (r.started_at, r.session_id)),
        )


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _client(info: SessionInfo | None) -> str | None:
    if info is None or info.client_name is None:
        return None
    return f"{info.client_name} {info.client_version}" if info.client_version else info.client_name
