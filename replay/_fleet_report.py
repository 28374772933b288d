"""``report --from postgresql://...``: the HTML page's figures aggregated in the store's SQL.

The page is the local ``report``'s (:mod:`replay._report_html`), from the same :class:`Report`:

* the verdict is the store's: what its checked ingest accepted of each journal (events 1..head,
  every chain hash recomputed in SQL, checkpoints kept only under the journal's registered
  key), the findings it recorded, and the calls in doubt among its call lines;
* audit, deprecations, idempotency, the timeline and the error examples are computed over the
  call lines the filter selects (``_fleet_calls``), the rows of the time window, journal and
  session (partitions pruned, indexes used), equal to what the local ``report`` shows for the
  same journals and filter; the audit, the page's aggregates (the timeline, the error
  examples and the first stories' calls, in one read of those lines: ``aggregates_from``),
  the idempotency check and the deprecations each on a connection of its own at the same time
  (another server process, another core), so on free cores the page costs about the longest
  of them; over whole journals the idempotency check combines the state the ingest keeps per
  journal (``_fleet_idem_kept``) instead of running over every line;
* the page is one instant of the store: every part, on every connection, reads the snapshot
  one transaction exported before the first of them (``one_instant``), so a batch shipped (new
  calls, sessions, errors, an erasure applied) while the page is made is in none of its
  figures. The exporting transaction reads no table, and no reader waits for another while its
  transaction holds locks (the verdict and the stories each on a connection of their own): a
  ship that must wait for the readers' locks (a new month's partition) never waits in a circle;
* the stories (the first ``stories`` calls in journal order, and the calls the page names, at
  most ``MAX_NAMED_STORIES``) are read back from the events, a few queries for them all (their
  events by the ``events_call`` index, then their sessions' starts, handshakes and ends).

The client receives aggregates and the stories' events, never the whole history.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Final

from agentteam_task_bridge import journal

from ._audit import Histogram
from ._calls import CallDetail, story_detail, wall
from ._deprecations import DEFAULT_GATE_DAYS
from ._findings import Finding
from ._fleet_idem_kept import idempotency_for_report
from ._fleet_reports import Scope, aggregates_from, audit_from, deprecations_from
from ._fleet_store import Instant, one_instant, read_only, redact_store_url
from ._idempotency import IdempotencyResult
from ._invariants import InDoubtCall
from ._report import (
    DEFAULT_STORIES,
    MAX_BUCKETS,
    MAX_NAMED_STORIES,
    ErrorExample,
    Report,
    ReportFilter,
    _named_calls,
    _Timeline,
)
from ._source import ReplayInputError, to_record
from ._story import CallStory, SessionInfo
from ._verify import JournalReport, VerifyResult

__all__ = ["report_from", "scope_of"]

# The payload as bytes: the connection decodes the store's escapes in text columns, and the
# payload column holds the journal's text as it is.
_COLUMNS: Final = ", ".join(
    "convert_to(payload, 'UTF8')" if c == "payload" else c for c in journal.COLUMNS
)
_PAYLOAD: Final = journal.COLUMNS.index("payload")


def _record(row: tuple[Any, ...]) -> Any:
    raw = list(row)
    raw[_PAYLOAD] = bytes(raw[_PAYLOAD]).decode()
    return to_record(tuple(raw))


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _instant(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def scope_of(where: ReportFilter) -> tuple[Scope, str, dict[str, Any]]:
    """The filter as conditions on the store: the lines, events and sessions it keeps, and the
    lines' condition again with named parameters (for the idempotency check)."""
    lines: list[tuple[str, str, Any]] = []  # (column, operator, value)
    events: list[tuple[str, str, Any]] = []
    sessions: list[tuple[str, str, Any]] = []
    if where.journal is not None:
        for side in (lines, events):
            side.append(("journal_id", "LIKE", _like(where.journal)))
        sessions.append(("s.journal_id", "LIKE", _like(where.journal)))
    if where.session is not None:
        for side in (lines, events):
            side.append(("session_id", "=", where.session))
        sessions.append(("s.session_id", "=", where.session))
    if where.since is not None:
        lines.append(("started_ts", ">=", _instant(where.since)))
        events.append(("ts", ">=", _instant(where.since)))
        sessions.append(("coalesce(x.ts_wall, s.ts_wall)", ">=", wall(where.since)))
    if where.until is not None:
        lines.append(("started_ts", "<=", _instant(where.until)))
        events.append(("ts", "<=", _instant(where.until)))
        sessions.append(("s.ts_wall", "<=", wall(where.until)))

    def clause(items: list[tuple[str, str, Any]], mark: str = "%s") -> str:
        return " AND ".join(f"{c} {op} {mark.format(i)}" for i, (c, op, _) in enumerate(items))

    whole = where.session is None and where.since is None and where.until is None
    scope = Scope(
        lines=clause(lines) or "true",
        line_params=tuple(v for _, _, v in lines),
        events=clause(events) or "true",
        event_params=tuple(v for _, _, v in events),
        sessions=clause(sessions) or "true",
        session_params=tuple(v for _, _, v in sessions),
        # No filter, or a journal filter alone, keeps whole journals: their heads' spans are
        # the events' window.
        heads=(clause(events) or "true") if whole else None,
        head_params=tuple(v for _, _, v in events),
    )
    named = " AND ".join(f"c.{c} {op} %(line{i})s" for i, (c, op, _) in enumerate(lines))
    return scope, named or "true", {f"line{i}": v for i, (_, _, v) in enumerate(lines)}


def report_from(
    store_url: str,
    where: ReportFilter | None = None,
    *,
    stories: int = DEFAULT_STORIES,
    gate_days: int = DEFAULT_GATE_DAYS,
) -> Report:
    """The report of the calls ``where`` selects in the store; the first ``stories`` calls'
    stories kept whole."""
    if stories < 0:
        raise ReplayInputError("the number of stories cannot be negative")
    where = where or ReportFilter()
    scope, named, named_params = scope_of(where)
    # The idempotency check, the deprecations and the page's aggregates run on connections of
    # their own (server processes of their own, on other cores) while this thread waits for
    # the audit: psycopg waits for a result without the GIL. The aggregates read the call
    # lines again rather than in the audit's statement: on two free cores that read (about a
    # tenth of the audit's time) is cheaper than the aggregates after the audit (1.25x the
    # audit's time against 1.64x, at a million events). Every part reads ``instant``, kept
    # open until the pool is done.
    with (
        one_instant(store_url) as instant,
        ThreadPoolExecutor(max_workers=3, thread_name_prefix="report-from") as pool,
    ):
        checking = pool.submit(
            idempotency_for_report,
            instant,
            whole=where.session is None and where.since is None and where.until is None,
            journal=where.journal,
            calls=named,
            call_params=named_params,
        )
        deprecating = pool.submit(deprecations_from, instant, gate_days=gate_days, scope=scope)
        aggregating = pool.submit(aggregates_from, instant, scope, _extra(stories))
        audit = audit_from(instant, scope)
        rows = aggregating.result()
        width, timeline = _timeline(rows["page_timeline"])
        errors = _errors(rows["page_errors"])
        # A connection of their own each (closed before this thread waits for another part).
        with read_only(instant) as conn:
            verified = _verdict(conn, store_url)
            first = _stories(conn, [(j, c) for j, c in rows["page_first"]], True)
        kept: dict[str, CallDetail] = {}
        for (_, call_id), detail in first.items():
            kept.setdefault(call_id, detail)
        deprecations, checked = deprecating.result(), checking.result()
        kept |= _named_stories(instant, kept, verified, checked, errors)
    matched = audit.calls
    ordered = sorted(kept.values(), key=lambda d: (d.summary.journal_id, d.summary.first_seq))
    shown = min(stories, matched)
    return Report(
        generated_at=wall(datetime.now(UTC)),
        sources=[redact_store_url(store_url)],
        filter=where.text,
        verify=verified,
        audit=audit,
        deprecations=deprecations,
        idempotency=checked,
        bucket_seconds=width,
        buckets=timeline.buckets(),
        errors=errors,
        stories=ordered,
        stories_first=shown,
        stories_more=matched - shown,
    )


_JOURNALS: Final = """
SELECT j.journal_id, h.seq, h.hash, coalesce(c.calls, 0),
  (SELECT count(*) FROM agentteam.checkpoints k WHERE k.journal_id = j.journal_id),
  (SELECT max(k.seq) FROM agentteam.checkpoints k WHERE k.journal_id = j.journal_id),
  (SELECT coalesce(array_agg(k.vkey ORDER BY k.seq), '{}') FROM agentteam.journal_keys k
   WHERE k.journal_id = j.journal_id)
FROM agentteam.journals j
JOIN agentteam.heads h USING (journal_id)
LEFT JOIN agentteam.call_counts c USING (journal_id)
ORDER BY j.journal_id
"""

# The last request of each call in doubt (``_invariants``: only a mutation is in doubt).
_IN_DOUBT: Final = """
SELECT l.journal_id, l.call_id, l.session_id, l.tool, r.seq, r.ts_wall,
  convert_to(r.payload, 'UTF8'), l.in_doubt
FROM agentteam.call_lines l
JOIN LATERAL (
  SELECT e.seq, e.ts_wall, agentteam.payload_doc(e.payload) AS doc, e.payload
  FROM agentteam.events e
  WHERE e.journal_id = l.journal_id AND e.call_id = l.call_id AND e.kind = 'upstream_request'
    AND e.seq BETWEEN l.first_seq AND l.last_seq
  ORDER BY e.seq DESC LIMIT 1
) r ON upper(r.doc ->> 'method') <> 'GET' AND right(r.doc ->> 'route', 4) <> '/get'
WHERE l.in_doubt IS NOT NULL
ORDER BY l.journal_id, l.first_seq
"""


def _named_stories(
    instant: Instant,
    kept: dict[str, CallDetail],
    verified: VerifyResult,
    checked: IdempotencyResult,
    errors: list[ErrorExample],
) -> dict[str, CallDetail]:
    """The stories of the calls the verdict, the idempotency check and the error examples name
    that ``kept`` (the first calls') does not hold, by call id."""
    with read_only(instant) as conn:
        by_code = {e.error_code: (e.calls, set(e.tools), e.example_call) for e in errors}
        named_calls = _named_calls(verified, checked, by_code)
        wanted = [c for c in named_calls if c not in kept][:MAX_NAMED_STORIES]
        # A named call is read from the first journal holding its id, as the local report does.
        holders = dict(
            conn.execute(
                "SELECT DISTINCT ON (call_id) call_id, journal_id FROM agentteam.call_lines"
                " WHERE call_id = ANY (%s) ORDER BY call_id, journal_id",
                (wanted,),
            ).fetchall()
            if wanted
            else []
        )
        named = _stories(conn, [(holders[c], c) for c in wanted if c in holders], False)
    return {call_id: detail for (_, call_id), detail in named.items()}


def _verdict(conn: Any, store_url: str) -> VerifyResult:
    """What the store's checked ingest accepted, the findings it recorded, the calls in doubt."""
    source = redact_store_url(store_url)
    journals = []
    keys: set[str] = set()
    for jid, head, head_hash, calls, cps, last_cp, vkeys in conn.execute(_JOURNALS):
        keys.update("+".join(str(k).split("+")[:2]) for k in vkeys)
        journals.append(
            JournalReport(
                path=f"{source} {jid}",
                journal_id=jid,
                events=int(head),
                head_seq=int(head),
                head_hash=str(head_hash),
                calls=int(calls),
                checkpoints_checked=int(cps),
                signatures_checked=int(cps),
                signatures_unchecked=0,
                held_checkpoint=None,
                last_checkpoint_seq=int(last_cp or 0),
                recorded_keys=[str(k) for k in vkeys],
                signed_through=int(last_cp or 0),
                unsigned_tail=int(head) - int(last_cp or 0),
            )
        )
    findings = [
        Finding(journal_id=r[0], seq=r[1], rule=r[2], detail=r[3])
        for r in conn.execute(
            "SELECT journal_id, seq, rule, detail || ' (reported by ' || reported_by || ')'"
            " FROM agentteam.findings ORDER BY journal_id, id"
        )
    ]
    in_doubt = []
    for jid, call_id, session_id, tool, seq, at, payload, reason in conn.execute(_IN_DOUBT):
        request = json.loads(bytes(payload))  # the body as the journal holds it, keys in order
        in_doubt.append(
            InDoubtCall(
                journal_id=jid,
                call_id=call_id,
                session_id=session_id,
                tool=tool,
                seq=int(seq),
                at=at,
                method=request.get("method"),
                route=request.get("route"),
                body=request.get("body"),
                reason=reason,
            )
        )
    return VerifyResult(
        journals=journals, findings=findings, in_doubt=in_doubt, trusted_keys=sorted(keys)
    )


# Seconds since the epoch as the local timeline counts them (whole seconds of the start).
_SECOND: Final = "floor(extract(epoch FROM started_ts))::bigint"
# Below this many microseconds (51 days) a latency the server rounds to microseconds is the
# local code's ``round(ns / 1e6, 3)``: the float's error, half a unit of its last place, stays
# under the nanosecond between a value and a tie. A tie (half a microsecond, which the local
# code rounds from nanoseconds) or a longer latency (a hostile journal's clock) is sent in
# nanoseconds and rounded by the local arithmetic.
MICROS_EXACT: Final = 1 << 42
_AS_NS: Final = f"(mod(t.bridge_ns, 1000) = 500 OR abs(t.bridge_ns) >= {MICROS_EXACT * 1000 - 500})"


def _extra(stories: int) -> dict[str, str]:
    """The page's aggregates over the audit's read of the call lines (``lines``): the
    timeline (its width the narrowest power of two seconds that spans the calls in fewer than
    MAX_BUCKETS buckets, as the local timeline ends), the error codes with their first call,
    and the first ``stories`` calls."""
    timeline = f"""
WITH t AS (SELECT {_SECOND} AS s, tool, status, bridge_ns FROM lines),
r AS (SELECT min(s) AS lo, max(s) AS hi FROM t),
w AS MATERIALIZED (
  SELECT coalesce((SELECT min(x.width) FROM generate_series(0, 62) e,
                     LATERAL (SELECT 1::bigint << e AS width) x
                   WHERE floor(r.hi::numeric / x.width) - floor(r.lo::numeric / x.width)
                         < {MAX_BUCKETS}), 1) AS width
  FROM r
)
SELECT w.width a, t.s / w.width b, coalesce(t.tool, '?') c, t.status d, count(*) e,
  CASE WHEN NOT {_AS_NS} THEN round(t.bridge_ns / 1000.0)::bigint END f,
  CASE WHEN {_AS_NS} THEN t.bridge_ns END g
FROM t, w GROUP BY 1, 2, 3, 4, 6, 7"""
    return {
        "page_timeline": timeline,
        "page_errors": "SELECT error_code a, count(*) b, array_agg(DISTINCT coalesce(tool, '?')) c,"
        " (array_agg(call_id ORDER BY journal_id, first_seq))[1] d"
        " FROM lines WHERE error_code IS NOT NULL GROUP BY error_code",
        "page_first": "SELECT journal_id a, call_id b FROM lines"
        f" ORDER BY journal_id, first_seq LIMIT {int(stories)}",
    }


def _timeline(rows: list[tuple[Any, ...]]) -> tuple[int, _Timeline]:
    """The calls per bucket (the rows of ``_extra``'s timeline)."""
    timeline = _Timeline()
    for width, index, tool, status, n, micros, tie_ns in rows:
        timeline.width = int(width)
        if index not in timeline.tools:
            timeline.tools[index], timeline.statuses[index] = Counter(), Counter()
            timeline.latency[index] = Histogram()
        timeline.tools[index][tool] += int(n)
        timeline.statuses[index][status] += int(n)
        if micros is not None or tie_ns is not None:
            ms = micros / 1000 if micros is not None else round(tie_ns / 1e6, 3)
            timeline.latency[index].add(ms, int(n))
    return timeline.width, timeline


def _errors(rows: list[tuple[Any, ...]]) -> list[ErrorExample]:
    found = [
        ErrorExample(error_code=code, calls=int(n), tools=sorted(tools), example_call=call)
        for code, n, tools, call in rows
    ]
    return sorted(found, key=lambda e: (-e.calls, e.error_code))


_SESSION_EVENT: Final = """
SELECT w.i, x.* FROM unnest(%s::text[], %s::text[], %s::bigint[]) WITH ORDINALITY w(j, s, q, i)
JOIN LATERAL (
  SELECT {columns} FROM agentteam.events
  WHERE journal_id = w.j AND session_id = w.s AND kind = %s AND call_id IS NULL AND {where}
  ORDER BY seq {order} LIMIT 1
) x ON true
"""


def _session_events(
    conn: Any,
    kind: str,
    where: str,
    order: str,
    at: list[tuple[str, str, int]],
    columns: str = _COLUMNS,
) -> dict[int, tuple[Any, ...]]:
    """For each (journal, session, seq) of ``at``, by its index: the ``columns`` of the
    session's event of ``kind`` that ``where`` (``seq < w.q`` or ``seq > w.q``) and ``order``
    pick."""
    if not at:
        return {}
    rows = conn.execute(
        _SESSION_EVENT.format(columns=columns, where=where, order=order),
        ([a[0] for a in at], [a[1] for a in at], [a[2] for a in at], kind),
    ).fetchall()
    return {int(row[0]) - 1: tuple(row[1:]) for row in rows}


def _stories(
    conn: Any, calls: list[tuple[str, str]], iterated: bool
) -> dict[tuple[str, str], CallDetail]:
    """The stories of the calls ``(journal_id, call_id)`` from the store's events, a few queries
    for them all. A call the report iterates has its session as the stream left it (its latest
    start before the call, and its end once read); a call it names is read back with the
    session's first start only, as the local report reads it."""
    if not calls:
        return {}
    by_call: dict[tuple[str, str], list[Any]] = {}
    for row in conn.execute(
        f"SELECT {_COLUMNS} FROM agentteam.events JOIN unnest(%s::text[], %s::text[]) w(j, c)"
        " ON journal_id = w.j AND call_id = w.c ORDER BY journal_id, call_id, seq",
        ([j for j, _ in calls], [c for _, c in calls]),
    ):
        record = _record(tuple(row))
        by_call.setdefault((record.journal_id, record.call_id or ""), []).append(record)
    found = [(key, by_call[key]) for key in dict.fromkeys(calls) if key in by_call]
    starts = _session_events(
        conn,
        "session_started",
        "seq < w.q" if iterated else "true",
        "DESC" if iterated else "ASC",
        [(r[0].journal_id, r[0].session_id, r[0].seq) for _, r in found],
    )
    sessions = {i: SessionInfo.from_record(_record(start)) for i, start in starts.items()}
    at = [(s.journal_id, s.session_id, s.seq) for s in sessions.values()]
    # The client, from the session's handshake (kind set 7).
    handshakes = _session_events(conn, "session_handshake", "seq > w.q", "ASC", at)
    ended = (
        _session_events(
            conn,
            "session_ended",
            "seq > w.q",
            "ASC",
            at,
            "ts_wall, agentteam.payload_doc(payload) ->> 'reason'",
        )
        if iterated
        else {}
    )
    out: dict[tuple[str, str], CallDetail] = {}
    for n, i in enumerate(sessions):
        if n in handshakes:
            sessions[i].handshake(_record(handshakes[n]))
        if n in ended:
            sessions[i].ended_at, sessions[i].end_reason = ended[n]
    for i, (key, records) in enumerate(found):
        first = records[0]
        story = CallStory(first.journal_id, key[1], first.session_id, sessions.get(i))
        for record in records:
            story.add(record)
        out[key] = story_detail(story)
    return out
