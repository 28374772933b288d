"""``calls``, ``audit``, ``deprecations`` and ``idempotency`` over the fleet store (``--from``).

The reports are the local ones (same types, same ``--json``), computed inside PostgreSQL: one
query folds each call's events into the line ``calls`` prints (``CALL_LINES``, the SQL twin of
:meth:`CallStory.summary`), and ``audit`` and ``deprecations`` aggregate in SQL; the client
receives the aggregates (rows per tool, agent, error code, latency value, board, session, name,
user), never the events, and only orders and formats them as the local code does.

Exactness: latencies are fetched as exact integers (nanoseconds, or whole microseconds once
rounded) and turned into the same floats the local code computes; text sorts bytewise
(``COLLATE "C"``). The local reader folds at most ``MAX_EVENTS_PER_CALL`` events into a call,
and so does the SQL. ``idempotency`` is computed in SQL too (``_fleet_idempotency``).

One instant: each report's statements run in one read-only snapshot (``read_only``), the one
an :class:`Instant` names when a page shares it among its parts, so a batch shipped meanwhile
is in every figure or in none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ._audit import (
    AuditReport,
    BoardMutations,
    ErrorCount,
    Histogram,
    SessionRow,
    ToolUsage,
    Truncation,
    _rate,
)
from ._calls import CallFilter, CallList
from ._deprecations import (
    DEFAULT_GATE_DAYS,
    DeprecatedName,
    DeprecatedUser,
    DeprecationReport,
    _gate,
    _report,
)
from ._fleet_idempotency import idempotency_from
from ._fleet_store import SESSION_DOC, Instant, read_only
from ._fleet_store import connect as connect  # the tests read the store through it
from ._story import CallSummary

if TYPE_CHECKING:
    pass

__all__ = [
    "CALL_LINES",
    "Scope",
    "audit_and",
    "audit_from",
    "calls_from",
    "calls_query",
    "deprecations_from",
    "idempotency_from",
    "window_query",
]


# One row per call, as CallStory.summary() sees it: kept at ingest (``_fleet_calls``).
CALL_LINES: Final = "SELECT * FROM agentteam.call_lines"

_LINE_COLUMNS: Final = (
    "journal_id, call_id, session_id, tool, requested_tool, agent_id, workspace_id, client_name,"
    " request_id, first_seq, last_seq, started_at, ended_at, status, error_code, in_doubt,"
    " bridge_ns, upstream_durations, upstream_requests, http_status, token_refreshes, truncated,"
    " deprecated_uses, mutation, channel"
)


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _summary(row: tuple[Any, ...]) -> CallSummary:
    durations = row[17]
    return CallSummary(
        journal_id=row[0],
        call_id=row[1],
        session_id=row[2],
        tool=row[3],
        requested_tool=row[4],
        agent_id=row[5],
        workspace_id=row[6],
        client_name=row[7],
        request_id=row[8],
        first_seq=int(row[9]),
        last_seq=int(row[10]),
        started_at=row[11],
        ended_at=row[12],
        status=row[13],
        error_code=row[14],
        in_doubt=row[15],
        bridge_ms=_ms(row[16]),
        upstream_ms=round(sum(durations), 3) if durations else None,
        upstream_requests=int(row[18]),
        http_status=row[19],
        token_refreshes=int(row[20]),
        truncated=bool(row[21]),
        deprecated_uses=int(row[22]),
        mutation=bool(row[23]),
        channel=row[24],
    )


def calls_from(
    store_url: str | Instant, where: CallFilter | None = None, *, limit: int | None = None
) -> CallList:
    """``list_calls`` over the store: the filter, the order and the limit applied in SQL."""
    sql, params = calls_query(where or CallFilter(), limit)
    with read_only(store_url) as conn:
        rows = conn.execute(sql, params).fetchall()
        total = conn.execute("SELECT sum(calls) FROM agentteam.call_counts").fetchone()
    return CallList(
        calls=[_summary(r) for r in rows],
        scanned=int(total[0]) if total and total[0] is not None else 0,
        matched=int(rows[0][-1]) if rows else 0,  # limit >= 1: no row, no match
    )


def calls_query(where: CallFilter, limit: int | None = None) -> tuple[str, list[Any]]:
    """The statement ``calls_from`` runs and its parameters: the filter on the call lines'
    columns, so the time window prunes their partitions and a session is an index lookup."""
    clauses, params = _where(where)
    sql = (
        f"SELECT {_LINE_COLUMNS}, count(*) OVER () FROM agentteam.call_lines"
        f" WHERE {' AND '.join(clauses) or 'true'}"
        " ORDER BY journal_id, first_seq"
    )
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


def _where(where: CallFilter) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if where.session is not None:
        clauses.append("session_id = %s")
        params.append(where.session)
    if where.tool is not None:
        clauses.append("(tool = %s OR requested_tool = %s)")
        params += [where.tool, where.tool]
    if where.agent is not None:
        clauses.append("agent_id = %s")
        params.append(where.agent)
    if where.status == "in_doubt":
        clauses.append("in_doubt IS NOT NULL")
    elif where.status is not None:
        clauses.append("status = %s")
        params.append(where.status)
    if where.error_code is not None:
        clauses.append("error_code = %s")
        params.append(where.error_code)
    # started_ts is started_at (RFC 3339 UTC, microseconds) as an instant: the same order, and
    # what the table is partitioned by, so a window reads only the months it spans.
    if where.since is not None:
        clauses.append("started_ts >= %s")
        params.append(_instant(where.since))
    if where.until is not None:
        clauses.append("started_ts <= %s")
        params.append(_instant(where.until))
    return clauses, params


def _instant(moment: datetime) -> datetime:
    """The moment ``wall`` writes (naive: UTC), aware."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# --- audit ------------------------------------------------------------------------------

# Each aggregate's columns are named a, b, c... (one JSON object per row, keys in that order).
_AUDIT_SQL: Final = {
    "usage": "SELECT coalesce(tool, '?') a, coalesce(nullif(agent_id, ''), '?') b, status c,"
    " count(*) d FROM lines GROUP BY 1, 2, 3",
    "errors": "SELECT error_code a, coalesce(tool, '?') b, count(*) c FROM lines"
    " WHERE error_code IS NOT NULL GROUP BY 1, 2",
    # Rounded to whole microseconds in SQL when exact; ties (x.xxx5 ms) as nanoseconds.
    "bridge": "SELECT coalesce(tool, '?') a,"
    " CASE WHEN mod(bridge_ns, 1000) = 500 THEN NULL ELSE round(bridge_ns / 1000.0)::bigint END b,"
    " CASE WHEN mod(bridge_ns, 1000) = 500 THEN bridge_ns END c, count(*) d"
    " FROM lines WHERE bridge_ns IS NOT NULL GROUP BY 1, 2, 3",
    "upstream": "SELECT d a, count(*) b FROM lines, unnest(upstream_durations) d GROUP BY 1",
    "truncation": "SELECT coalesce(tool, '?') a, count(*) b, count(*) FILTER (WHERE truncated) c"
    " FROM lines WHERE status = 'result' GROUP BY 1",
    "boards": "SELECT coalesce(nullif(workspace_id, ''), '?') a,"
    " coalesce(nullif(channel, ''), '?') b, coalesce(tool, '?') c, count(*) d"
    " FROM lines WHERE status = 'result' AND mutation GROUP BY 1, 2, 3",
    "session_calls": "SELECT journal_id a, session_id b, count(*) c,"
    " count(*) FILTER (WHERE status IN ('error', 'rejected')) d,"
    " count(*) FILTER (WHERE mutation AND status = 'result') e,"
    " count(*) FILTER (WHERE in_doubt IS NOT NULL) f,"
    ' min(started_at COLLATE "C") g, max(ended_at COLLATE "C") h,'
    " (array_agg(session ORDER BY first_seq))[1] i,"
    " (array_agg(started_at ORDER BY first_seq))[1] j"
    " FROM lines GROUP BY 1, 2",
}

_SESSIONS: Final = f"""
SELECT s.journal_id, s.session_id, s.ts_wall, {SESSION_DOC.format(s="s")}, x.ts_wall,
  agentteam.payload_doc(x.payload) ->> 'reason'
FROM agentteam.events s
LEFT JOIN LATERAL (
  SELECT e.ts_wall, e.payload FROM agentteam.events e
  WHERE e.journal_id = s.journal_id AND e.session_id = s.session_id
    AND e.kind = 'session_ended' AND e.call_id IS NULL AND e.seq > s.seq
  ORDER BY e.seq LIMIT 1
) x ON true
WHERE s.kind = 'session_started' AND s.call_id IS NULL
"""


class Scope(NamedTuple):
    """What a report over the store covers (all by default): a condition on the call lines
    (``agentteam.call_lines``), one on the events (unqualified columns of
    ``agentteam.events``), one on a session row (``s`` its start, ``x`` its end), and, when the
    events' condition selects whole journals, one on their heads (else None), each with its
    parameters (``%s``)."""

    lines: str = "true"
    line_params: tuple[Any, ...] = ()
    events: str = "true"
    event_params: tuple[Any, ...] = ()
    sessions: str = "true"
    session_params: tuple[Any, ...] = ()
    # When the events' condition selects whole journals (none, or by journal alone): the same
    # condition on ``agentteam.heads``, whose kept time spans are then the events' window.
    heads: str | None = None
    head_params: tuple[Any, ...] = ()


def _audit_query(lines: str, extra: Mapping[str, str] | None = None) -> str:
    """One statement (so it runs on a read-only replica): the call lines read once, every
    aggregate (the audit's, then ``extra``'s, over ``lines``) a JSON array of rows."""
    return _aggregate_query(lines, {**_AUDIT_SQL, **(extra or {})})


def _aggregate_query(lines: str, aggregates: Mapping[str, str]) -> str:
    parts = ",\n".join(
        f"(SELECT coalesce(json_agg(q), '[]') FROM ({sql}) q) AS {name}"
        for name, sql in aggregates.items()
    )
    return f"WITH lines AS MATERIALIZED ({CALL_LINES} WHERE {lines}) SELECT {parts}"


def _rows_of(
    aggregates: Mapping[str, str], row: tuple[Any, ...] | None
) -> dict[str, list[tuple[Any, ...]]]:
    """Each aggregate's rows, from the statement's one row of JSON arrays."""
    assert row is not None
    return {
        name: [tuple(item.values()) for item in value]
        for name, value in zip(aggregates, row, strict=True)
    }


def audit_from(store_url: str | Instant, scope: Scope | None = None) -> AuditReport:
    """``audit`` over the store: every aggregate computed in SQL over the call lines."""
    return audit_and(store_url, scope or Scope())[0]


def audit_and(
    store_url: str | Instant, scope: Scope, extra: Mapping[str, str] | None = None
) -> tuple[AuditReport, dict[str, list[tuple[Any, ...]]]]:
    """:func:`audit_from`, and the rows of each ``extra`` aggregate (a query over ``lines``,
    its columns named a, b, c...) from the same read of the call lines."""
    assert not set(extra or {}) & set(_AUDIT_SQL), "an extra aggregate is named as the audit's"
    aggregates = {**_AUDIT_SQL, **(extra or {})}
    with read_only(store_url) as conn:
        row = conn.execute(_aggregate_query(scope.lines, aggregates), scope.line_params)
        got = _rows_of(aggregates, row.fetchone())
        sessions = conn.execute(
            f"{_SESSIONS} AND {scope.sessions}", scope.session_params
        ).fetchall()
    return _audit_report(got, sessions), {name: got[name] for name in extra or {}}


def aggregates_from(
    store_url: str | Instant, scope: Scope, extra: Mapping[str, str]
) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of each ``extra`` aggregate (as for :func:`audit_and`) from a read of the call
    lines of their own, on a connection of their own."""
    with read_only(store_url) as conn:
        row = conn.execute(_aggregate_query(scope.lines, extra), scope.line_params).fetchone()
    return _rows_of(extra, row)


def _audit_report(
    got: dict[str, list[tuple[Any, ...]]], sessions: list[tuple[Any, ...]]
) -> AuditReport:
    usage = {(r[0], r[1], r[2]): int(r[3]) for r in got["usage"]}
    errors = {(r[0], r[1]): int(r[2]) for r in got["errors"]}
    bridge = Histogram()
    by_tool: dict[str, Histogram] = {}
    for tool, micros, tie_ns, count in sorted(got["bridge"], key=_bridge_order):
        ms = micros / 1000 if micros is not None else round(tie_ns / 1e6, 3)
        bridge.add(ms, int(count))
        (by_tool.get(tool) or by_tool.setdefault(tool, Histogram())).add(ms, int(count))
    upstream = Histogram()
    for value, count in sorted(got["upstream"]):
        upstream.add(float(value), int(count))
    results = {r[0]: int(r[1]) for r in got["truncation"]}
    truncated = {r[0]: int(r[2]) for r in got["truncation"]}
    boards = {(r[0], r[1], r[2]): int(r[3]) for r in got["boards"]}
    rows = _session_rows(sessions, got["session_calls"])
    return AuditReport(
        calls=sum(usage.values()),
        tool_usage=[
            ToolUsage(tool=t, agent_id=a, status=st, calls=n)
            for (t, a, st), n in sorted(usage.items())
        ],
        error_codes=[
            ErrorCount(error_code=c, tool=t, calls=n)
            for (c, t), n in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        latency=[bridge.summary("bridge"), upstream.summary("upstream")],
        latency_by_tool=[h.summary(t) for t, h in sorted(by_tool.items())],
        truncation=[
            Truncation(tool=t, results=n, truncated=truncated[t], rate=_rate(truncated[t], n))
            for t, n in sorted(results.items())
        ],
        truncation_rate=_rate(sum(truncated.values()), sum(results.values())),
        mutations_by_board=[
            BoardMutations(workspace_id=w, channel=c, tool=t, mutations=n)
            for (w, c, t), n in sorted(boards.items())
        ],
        sessions=sorted(rows, key=lambda r: (r.started_at, r.session_id)),
    )


def _bridge_order(row: tuple[Any, ...]) -> tuple[str, int]:
    return (row[0], row[1] if row[1] is not None else row[2] // 1000)


def _client(doc: Any) -> str | None:
    if not isinstance(doc, dict) or doc.get("client_name") is None:
        return None
    name, version = doc["client_name"], doc.get("client_version")
    return f"{name} {version}" if version else str(name)


def _session_rows(
    sessions: list[tuple[Any, ...]], calls: list[tuple[Any, ...]]
) -> list[SessionRow]:
    def session(jid: str, sid: str, doc: Any, started: Any, ended: Any, reason: Any) -> SessionRow:
        return SessionRow(
            journal_id=jid,
            session_id=sid,
            client=_client(doc),
            agent_id=doc.get("agent_id") if isinstance(doc, dict) else None,
            started_at=started,
            ended_at=ended,
            end_reason=reason,
        )

    rows: dict[tuple[str, str], SessionRow] = {}
    for jid, sid, started, doc, ended, reason in sessions:
        rows.setdefault((jid, sid), session(jid, sid, doc, started, ended, reason))
    for jid, sid, n, errors, mutations, in_doubt, first, last, doc, first_at in calls:
        row = rows.get((jid, sid))
        if row is None:  # calls of a session whose start the store does not hold
            row = rows[(jid, sid)] = session(jid, sid, doc, first_at, None, None)
        row.calls, row.errors, row.mutations, row.in_doubt = (
            int(n),
            int(errors),
            int(mutations),
            int(in_doubt),
        )
        row.first_call_at, row.last_call_at = first, last
    return list(rows.values())


# --- deprecations -----------------------------------------------------------------------

_DEPRECATED: Final = r"""
WITH d AS (
  SELECT journal_id, seq, ts_wall, gen_ai_tool_name,
    doc ->> 'use_kind' AS use_kind,
    CASE WHEN doc ->> 'use_kind' = 'argument'
         THEN regexp_replace(doc ->> 'old_name', '\[\d+\]', '[]', 'g')
         ELSE doc ->> 'old_name' END AS name,
    doc ->> 'replacement' AS replacement,
    doc ->> 'client_name' AS client_name,
    doc ->> 'client_version' AS client_version,
    doc ->> 'agent_id' AS agent_id
  FROM (SELECT *, agentteam.payload_doc(payload) AS doc FROM agentteam.events
        WHERE kind = 'deprecated_usage' AND {scope}
          AND NOT (payload = '{"erased":true}' AND salt = '')) e  -- erased: no name (as locally)
)
"""

_NAMES: Final = (
    _DEPRECATED
    + """
SELECT use_kind, name, count(*),
  min(ts_wall COLLATE "C"), max(ts_wall COLLATE "C"),
  (array_agg(replacement ORDER BY journal_id, seq) FILTER (WHERE replacement <> ''))[1],
  array_agg(DISTINCT gen_ai_tool_name COLLATE "C") FILTER (WHERE gen_ai_tool_name <> ''),
  min(ARRAY[journal_id, lpad(seq::text, 20, '0')] COLLATE "C")
FROM d GROUP BY use_kind, name
"""
)

_USERS: Final = (
    _DEPRECATED
    + """
SELECT use_kind, name, client_name, client_version, agent_id, count(*),
  min(ts_wall COLLATE "C"), max(ts_wall COLLATE "C"),
  min(ARRAY[journal_id, lpad(seq::text, 20, '0')] COLLATE "C")
FROM d GROUP BY use_kind, name, client_name, client_version, agent_id
"""
)


def window_query(scope: Scope) -> tuple[str, tuple[Any, ...]]:
    """The statement of the earliest and latest ``ts_wall`` of the events ``scope`` keeps, and
    its parameters: over whole journals the spans their heads keep (no event read), else a
    scan of the events the scope selects."""
    if scope.heads is not None:
        return (
            f"SELECT min(first_wall), max(last_wall) FROM agentteam.heads WHERE {scope.heads}",
            scope.head_params,
        )
    return (
        'SELECT min(ts_wall COLLATE "C"), max(ts_wall COLLATE "C") FROM agentteam.events'
        f" WHERE {scope.events}",
        scope.event_params,
    )


def deprecations_from(
    store_url: str | Instant,
    *,
    gate_days: int = DEFAULT_GATE_DAYS,
    as_of: datetime | None = None,
    names: Sequence[str] = (),
    scope: Scope | None = None,
) -> DeprecationReport:
    """``deprecations`` over the store: uses grouped by name and by user in SQL."""
    moment = as_of or datetime.now(UTC)
    scope = scope or Scope(heads="true")
    where, params = scope.events, scope.event_params
    with read_only(store_url) as conn:
        window = conn.execute(*window_query(scope)).fetchone()
        found = conn.execute(_NAMES.replace("{scope}", where), params).fetchall()
        users = conn.execute(_USERS.replace("{scope}", where), params).fetchall()
    assert window is not None
    # Every use the scope holds is in exactly one (use_kind, name) group.
    window_start, window_end, uses = window[0], window[1], sum(int(row[2]) for row in found)
    by_name: dict[tuple[str, str], list[tuple[list[str], DeprecatedUser]]] = {}
    for use_kind, name, c_name, c_version, agent, n, first, last, at in users:
        user = DeprecatedUser(
            client_name=c_name,
            client_version=c_version,
            agent_id=agent,
            count=int(n),
            first_seen=first,
            last_seen=last,
        )
        by_name.setdefault((use_kind, name), []).append((list(at), user))
    wanted = set(names)
    report: list[tuple[list[str], DeprecatedName]] = []
    for use_kind, name, n, first, last, replacement, tools, at in found:
        if wanted and name not in wanted:
            continue
        wanted.discard(name)
        ordered = [u for _, u in sorted(by_name.get((use_kind, name), []), key=lambda p: p[0])]
        entry = DeprecatedName(
            use_kind=use_kind,
            old_name=name,
            replacement=replacement,
            tools=sorted(tools or []),
            count=int(n),
            first_seen=first,
            last_seen=last,
            users=sorted(ordered, key=lambda u: (-u.count, str(u.client_name))),
            gate=_gate(last, gate_days, moment),
        )
        report.append((list(at), entry))
    listed = [entry for _, entry in sorted(report, key=lambda p: p[0])]
    return _report(listed, wanted, gate_days, moment, window_start, window_end, uses)
