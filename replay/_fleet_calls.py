"""The fleet store's call lines, kept at ingest: a report reads calls, not events.

``agentteam.call_lines`` holds one row per ``(journal_id, call_id)``: the line ``calls``
prints (the SQL twin of :meth:`CallStory.summary`, folding at most ``MAX_EVENTS_PER_CALL``
events) plus the few fields of its session's start the reports use. Invariants:

* It is derived, never evidence: ``agentteam.fold_calls(journal, first_seq, last_seq)`` refolds
  every call that has an event in that seq range from the events the store holds, and upserts
  their lines. The checked ingest calls it once per accepted batch (one marked hook line), in
  the batch's transaction, so the lines always equal a fold of the whole history: a call's
  events only ever arrive after the ones the store holds, its first event (``started_ts``, the
  partition key) and its session's start (an earlier seq) never change once it is seen.
* Partitioned by month of ``started_ts`` (the call's first event's ``ts``, as ``events`` is by
  ``ts``), with indexes on ``started_ts`` and ``(session_id)``: ``--since/--until`` prune
  partitions, ``--session`` and ``--journal`` use an index.
* ``agentteam.call_counts`` holds each journal's number of calls (a call is new when its first
  event is in the batch), so ``calls`` tells how many it scanned without counting them.
* Only the ingest writes them (the function is the owner's, not granted to anyone); DELETE and
  TRUNCATE are refused for everyone, each partition included.
"""

from __future__ import annotations

from typing import Final

from ._fleet_schema import partition_function
from ._fleet_store import MUTATION_FOLD, OUTCOME_KINDS, SESSION_DOC, SESSION_STARTED_OF_CALL
from ._story import MAX_EVENTS_PER_CALL

__all__ = ["CALLS_DDL", "LINE_COLUMNS", "fold_sql"]

# The columns of a line, in the table's order (after journal_id, call_id, started_ts).
LINE_COLUMNS: Final = (
    ("session_id", 'text COLLATE "C"'),
    ("tool", 'text COLLATE "C"'),
    ("requested_tool", 'text COLLATE "C"'),
    ("agent_id", 'text COLLATE "C"'),
    ("workspace_id", 'text COLLATE "C"'),
    ("client_name", 'text COLLATE "C"'),
    ("request_id", 'text COLLATE "C"'),
    ("first_seq", "bigint NOT NULL"),
    ("last_seq", "bigint NOT NULL"),
    ("started_at", 'text COLLATE "C" NOT NULL'),
    ("ended_at", 'text COLLATE "C" NOT NULL'),
    ("status", 'text COLLATE "C" NOT NULL'),
    ("error_code", 'text COLLATE "C"'),
    ("in_doubt", 'text COLLATE "C"'),
    ("bridge_ns", "bigint"),
    ("upstream_durations", "double precision[]"),
    ("upstream_requests", "bigint NOT NULL"),
    ("http_status", "integer"),
    ("token_refreshes", "bigint NOT NULL"),
    ("truncated", "boolean NOT NULL"),
    ("deprecated_uses", "bigint NOT NULL"),
    ("mutation", "boolean NOT NULL"),
    ("channel", 'text COLLATE "C"'),
    # The session start's client and agent (null when the store holds no start).
    ("session", "jsonb"),
    # --- idempotency fields (issue 30): what `idempotency --from` reads per call -----------
    ("received", "boolean NOT NULL"),
    ("closed_seq", "bigint"),
    ("outcome_seq", "bigint"),
    ("idem_workspace", 'text COLLATE "C"'),
    ("idem_agent", 'text COLLATE "C"'),
    ("idem_data", "jsonb"),
    ("idem_body", "jsonb"),
    ("idem_sig", "text"),
    ("idem_key", 'text COLLATE "C"'),
    ("idem_run", "jsonb"),
    ("idem_cb", "jsonb"),
    ("idem_payload", "jsonb"),
    # The tasks the call touched: [channel, number, index, epoch increment, change] each.
    ("idem_touches", "jsonb"),
    # A claim's tasks: [listed as changed, number, position] each.
    ("idem_claims", "jsonb"),
    # --- end of the idempotency fields -----------------------------------------------------
)


def truthy(expr: str) -> str:
    """Python's truth of a JSON value (``jsonb``): not null, false, 0, "", [] or {}."""
    return (
        f"(({expr}) IS NOT NULL AND ({expr}) NOT IN"
        " ('null'::jsonb, 'false', '0', '\"\"', '[]', '{}'))"
    )


def is_int(expr: str) -> str:
    """Whether a ``jsonb`` value is a JSON integer (Python ``isinstance(v, int)``)."""
    return f"coalesce(jsonb_typeof({expr}) = 'number' AND ({expr})::text ~ '^-?[0-9]+$', false)"


def text_of(expr: str) -> str:
    """The ``jsonb`` value's text when it is a JSON string, else null."""
    return f"CASE WHEN jsonb_typeof({expr}) = 'string' THEN ({expr}) #>> '{{}}' END"


def _context(name: str) -> str:
    """The injected value (when truthy; a string, else None) or the session's."""
    value = f"l.inj -> '{name}'"
    return f"CASE WHEN {truthy(value)} THEN {text_of(value)} ELSE l.session ->> '{name}' END"


# What Python's str.strip() removes (the local reader strips an argument key), as a literal.
# No code point past U+3000 is whitespace (tests/test_fleet_whitespace.py looks at every one
# under this Python): scanning them all cost ~90 ms of every command's start.
WHITESPACE_LAST: Final = 0x3000
_WHITESPACE: Final = (
    "U&'" + "".join(f"\\+{c:06X}" for c in range(WHITESPACE_LAST + 1) if chr(c).isspace()) + "'"
)
# Not a key scoped by a workflow callback: the body does not carry both of its ids.
_OUTSIDE: Final = " AND ".join(
    truthy(f"l.body -> '{name}'") for name in ("workflowRunId", "callbackEffectId")
)
# The result's data, only the members the idempotency check reads (a created task: only its
# identity, and only for task_create).
_DATA_KEPT: Final = "('reused', 'changed', 'claimed', 'unchanged', 'channel')"
_KEPT_DATA: Final = f"""(l.data - coalesce((SELECT array_agg(k) FROM jsonb_object_keys(l.data) k
    WHERE k NOT IN {_DATA_KEPT} AND NOT (k = 'tasks' AND l.tool = 'task_create')), '{{}}'))"""
_IDEM_DATA: Final = f"""CASE
    WHEN l.tool = 'task_create' AND jsonb_typeof(l.data -> 'tasks') = 'array' THEN jsonb_set(
      {_KEPT_DATA}, '{{tasks}}', (SELECT coalesce(jsonb_agg(
        CASE WHEN jsonb_typeof(t) = 'object' THEN jsonb_build_object(
          'channel', t -> 'channel', 'number', t -> 'number', 'scope_id', t -> 'scope_id')
        ELSE 'null'::jsonb END ORDER BY i), '[]')
        FROM jsonb_array_elements(l.data -> 'tasks') WITH ORDINALITY x(t, i)))
    ELSE {_KEPT_DATA} END"""


# How many changes the call made to the task x.num (the idempotency check's task epochs).
_CHANGES: Final = f"""CASE WHEN l.data IS NULL THEN 0
    WHEN l.tool = 'task_update' THEN CASE WHEN {truthy("l.data -> 'changed'")} THEN 1 ELSE 0 END
    WHEN l.tool = 'task_set_claim' THEN
      CASE WHEN jsonb_typeof(l.data -> 'changed') = 'array'
                AND l.data -> 'changed' @> jsonb_build_array(x.num) THEN 1 ELSE 0 END
    WHEN l.tool IN ('task_checkpoint', 'task_delete') THEN 1
    WHEN l.tool = 'task_create' THEN CASE WHEN {truthy("l.data -> 'reused'")} THEN 0 ELSE 1 END
    ELSE 0 END"""
# The tasks a call observed (its request's number or numbers, or the tasks it created), with
# what it changed: only a call received, with a body, that ended after its request or changed.
_TOUCHES: Final = f"""CASE WHEN l.received AND l.tool IS NOT NULL AND l.body IS NOT NULL
    AND (l.request IS NOT NULL AND l.outcome_kind IS NOT NULL OR l.data IS NOT NULL AND l.mutation)
  THEN (SELECT jsonb_agg(jsonb_build_array(
      x.ch, x.num, x.idx,
      CASE WHEN l.data IS NOT NULL AND l.mutation THEN {_CHANGES} ELSE 0 END,
      CASE WHEN l.data IS NOT NULL THEN {_CHANGES} ELSE 0 END) ORDER BY x.idx)
    FROM (
      SELECT {text_of("l.body -> 'channel'")} AS ch, l.body -> 'number' AS num, 1::bigint AS idx
      WHERE {is_int("l.body -> 'number'")}
      UNION ALL
      SELECT {text_of("l.body -> 'channel'")}, v, i FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof(l.body -> 'numbers') = 'array' THEN l.body -> 'numbers'
             ELSE '[]' END) WITH ORDINALITY y(v, i)
      WHERE NOT {is_int("l.body -> 'number'")} AND {is_int("v")}
      UNION ALL
      SELECT {text_of("t -> 'channel'")}, t -> 'number', i FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof(l.data -> 'tasks') = 'array' THEN l.data -> 'tasks'
             ELSE '[]' END) WITH ORDINALITY z(t, i)
      WHERE NOT {is_int("l.body -> 'number'")}
        AND jsonb_typeof(l.body -> 'numbers') IS DISTINCT FROM 'array'
        AND l.tool = 'task_create' AND jsonb_typeof(t) = 'object' AND {is_int("t -> 'number'")}
    ) x)
  END"""
# A claim's tasks as its result lists them: changed (in order), then unchanged.
_CLAIMS: Final = """CASE WHEN l.received AND l.tool = 'task_set_claim'
    AND jsonb_typeof(l.data -> 'claimed') = 'boolean'
  THEN (SELECT jsonb_agg(jsonb_build_array(x.listed, x.v, x.pos) ORDER BY x.pos) FROM (
      SELECT true AS listed, v, i AS pos FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof(l.data -> 'changed') = 'array' THEN l.data -> 'changed'
             ELSE '[]' END) WITH ORDINALITY a(v, i)
      UNION ALL
      SELECT false, v, 1000000000 + i FROM jsonb_array_elements(
        CASE WHEN jsonb_typeof(l.data -> 'unchanged') = 'array' THEN l.data -> 'unchanged'
             ELSE '[]' END) WITH ORDINALITY b(v, i)
    ) x)
  END"""


def fold_sql(scope: str) -> str:
    """One row per call of the events ``scope`` (a condition on ``events e``) selects, as
    ``CallStory.summary()`` sees it (its first MAX_EVENTS_PER_CALL events).

    A call's session start is found by seq (``started``), and each start's document is built
    once (``starts``), not once per call. ``lines`` and ``placed`` are MATERIALIZED: the columns
    they compute with a subquery (``inj``, ``data``, ``body``, ``session``) are read by many
    expressions after them, and an inlined CTE would run each subquery again at every reference
    (about half the fold's time)."""
    return f"""
WITH ev AS (
  SELECT e.*, agentteam.payload_doc(e.payload) AS doc,
    row_number() OVER (PARTITION BY e.journal_id, e.call_id ORDER BY e.seq) AS n
  FROM agentteam.events e
  WHERE e.call_id IS NOT NULL AND {scope}
), folded AS (
  SELECT
    journal_id, call_id,
    (array_agg(ts ORDER BY seq))[1] AS started_ts,
    (array_agg(session_id ORDER BY seq))[1] AS session_id,
    (array_agg(gen_ai_tool_name ORDER BY seq DESC)
      FILTER (WHERE gen_ai_tool_name <> ''))[1] AS tool,
    (array_agg(gen_ai_tool_name ORDER BY seq))[1] AS requested_tool,
    (array_agg(jsonrpc_request_id ORDER BY seq))[1] AS request_id,
    min(seq) AS first_seq,
    max(seq) AS last_seq,
    (array_agg(ts_wall ORDER BY seq))[1] AS started_at,
    (array_agg(ts_wall ORDER BY seq DESC))[1] AS ended_at,
    (array_agg(ts_mono_ns ORDER BY seq) FILTER (WHERE kind = 'call_received'))[1] AS received_ns,
    (array_agg(kind ORDER BY seq DESC) FILTER (WHERE kind IN {OUTCOME_KINDS}))[1] AS outcome_kind,
    (array_agg(doc ->> 'error_code' ORDER BY seq DESC)
      FILTER (WHERE kind IN {OUTCOME_KINDS}))[1] AS outcome_code,
    (array_agg(ts_mono_ns ORDER BY seq DESC)
      FILTER (WHERE kind IN {OUTCOME_KINDS}))[1] AS outcome_ns,
    (array_agg(doc ORDER BY seq DESC) FILTER (WHERE kind IN {OUTCOME_KINDS}))[1] AS outcome,
    count(*) FILTER (WHERE kind = 'upstream_request') AS upstream_requests,
    {MUTATION_FOLD} AS mutation,
    (array_agg(kind ORDER BY seq DESC)
      FILTER (WHERE kind IN ('upstream_request', 'upstream_response')))[1] AS last_upstream,
    (array_agg((doc ->> 'status')::int ORDER BY seq DESC)
      FILTER (WHERE kind = 'upstream_response'))[1] AS http_status,
    array_agg((doc ->> 'duration_ms')::float8 ORDER BY seq)
      FILTER (WHERE kind = 'upstream_response'
              AND jsonb_typeof(doc -> 'duration_ms') = 'number') AS upstream_durations,
    count(*) FILTER (WHERE kind = 'token_refreshed') AS token_refreshes,
    count(*) FILTER (WHERE kind = 'deprecated_usage') AS deprecated_uses,
    (array_agg(doc -> 'body' ->> 'channel' ORDER BY seq)
      FILTER (WHERE kind = 'upstream_request'
              AND jsonb_typeof(doc -> 'body' -> 'channel') = 'string'))[1] AS request_channel,
    (array_agg(doc -> 'fields' ORDER BY seq) FILTER (WHERE kind = 'context_injected'))[1]
      AS injected,
    -- idempotency fields
    (array_agg(doc -> 'arguments' ORDER BY seq) FILTER (WHERE kind = 'call_received'))[1]
      AS arguments,
    bool_or(kind = 'call_received') AS received,
    min(seq) FILTER (WHERE kind IN {OUTCOME_KINDS}) AS closed_seq,
    (array_agg(seq ORDER BY seq DESC) FILTER (WHERE kind IN {OUTCOME_KINDS}))[1] AS outcome_seq,
    (array_agg(doc ORDER BY seq DESC) FILTER (WHERE kind = 'upstream_request'))[1] AS request
  FROM ev
  WHERE n <= {MAX_EVENTS_PER_CALL}
  GROUP BY journal_id, call_id
), started AS MATERIALIZED (
  SELECT f.*, {SESSION_STARTED_OF_CALL} AS start_seq FROM folded f
), starts AS MATERIALIZED (
  SELECT st.journal_id, st.seq, {SESSION_DOC.format(s="st")} AS doc FROM agentteam.events st
  WHERE (st.journal_id, st.seq) IN (SELECT DISTINCT x.journal_id, x.start_seq FROM started x)
), lines AS MATERIALIZED (
  SELECT
    f.*,
    CASE f.outcome_kind
      WHEN 'call_result' THEN 'result' WHEN 'call_error' THEN 'error'
      WHEN 'call_rejected' THEN 'rejected' WHEN 'call_cancelled' THEN 'cancelled'
      ELSE CASE WHEN f.mutation THEN 'in_doubt' ELSE 'incomplete' END
    END AS status,
    CASE WHEN f.outcome_kind IN ('call_error', 'call_rejected') THEN f.outcome_code END
      AS error_code,
    f.outcome_ns - f.received_ns AS bridge_ns,
    coalesce(
      (SELECT x.f ->> 'value' FROM jsonb_array_elements(
         CASE WHEN jsonb_typeof(f.injected) = 'array' THEN f.injected ELSE '[]' END)
         WITH ORDINALITY x(f, i)
       WHERE x.f ->> 'name' = 'agent_id' ORDER BY x.i DESC LIMIT 1),
      '') AS injected_agent,
    coalesce(
      (SELECT x.f ->> 'value' FROM jsonb_array_elements(
         CASE WHEN jsonb_typeof(f.injected) = 'array' THEN f.injected ELSE '[]' END)
         WITH ORDINALITY x(f, i)
       WHERE x.f ->> 'name' = 'workspace_id' ORDER BY x.i DESC LIMIT 1),
      '') AS injected_workspace,
    s.doc AS session,
    CASE WHEN f.outcome_kind = 'call_result' THEN coalesce(
      (f.outcome ->> 'truncated')::boolean, false) ELSE false END AS truncated,
    coalesce(
      f.request_channel,
      CASE WHEN f.outcome_kind = 'call_result' THEN coalesce(
        CASE WHEN jsonb_typeof(f.outcome -> 'result' -> 'data' -> 'channel') = 'string'
             THEN f.outcome -> 'result' -> 'data' ->> 'channel' END,
        CASE WHEN jsonb_typeof(f.outcome -> 'result' -> 'data' -> 'task' -> 'channel') = 'string'
             THEN f.outcome -> 'result' -> 'data' -> 'task' ->> 'channel' END) END
    ) AS channel,
    -- idempotency fields: the injected context by name, the result's data, the request's body
    (SELECT jsonb_object_agg(x.f ->> 'name', x.f -> 'value' ORDER BY x.i)
     FROM jsonb_array_elements(CASE WHEN jsonb_typeof(f.injected) = 'array' THEN f.injected
                                    ELSE '[]' END) WITH ORDINALITY x(f, i)
     WHERE jsonb_typeof(x.f -> 'name') = 'string') AS inj,
    CASE WHEN f.outcome_kind = 'call_result'
              AND jsonb_typeof(f.outcome -> 'result' -> 'data') = 'object'
         THEN f.outcome -> 'result' -> 'data' END AS data,
    CASE WHEN jsonb_typeof(f.request -> 'body') = 'object' THEN f.request -> 'body' END AS body
  FROM started f
  LEFT JOIN starts s ON s.journal_id = f.journal_id AND s.seq = f.start_seq
), placed AS MATERIALIZED (
  SELECT l.*,
    {_context("workspace_id")} AS idem_workspace,
    {_context("agent_id")} AS idem_agent,
    CASE WHEN l.tool = 'task_create' THEN
      CASE WHEN jsonb_typeof(l.body -> 'idempotencyKey') = 'string'
             THEN l.body ->> 'idempotencyKey'
           WHEN jsonb_typeof(l.arguments -> 'idempotency_key') = 'string'
             THEN btrim(l.arguments ->> 'idempotency_key', {_WHITESPACE})
      END END AS idem_key
  FROM lines l
)
SELECT
  l.journal_id, l.call_id, l.started_ts, l.session_id, l.tool, l.requested_tool,
  coalesce(nullif(l.injected_agent, ''), l.session ->> 'agent_id') AS agent_id,
  coalesce(nullif(l.injected_workspace, ''), l.session ->> 'workspace_id') AS workspace_id,
  l.session ->> 'client_name' AS client_name,
  l.request_id, l.first_seq, l.last_seq, l.started_at, l.ended_at, l.status, l.error_code,
  CASE WHEN NOT l.mutation THEN NULL
       WHEN l.outcome_kind IS NULL THEN 'no_outcome'
       WHEN l.outcome_kind = 'call_cancelled' AND l.last_upstream = 'upstream_request'
         THEN 'cancelled_in_flight'
       WHEN l.error_code IN ('outcome_unknown', 'internal_error') THEN l.error_code
  END AS in_doubt,
  l.bridge_ns, l.upstream_durations, l.upstream_requests, l.http_status, l.token_refreshes,
  l.truncated, l.deprecated_uses, l.mutation, l.channel,
  CASE WHEN l.session IS NOT NULL THEN jsonb_build_object(
    'client_name', l.session -> 'client_name', 'client_version', l.session -> 'client_version',
    'agent_id', l.session -> 'agent_id') END AS session,
  l.received, l.closed_seq, l.outcome_seq, l.idem_workspace, l.idem_agent,
  {_IDEM_DATA} AS idem_data,
  l.body - coalesce((SELECT array_agg(k) FROM jsonb_object_keys(l.body) k
                     WHERE k NOT IN ('channel', 'number', 'numbers')), '{{}}') AS idem_body,
  CASE WHEN l.request IS NOT NULL THEN md5(jsonb_build_array(
    l.idem_workspace, l.idem_agent, l.tool, l.request -> 'method', l.request -> 'route',
    l.request -> 'body')::text) END AS idem_sig,
  l.idem_key,
  CASE WHEN l.idem_key IS NOT NULL THEN nullif(
    CASE WHEN l.body IS NOT NULL AND NOT ({_OUTSIDE}) THEN l.body -> 'workflowRunId'
         ELSE l.inj -> 'workflow_run_id' END, 'null') END AS idem_run,
  CASE WHEN l.idem_key IS NOT NULL THEN nullif(
    CASE WHEN l.body IS NOT NULL AND NOT ({_OUTSIDE}) THEN l.body -> 'callbackEffectId'
         ELSE l.inj -> 'callback_effect_id' END, 'null') END AS idem_cb,
  CASE WHEN l.idem_key IS NOT NULL
       THEN l.body - 'idempotencyKey' - 'workflowRunId' - 'callbackEffectId' END
    AS idem_payload,
  {_TOUCHES} AS idem_touches,
  {_CLAIMS} AS idem_claims
FROM placed l
"""


_NAMES: Final = ", ".join(("journal_id", "call_id", "started_ts", *(n for n, _ in LINE_COLUMNS)))
_UPDATE: Final = ", ".join(f"{n} = EXCLUDED.{n}" for n, _ in LINE_COLUMNS)
_TABLE: Final = ",\n  ".join(f"{n} {t}" for n, t in LINE_COLUMNS)

CALLS_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS agentteam.call_lines (
  journal_id text COLLATE "C" NOT NULL,
  call_id text COLLATE "C" NOT NULL,
  started_ts timestamptz NOT NULL,
  {_TABLE},
  PRIMARY KEY (journal_id, call_id, started_ts)
) PARTITION BY RANGE (started_ts);
CREATE INDEX IF NOT EXISTS call_lines_started ON agentteam.call_lines (started_ts);
CREATE INDEX IF NOT EXISTS call_lines_session ON agentteam.call_lines (session_id);
CREATE TABLE IF NOT EXISTS agentteam.call_counts (
  journal_id text PRIMARY KEY REFERENCES agentteam.journals,
  calls bigint NOT NULL
);
CREATE OR REPLACE TRIGGER call_lines_append_only BEFORE DELETE ON agentteam.call_lines
  FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER call_lines_no_truncate BEFORE TRUNCATE ON agentteam.call_lines
  FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER call_counts_append_only BEFORE DELETE ON agentteam.call_counts
  FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER call_counts_no_truncate BEFORE TRUNCATE ON agentteam.call_counts
  FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();

{partition_function("ensure_call_partition", "call_lines", "started_ts", definer=False)}

-- Refold the calls with an event in seq a_first..a_last of the journal (the ingest's hook).
CREATE OR REPLACE FUNCTION agentteam.fold_calls(a_journal text, a_first bigint, a_last bigint)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  touched text[];
  low bigint;
  added bigint;
BEGIN
  SELECT array_agg(DISTINCT e.call_id) INTO touched FROM agentteam.events e
  WHERE e.journal_id = a_journal AND e.seq BETWEEN a_first AND a_last AND e.call_id IS NOT NULL;
  IF touched IS NULL THEN
    -- HOOK (replay/_fleet_idem_state.py): a session's end may settle calls.
    PERFORM agentteam.fold_idem(a_journal, a_first);
    RETURN;
  END IF;
  -- Their events lie in seq low..a_last: a call seen before starts at its line's first_seq.
  SELECT least(a_first, min(c.first_seq)) INTO low FROM agentteam.call_lines c
  WHERE c.journal_id = a_journal AND c.call_id = ANY (touched);
  PERFORM agentteam.ensure_call_partition(m) FROM (
    SELECT DISTINCT (date_trunc('month', e.ts AT TIME ZONE 'UTC'))::date AS m
    FROM agentteam.events e
    WHERE e.journal_id = a_journal AND e.seq BETWEEN a_first AND a_last
      AND e.call_id IS NOT NULL) months;
  WITH folded AS (
    {
    fold_sql(
        "e.journal_id = a_journal AND e.seq BETWEEN low AND a_last AND e.call_id = ANY (touched)"
    )
}
  ), up AS (
    INSERT INTO agentteam.call_lines ({_NAMES})
    SELECT {_NAMES} FROM folded
    ON CONFLICT (journal_id, call_id, started_ts) DO UPDATE SET {_UPDATE}
    RETURNING first_seq
  )
  SELECT count(*) FILTER (WHERE first_seq >= a_first) INTO added FROM up;
  INSERT INTO agentteam.call_counts AS c (journal_id, calls) VALUES (a_journal, added)
  ON CONFLICT (journal_id) DO UPDATE SET calls = c.calls + EXCLUDED.calls;
  -- HOOK (replay/_fleet_idem_state.py): the idempotency state, from the lines just folded.
  PERFORM agentteam.fold_idem(a_journal, low);
END $$;
REVOKE ALL ON FUNCTION agentteam.fold_calls(text, bigint, bigint),
  agentteam.ensure_call_partition(date) FROM PUBLIC;
"""
