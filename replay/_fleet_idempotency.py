"""``idempotency --from``: the local checker's three checks computed inside PostgreSQL.

The local checker (``_idempotency``) is a state machine fed the calls one by one in the order
``iter_stories`` closes them: journal by journal (journal id order), each call when its outcome
arrives (or its session ends), the calls never closed last. Each of its states is a function of
what came before a call in that order, so the query numbers the calls in that order (``o``) and
replaces each state by a window over it. It reads calls, not events: each call's fields the
checks need (its injected context, the members of its result's data and request body they read,
its request's signature, its idempotency key and scope) are kept on its call line at ingest
(``_fleet_calls``); only a call never closed looks up its session's end among the events.
The windows:

* **keyed creates**: the scope's first success is the baseline (``min(o)`` over the scope), each
  later success is compared with it;
* **task epochs**: the number of changes an observed call made to a task before ``o`` is a
  running sum over the task's touches, and a claim is still known when no change fell between
  the claim that set it and the call that reads it;
* **repeats**: the previous call with the same signature (``lag`` over the signature) counts when
  it succeeded and lies within the last ``REPEAT_WINDOW`` calls, and is clean when the epochs it
  left are the ones the repeat finds.

What reaches the client: one row per key scope (the report lists every group), the findings,
one row per tool of the hint checks and the counts, never the events. Finding texts are made by
the client with the local code's f-strings (so a key prints as Python's ``repr``).

Where it differs from the local reading, by design: a call is all its events (up to
``MAX_EVENTS_PER_CALL``), whereas the local reader evicts a call when more than
``MAX_OPEN_CALLS`` (10,000) calls are open at once in the stream and hands later events of it
over as another call (a bridge never has that many calls in flight); values are compared as
``jsonb`` (``1`` equals ``1.0``, where the local digest of the canonical JSON tells them apart).
"""

from __future__ import annotations

from typing import Any, Final

from ._findings import Finding
from ._fleet_calls import is_int as _int
from ._fleet_calls import text_of as _text
from ._fleet_calls import truthy as _truthy
from ._fleet_store import Instant, read_only
from ._idempotency import (
    REPEAT_WINDOW,
    HintCheck,
    IdempotencyResult,
    KeyGroup,
    _held,
    declared_hints,
)

__all__ = ["IDEMPOTENCY_SQL", "REPEAT_WINDOW", "idempotency_from", "idempotency_query"]


def checked_fields(line: str) -> str:
    """A call line's ``data``, ``safe`` and ``body`` as the checks read them (``line``: the
    line's alias), for the statement here and the kept state's fold (``_fleet_idem_state``):
    the result's data only where a check reads more than whether it is there (keyed creates,
    claims), the repeat check's verdict on the call, the upstream body of a keyed create."""
    c = line
    return f"""CASE WHEN {c}.idem_key IS NOT NULL OR {c}.idem_claims IS NOT NULL
      THEN {c}.idem_data END AS data,
    CASE WHEN NOT {c}.mutation THEN true
         WHEN {c}.idem_data IS NULL THEN {c}.in_doubt IS NULL
         WHEN {c}.tool IN ('task_update', 'task_set_claim')
           THEN NOT {_truthy(f"{c}.idem_data -> 'changed'")}
         WHEN {c}.tool = 'task_create'
           THEN coalesce({c}.idem_data -> 'reused' = 'true', false)
         ELSE false END AS safe,
    CASE WHEN {c}.idem_key IS NOT NULL THEN {c}.idem_body END AS body"""


# Where the report's filter goes (a condition on the call lines ``c``).
_LINES: Final = "{lines}"


IDEMPOTENCY_SQL: Final = f"""
WITH placed AS (
  -- Each call's fields as the checks read them, narrowed before the calls are sorted into
  -- their order: the result's data whole only where a check reads more than whether it is
  -- there (keyed creates, claims), the repeat check's verdict on the call computed here.
  SELECT c.journal_id, c.call_id, c.first_seq, c.tool, c.received AND c.tool IS NOT NULL AS fed,
    coalesce(c.outcome_seq, c.last_seq) AS fseq,
    CASE c.status WHEN 'result' THEN 'call_result' WHEN 'error' THEN 'call_error'
      WHEN 'rejected' THEN 'call_rejected' WHEN 'cancelled' THEN 'call_cancelled'
    END AS outcome_kind,
    c.mutation, c.idem_workspace AS ws, c.idem_agent AS agent,
    c.idem_data IS NOT NULL AS ok,
    {checked_fields("c")}, c.idem_sig AS sig,
    c.error_code, c.idem_key AS key,
    c.idem_run AS run, c.idem_cb AS cb, c.idem_payload AS payload, c.idem_touches AS touches,
    c.idem_claims AS claims,
    CASE WHEN c.closed_seq IS NOT NULL OR se.seq IS NOT NULL THEN 0 ELSE 1 END AS phase,
    coalesce(c.closed_seq, se.seq, c.first_seq) AS close_seq
  FROM agentteam.call_lines c
  -- The session's end only for a call never closed: a subquery the CASE runs for those
  -- alone (a lateral join probed the events' partitions for every call).
  CROSS JOIN LATERAL (SELECT CASE WHEN c.closed_seq IS NULL THEN (
    SELECT x.seq FROM agentteam.events x
    WHERE x.journal_id = c.journal_id AND x.session_id = c.session_id
      AND x.kind = 'session_ended' AND x.call_id IS NULL AND x.seq > c.first_seq
    ORDER BY x.seq LIMIT 1) END AS seq) se
  WHERE {_LINES}
), calls AS MATERIALIZED (
  SELECT
    row_number() OVER (ORDER BY phase, journal_id COLLATE "C", close_seq, first_seq) AS o,
    p.*
  FROM placed p
), keyed AS MATERIALIZED (
  SELECT k.*, NOT ({_truthy("k.run")} AND {_truthy("k.cb")}) AS outside
  FROM calls k
  WHERE k.fed AND k.tool = 'task_create' AND k.key IS NOT NULL
), classed AS (
  SELECT k.*,
    CASE WHEN outside THEN CASE WHEN body IS NOT NULL THEN 'sent'
                                WHEN data IS NOT NULL THEN 'honoured' END
         WHEN error_code = 'idempotency_conflict' THEN 'conflict'
         WHEN data IS NULL OR body IS NULL THEN NULL
         ELSE 'success' END AS class,
    (SELECT coalesce(jsonb_agg(jsonb_build_array(t -> 'channel', t -> 'number', t -> 'scope_id')
                               ORDER BY i), '[]')
     FROM jsonb_array_elements(CASE WHEN jsonb_typeof(data -> 'tasks') = 'array'
                                    THEN data -> 'tasks' ELSE '[]' END) WITH ORDINALITY x(t, i)
     WHERE jsonb_typeof(t) = 'object') AS identities,
    coalesce(data -> 'reused' = 'true', false) AS reused,
    dense_rank() OVER (ORDER BY ws, agent, run, cb, key COLLATE "C") AS scope
  FROM keyed k
), based AS (
  SELECT s.*,
    min(o) FILTER (WHERE class = 'success') OVER (PARTITION BY scope) AS base_o
  FROM classed s
), judged AS (
  SELECT s.*, b.payload AS base_payload, b.identities AS base_identities,
    b.reused AS base_reused, b.call_id AS base_call,
    (SELECT coalesce(jsonb_agg(t -> 1 ORDER BY i) FILTER (WHERE {_int("t -> 1")}), '[]')
     FROM jsonb_array_elements(b.identities) WITH ORDINALITY x(t, i)) AS base_numbers
  FROM based s LEFT JOIN classed b ON b.o = s.base_o
), replayed AS (
  SELECT j.*,
    CASE WHEN j.class = 'success' AND j.o > j.base_o AND j.payload = j.base_payload
      THEN (SELECT coalesce(jsonb_agg(t -> 1 ORDER BY i), '[]')
            FROM jsonb_array_elements(j.identities) WITH ORDINALITY x(t, i)
            WHERE NOT j.base_numbers @> jsonb_build_array(t -> 1)) END AS new_numbers
  FROM judged j
), keyed_findings AS (
  SELECT journal_id, fseq, call_id, o, 0 AS part, 0 AS sub, 'key_outside_callback' AS rule,
    jsonb_build_array(key, class) AS args, scope
  FROM replayed WHERE class IN ('sent', 'honoured')
  UNION ALL
  SELECT journal_id, fseq, call_id, o, 0, 0, 'conflict_not_reported', jsonb_build_array(key),
    scope
  FROM replayed WHERE class = 'success' AND o > base_o AND payload <> base_payload
  UNION ALL
  SELECT journal_id, fseq, call_id, o, 0, 0,
    CASE WHEN jsonb_array_length(new_numbers) > 0 THEN 'replay_allocated_numbers'
         ELSE 'replay_identities_differ' END,
    jsonb_build_array(key, new_numbers), scope
  FROM replayed
  WHERE new_numbers IS NOT NULL
    AND (jsonb_array_length(new_numbers) > 0 OR identities <> base_identities)
  UNION ALL
  SELECT journal_id, fseq, call_id, o, 0, 1, 'replay_not_reused', jsonb_build_array(key), scope
  FROM replayed WHERE new_numbers IS NOT NULL AND NOT reused
), groups AS (
  SELECT
    r.scope,
    (array_agg(ws ORDER BY o))[1] AS ws, (array_agg(agent ORDER BY o))[1] AS agent,
    (array_agg(run ORDER BY o))[1] AS run, (array_agg(cb ORDER BY o))[1] AS cb,
    (array_agg(key ORDER BY o))[1] AS key,
    count(*) AS calls,
    count(*) FILTER (WHERE class = 'conflict') AS conflicts,
    count(*) FILTER (WHERE o = base_o AND NOT reused) AS created,
    count(*) FILTER (WHERE o = base_o AND reused)
      + count(*) FILTER (WHERE new_numbers IS NOT NULL) AS replays,
    (array_agg(base_numbers))[1] AS numbers,
    (array_agg(base_call))[1] AS baseline_call,
    coalesce((array_agg(base_reused))[1], false) AS baseline_reused,
    (array_agg(first_seq ORDER BY o))[1] AS first_seq,
    (array_agg(journal_id ORDER BY o))[1] AS journal_id
  FROM replayed r GROUP BY r.scope
), touch AS (
  SELECT c.o, c.ws, t ->> 0 AS ch, t -> 1 AS num, (t ->> 2)::bigint AS idx,
    (t ->> 3)::bigint AS inc, (t ->> 4)::bigint AS chg
  FROM calls c, jsonb_array_elements(c.touches) t
  WHERE c.touches IS NOT NULL
), claiming AS (
  SELECT c.o, c.journal_id, c.fseq, c.call_id, c.ws, {_text("c.data -> 'channel'")} AS ch,
    c.mutation,
    CASE WHEN c.data -> 'claimed' = 'true' THEN c.agent END AS desired,
    (l ->> 0)::boolean AS listed, l -> 1 AS num, (l ->> 2)::bigint AS pos
  FROM calls c, jsonb_array_elements(c.claims) l
  WHERE c.claims IS NOT NULL
), points AS (
  SELECT o, ws, ch, num, 't' AS role, inc, chg, idx, NULL::text AS holder FROM touch
  UNION ALL
  SELECT o, ws, ch, num, 's', 0, 0, 0, desired FROM claiming WHERE mutation
  UNION ALL
  SELECT o, ws, ch, num, 'c', 0, 0, 0, NULL FROM claiming
), keyed_points AS (
  -- The task's number as text that is equal where the jsonb values are (a number by its
  -- value: 1 and 1.0 alike), so the epochs' windows sort text, not jsonb.
  SELECT p.*,
    CASE jsonb_typeof(p.num) WHEN 'number' THEN 'n' || trim_scale(p.num::numeric)::text
      ELSE 'j' || p.num::text END COLLATE "C" AS task
  FROM points p
), epochs AS MATERIALIZED (
  SELECT p.*,
    coalesce(sum(inc) OVER (PARTITION BY ws, ch, task ORDER BY o
                            RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before,
    sum(inc) OVER (PARTITION BY ws, ch, task ORDER BY o
                   RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS through,
    max(CASE WHEN role = 's' THEN o END) OVER (PARTITION BY ws, ch, task ORDER BY o
                   RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS set_o
  FROM keyed_points p
), checked AS (
  SELECT cl.o, cl.journal_id, cl.fseq, cl.call_id, cl.ch, cl.num, cl.listed, cl.pos,
    cl.desired, s.holder,
    s.holder IS NOT DISTINCT FROM cl.desired AS same
  FROM claiming cl
  JOIN (SELECT DISTINCT o, ws, ch, num, before, set_o FROM epochs WHERE role = 'c') e
    ON e.o = cl.o AND e.ws IS NOT DISTINCT FROM cl.ws AND e.ch IS NOT DISTINCT FROM cl.ch
       AND e.num = cl.num
  JOIN (SELECT DISTINCT ON (o, ws, ch, num) o, ws, ch, num, holder, through
        FROM epochs WHERE role = 's') s
    ON s.o = e.set_o AND s.ws IS NOT DISTINCT FROM e.ws AND s.ch IS NOT DISTINCT FROM e.ch
       AND s.num = e.num AND s.through = e.before
), claim_findings AS (
  SELECT k.journal_id, k.fseq, k.call_id, k.o, 1 AS part, k.pos AS sub,
    CASE WHEN k.listed THEN 'claim_repeat_changed' ELSE 'claim_state_wrong' END AS rule,
    jsonb_build_array(k.ch, k.num, CASE WHEN k.listed THEN k.desired ELSE k.holder END) AS args,
    NULL::bigint AS scope
  FROM checked k
  WHERE k.listed = k.same
), rep AS (
  SELECT r.*,
    lag(r.o) OVER w AS prev_o,
    lag(r.ok) OVER w AS prev_ok
  FROM (
    SELECT c.o, c.sig, c.ok, c.journal_id, c.fseq, c.call_id, c.tool, c.safe FROM calls c
    WHERE c.fed AND c.sig IS NOT NULL AND c.outcome_kind IS NOT NULL
  ) r
  WINDOW w AS (PARTITION BY r.sig ORDER BY r.o)
), near AS MATERIALIZED (
  SELECT r.* FROM rep r WHERE r.prev_ok AND r.o - r.prev_o <= %(window)s
), states AS (
  SELECT o, array_agg(before + chg ORDER BY idx) AS after_epochs,
    array_agg(before ORDER BY idx) AS now_epochs
  FROM epochs
  WHERE role = 't' AND o IN (SELECT o FROM near UNION SELECT prev_o FROM near)
  GROUP BY o
), repeats AS (
  SELECT r.o, r.journal_id, r.fseq, r.call_id, r.tool, r.safe
  FROM near r
  LEFT JOIN states p ON p.o = r.prev_o
  LEFT JOIN states x ON x.o = r.o
  WHERE coalesce(p.after_epochs, '{{}}') = coalesce(x.now_epochs, '{{}}')
), hint_findings AS (
  SELECT journal_id, fseq, call_id, o, 2 AS part, 0 AS sub, 'idempotent_hint_unsafe' AS rule,
    jsonb_build_array(tool) AS args, NULL::bigint AS scope
  FROM repeats WHERE NOT safe AND tool = ANY(%(declared)s)
)
SELECT
  (SELECT coalesce(json_agg(json_build_array(
     g.ws, g.agent, g.run, g.cb, g.key, g.first_seq, g.journal_id, g.calls, g.created,
     g.replays, g.conflicts, g.numbers, g.baseline_call, g.baseline_reused, g.scope)), '[]')
   FROM groups g) AS groups,
  (SELECT coalesce(json_agg(json_build_array(journal_id, fseq, call_id, rule, args, o, part, sub,
                                             scope)), '[]')
   FROM (SELECT * FROM keyed_findings
         UNION ALL SELECT * FROM claim_findings
         UNION ALL SELECT * FROM hint_findings) q) AS findings,
  (SELECT coalesce(json_agg(json_build_array(tool, n, safe)), '[]')
   FROM (SELECT tool, count(*) AS n, count(*) FILTER (WHERE safe) AS safe
         FROM repeats GROUP BY tool) h) AS hints,
  n.calls,
  (SELECT count(*) FROM keyed) AS keyed,
  n.claim_calls,
  (SELECT count(DISTINCT o) FROM checked WHERE same) AS claim_repeats
FROM (SELECT count(*) AS calls,
        count(*) FILTER (WHERE fed AND tool = 'task_set_claim' AND ok) AS claim_calls
      FROM calls) n
"""


_CLOSE_ORDER: Final = 'ORDER BY phase, journal_id COLLATE "C", close_seq, first_seq'


def idempotency_query(
    *,
    hints: dict[str, bool],
    calls: str | None = None,
    call_params: dict[str, Any] | None = None,
    in_order: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The query :func:`idempotency_from` runs, and its parameters."""
    assert IDEMPOTENCY_SQL.count(_LINES) == 1 and IDEMPOTENCY_SQL.count(_CLOSE_ORDER) == 1
    sql = IDEMPOTENCY_SQL.replace(_LINES, calls or "true")
    if in_order:
        sql = sql.replace(_CLOSE_ORDER, 'ORDER BY journal_id COLLATE "C", first_seq')
    params = {
        **(call_params or {}),
        "window": REPEAT_WINDOW,
        "declared": sorted(tool for tool, declared in hints.items() if declared),
    }
    return sql, params


def idempotency_from(
    store_url: str | Instant,
    *,
    hints: dict[str, bool] | None = None,
    calls: str | None = None,
    call_params: dict[str, Any] | None = None,
    in_order: bool = False,
) -> IdempotencyResult:
    """``idempotency`` over the store, computed in SQL (see the module docstring); ``calls``,
    a condition on ``agentteam.call_lines c`` (named parameters ``call_params``), checks only
    the calls it selects, as ``report`` feeds the checker only the calls its filter keeps;
    ``in_order`` feeds the calls in the order of their first event, as ``report`` does
    (``iter_stories(in_order=True)``), not in the order they closed."""
    hints = declared_hints() if hints is None else hints
    sql, params = idempotency_query(
        hints=hints, calls=calls, call_params=call_params, in_order=in_order
    )
    with read_only(store_url) as conn:
        # Compiling the plan's ~300 expressions costs seconds (3.6 s of 4.7 on 100,000 events)
        # and saves little: the work is sorts and windows.
        conn.execute("SET jit = off")
        # Its windows sort the calls several times: at the default 4MB each sort of 20,000
        # calls spills to disk.
        conn.execute("SET work_mem = '32MB'")
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    group_rows, finding_rows, hint_rows, calls, keyed, claim_calls, claim_repeats = row
    violations: dict[int, int] = {}
    emitted: list[tuple[tuple[int, int, int], Finding]] = []
    for jid, seq, call_id, rule, args, o, part, sub, scope in finding_rows:
        if scope is not None:
            violations[scope] = violations.get(scope, 0) + 1
        finding = Finding(
            journal_id=jid, seq=seq, rule=rule, detail=_detail(rule, args), call_id=call_id
        )
        emitted.append(((o, part, sub), finding))
    groups = [_group(r, violations.get(r[-1], 0)) for r in group_rows]
    checks = {
        tool: HintCheck(tool=tool, declared=hints.get(tool), repeats=n, safe=safe, unsafe=n - safe)
        for tool, n, safe in hint_rows
    }
    for tool, declared in hints.items():
        checks.setdefault(tool, HintCheck(tool=tool, declared=declared))
    for check in checks.values():
        check.judge()
    findings = [f for _, f in sorted(emitted, key=lambda p: p[0])]  # the checker's order
    return IdempotencyResult(
        groups=sorted(groups, key=lambda g: (g.journal_id, g.first_seq)),
        hints=sorted(checks.values(), key=lambda h: h.tool),
        findings=sorted(findings, key=lambda f: (f.journal_id or "", f.seq or 0)),
        keyed_calls=int(keyed),
        claim_calls=int(claim_calls),
        claim_repeats=int(claim_repeats),
        calls=int(calls),
    )


def _group(row: list[Any], violations: int) -> KeyGroup:
    ws, agent, run, cb, key, first_seq, jid, calls, created, replays, conflicts = row[:11]
    numbers, baseline_call, baseline_reused = row[11:14]
    return KeyGroup(
        workspace_id=ws,
        agent_id=agent,
        workflow_run_id=run,
        callback_effect_id=cb,
        tool="task_create",
        key=key,
        first_seq=int(first_seq),
        journal_id=jid,
        calls=int(calls),
        created=int(created),
        replays=int(replays),
        conflicts=int(conflicts),
        violations=violations,
        numbers=list(numbers or []),
        baseline_call=baseline_call,
        baseline_reused=bool(baseline_reused),
    )


def _detail(rule: str, args: list[Any]) -> str:
    """The finding's text, as the local checker words it."""
    if rule == "key_outside_callback":
        key, how = args
        if how == "sent":
            return f"key {key!r} was sent upstream without a workflow callback"
        return f"key {key!r} honoured"
    if rule == "conflict_not_reported":
        return f"key {args[0]!r} reused with another payload succeeded instead of conflicting"
    if rule == "replay_allocated_numbers":
        return f"replay of key {args[0]!r} returned new task numbers {args[1][:10]}"
    if rule == "replay_identities_differ":
        return f"replay of key {args[0]!r} returned other tasks"
    if rule == "replay_not_reused":
        return f"replay of key {args[0]!r} lacks reused: true"
    if rule == "claim_repeat_changed":
        channel, number, holder = args
        return f"task {channel}#{number} already {_held(holder)}; the repeat changed it"
    if rule == "claim_state_wrong":
        channel, number, holder = args
        return f"task {channel}#{number} reported unchanged but was {_held(holder)}"
    return f"{args[0]} declares idempotentHint but an identical repeat changed state"
