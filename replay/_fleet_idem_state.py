"""The idempotency check's state, kept per journal at ingest (store schema 7, issue 30).

``report --from`` feeds the checker (``_fleet_idempotency``, ``in_order``) the calls in the
order ``(journal_id COLLATE "C", first_seq)``: journal after journal. Its state machine crosses
journals only through shared keys (a key scope, a task, a call signature), so each journal's
part is computed once, at ingest, *relative* to the journal (as if it were fed first), and the
few answers that depend on earlier journals are left as small "question" rows the report
answers (``_fleet_idem_kept``). Invariants:

* **Derived, the server's.** ``agentteam.fold_idem(journal, low)`` runs in the ingest's
  transaction as the store's owner (called by ``fold_calls`` and ``refold_erased``, not granted
  to anyone); the shipping and reading logins may only SELECT the ``idem_*`` tables.
* **A frontier.** A journal's calls are folded in ``first_seq`` order up to the first call not
  yet *settled* (no outcome, its session not ended, and no other session begun after it in the
  journal: a journal has one writer at a time, so a later session means the call's writer is
  gone, killed before it could end its session): a new call's first event always
  follows the ones the store holds, so the numbering ``jo`` (the call's place in its journal,
  every call line counted) never changes, and ``idem_journals.calls`` equals the journal's
  ``call_counts`` exactly when its tail is empty. A refold that touches a call already folded
  (a late event of a settled call, an erasure) resets the journal's state, and it is folded
  again from its first call.
* **Relative state.** Per task (``idem_tasks``): the changes its journal made (``through``) and
  its journal's last claim set (holder, ``through`` when set); per signature (``idem_sigs``):
  the journal's first call of it (what a repeat of an earlier journal's call would compare) and
  its last (what a later call compares with); per key scope (``idem_scopes``): the group's
  counts and the journal's own baseline, each success kept (``idem_successes``) to be judged
  again when an earlier journal holds the scope's baseline.
* **Questions.** A claim that finds no claim set of its task in its journal and no change before
  it there (``idem_claimq``), a repeat in its journal whose two calls name other tasks
  (``idem_repq``, the epochs then differ by the earlier journals' changes), and each
  signature's first call: answered at report time from the earlier journals' rows. Everything
  else (findings, hint counts, unsafe repeats, claim repeats) is final per journal.
* The repeat window (``REPEAT_WINDOW``) is kept with the state; a report with another one
  does not use it.
* Costs, by construction: about 49 us of server CPU a call at ingest (docs/performance.md);
  a frontier held back by a call never answered in a session still open (the journal's last)
  keeps the journal's reports on the statement until that session ends or another begins, and
  each batch re-reads its calls from that call on; a reset folds
  the journal again from its first call, in the transaction that caused it. A scope's run and
  callback ids are compared as ``jsonb`` text (``1`` and ``1.0`` differ here, not in the
  statement; the bridge writes strings).
"""

from __future__ import annotations

from typing import Final

from ._fleet_calls import is_int, text_of, truthy
from ._fleet_idempotency import checked_fields
from ._idempotency import REPEAT_WINDOW

__all__ = ["IDEM_STATE_DDL", "STATE_TABLES"]

STATE_TABLES: Final = (
    "idem_journals",
    "idem_scopes",
    "idem_successes",
    "idem_tasks",
    "idem_sigs",
    "idem_claimq",
    "idem_repq",
    "idem_findings",
    "idem_hints",
    "idem_unsafe",
)


def _task(ws: str, ch: str, num: str) -> str:
    """A task's key as text: equal where the checker's windows put two touches in one task (a
    number by its value, 1 and 1.0 alike)."""
    return (
        f"jsonb_build_array({ws}, {ch}, CASE jsonb_typeof({num}) WHEN 'number'"
        f" THEN 'n' || trim_scale(({num})::numeric)::text ELSE 'j' || ({num})::text END)::text"
    )


_TABLES: Final = """
CREATE TABLE IF NOT EXISTS agentteam.idem_journals (
  journal_id text COLLATE "C" PRIMARY KEY,
  done_seq bigint NOT NULL,
  calls bigint NOT NULL,
  keyed bigint NOT NULL,
  claim_calls bigint NOT NULL,
  claim_repeats bigint NOT NULL,
  repeat_window bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS agentteam.idem_scopes (
  journal_id text COLLATE "C" NOT NULL,
  scope text COLLATE "C" NOT NULL,
  ws text COLLATE "C", agent text COLLATE "C", run jsonb, cb jsonb, key text COLLATE "C",
  first_jo bigint NOT NULL, first_seq bigint NOT NULL,
  calls bigint NOT NULL, conflicts bigint NOT NULL, created bigint NOT NULL,
  replays bigint NOT NULL,
  base_jo bigint, base_call text COLLATE "C", base_payload jsonb, base_identities jsonb,
  base_numbers jsonb, base_reused boolean,
  PRIMARY KEY (journal_id, scope)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_successes (
  journal_id text COLLATE "C" NOT NULL,
  jo bigint NOT NULL,
  scope text COLLATE "C" NOT NULL,
  call_id text COLLATE "C" NOT NULL, fseq bigint NOT NULL,
  payload jsonb, identities jsonb NOT NULL, reused boolean NOT NULL,
  PRIMARY KEY (journal_id, jo)
);
CREATE INDEX IF NOT EXISTS idem_successes_scope ON agentteam.idem_successes (scope, journal_id);
CREATE TABLE IF NOT EXISTS agentteam.idem_tasks (
  journal_id text COLLATE "C" NOT NULL,
  task text COLLATE "C" NOT NULL,
  through bigint NOT NULL,
  set_holder text COLLATE "C",
  set_through bigint,
  PRIMARY KEY (journal_id, task)
);
CREATE INDEX IF NOT EXISTS idem_tasks_task ON agentteam.idem_tasks (task, journal_id);
CREATE TABLE IF NOT EXISTS agentteam.idem_sigs (
  journal_id text COLLATE "C" NOT NULL,
  sig text COLLATE "C" NOT NULL,
  first_jo bigint NOT NULL, first_call text COLLATE "C" NOT NULL, first_fseq bigint NOT NULL,
  first_tool text COLLATE "C" NOT NULL, first_safe boolean NOT NULL,
  first_tasks text[] NOT NULL, first_now bigint[] NOT NULL,
  last_jo bigint NOT NULL, last_ok boolean NOT NULL,
  last_tasks text[] NOT NULL, last_after bigint[] NOT NULL,
  PRIMARY KEY (journal_id, sig)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_claimq (
  journal_id text COLLATE "C" NOT NULL,
  jo bigint NOT NULL, pos bigint NOT NULL,
  task text COLLATE "C" NOT NULL,
  call_id text COLLATE "C" NOT NULL, fseq bigint NOT NULL,
  ch text COLLATE "C", num jsonb, listed boolean NOT NULL, desired text COLLATE "C",
  counted boolean NOT NULL,
  PRIMARY KEY (journal_id, jo, pos)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_repq (
  journal_id text COLLATE "C" NOT NULL,
  jo bigint NOT NULL,
  call_id text COLLATE "C" NOT NULL, fseq bigint NOT NULL,
  tool text COLLATE "C" NOT NULL, safe boolean NOT NULL,
  prev_tasks text[] NOT NULL, prev_after bigint[] NOT NULL,
  tasks text[] NOT NULL, now bigint[] NOT NULL,
  PRIMARY KEY (journal_id, jo)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_findings (
  journal_id text COLLATE "C" NOT NULL,
  jo bigint NOT NULL, part integer NOT NULL, sub bigint NOT NULL,
  call_id text COLLATE "C" NOT NULL, fseq bigint NOT NULL,
  rule text COLLATE "C" NOT NULL, args jsonb NOT NULL,
  scope text COLLATE "C", judged boolean NOT NULL,
  PRIMARY KEY (journal_id, jo, part, sub)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_hints (
  journal_id text COLLATE "C" NOT NULL,
  tool text COLLATE "C" NOT NULL,
  n bigint NOT NULL, safe bigint NOT NULL,
  PRIMARY KEY (journal_id, tool)
);
CREATE TABLE IF NOT EXISTS agentteam.idem_unsafe (
  journal_id text COLLATE "C" NOT NULL,
  jo bigint NOT NULL,
  call_id text COLLATE "C" NOT NULL, fseq bigint NOT NULL,
  tool text COLLATE "C" NOT NULL,
  PRIMARY KEY (journal_id, jo)
);
"""

_RESET: Final = "\n".join(
    f"  DELETE FROM agentteam.{t} WHERE journal_id = a_journal;" for t in STATE_TABLES
)

# The line's fields as the checker reads them (the `placed` step of IDEMPOTENCY_SQL).
_LINE: Final = f"""
  SELECT l.call_id, l.first_seq, l.received AND l.tool IS NOT NULL AS fed, l.tool,
    coalesce(l.outcome_seq, l.last_seq) AS fseq,
    l.status IN ('result', 'error', 'rejected', 'cancelled') AS has_outcome,
    l.mutation, l.idem_workspace AS ws, l.idem_agent AS agent, l.idem_data IS NOT NULL AS ok,
    {checked_fields("l")}, l.idem_sig AS sig,
    l.error_code, l.idem_key AS key, l.idem_run AS run, l.idem_cb AS cb,
    l.idem_payload AS payload, l.idem_touches AS touches, l.idem_claims AS claims,
    l.closed_seq IS NOT NULL OR EXISTS (
      SELECT 1 FROM agentteam.events x
      WHERE x.journal_id = l.journal_id AND x.session_id = l.session_id
        AND x.kind = 'session_ended' AND x.call_id IS NULL AND x.seq > l.first_seq)
    -- or another session began after it: one writer holds a journal, so the call's is gone
    OR EXISTS (
      SELECT 1 FROM agentteam.events x
      WHERE x.journal_id = l.journal_id AND x.session_id <> l.session_id
        AND x.kind = 'session_started' AND x.call_id IS NULL AND x.seq > l.first_seq) AS settled
  FROM agentteam.call_lines l
  -- the calls after the frontier, found by their events' seqs (the events' key), not by a
  -- scan of every line of the journal at every batch
  WHERE l.journal_id = a_journal AND l.call_id IN (
      SELECT e.call_id FROM agentteam.events e
      WHERE e.journal_id = a_journal AND e.seq > st.done_seq AND e.call_id IS NOT NULL)
    AND l.first_seq > st.done_seq AND (a_upto IS NULL OR l.first_seq <= a_upto)
  ORDER BY l.first_seq"""


def _finding(part: str, sub: str, rule: str, args: str, scope: str, judged: str) -> str:
    return f"""INSERT INTO agentteam.idem_findings
        (journal_id, jo, part, sub, call_id, fseq, rule, args, scope, judged)
      VALUES (a_journal, v_jo, {part}, {sub}, c.call_id, c.fseq, {rule}, {args}, {scope},
              {judged});"""


_FOLD: Final = f"""
CREATE OR REPLACE FUNCTION agentteam.idem_reset(a_journal text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
{_RESET}
END $$;

-- Fold the journal's settled calls after its frontier into its idempotency state; a_low is the
-- first seq of the calls the caller refolded (at or before the frontier: start again); a_upto
-- stops before the calls that start after it (a benchmark's batch).
CREATE OR REPLACE FUNCTION agentteam.fold_idem(
  a_journal text, a_low bigint, a_upto bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  st agentteam.idem_journals;
  c record;
  sc agentteam.idem_scopes;
  sg agentteam.idem_sigs;
  el record;
  v_jo bigint;
  v_done bigint;
  v_keyed bigint;
  v_claim_calls bigint;
  v_claim_repeats bigint;
  v_hints jsonb := '{{}}';
  v_cls text;
  v_sk text;
  v_tk text;
  v_ch text;
  v_desired text;
  v_identities jsonb;
  v_numbers jsonb;
  v_fresh jsonb;
  v_reused boolean;
  v_known record;
  v_same boolean;
  v_local_same boolean;
  v_asked boolean;
  v_keys text[];
  v_nows bigint[];
  v_afters bigint[];
  v_incs bigint[];
  v_b bigint;
BEGIN
  SELECT * INTO st FROM agentteam.idem_journals WHERE journal_id = a_journal FOR UPDATE;
  IF NOT FOUND OR a_low <= st.done_seq OR st.repeat_window <> {REPEAT_WINDOW} THEN
    PERFORM agentteam.idem_reset(a_journal);
    INSERT INTO agentteam.idem_journals VALUES (a_journal, 0, 0, 0, 0, 0, {REPEAT_WINDOW})
    RETURNING * INTO st;
  END IF;
  v_jo := st.calls; v_done := st.done_seq; v_keyed := st.keyed;
  v_claim_calls := st.claim_calls; v_claim_repeats := st.claim_repeats;
  FOR c IN {_LINE}
  LOOP
    EXIT WHEN NOT c.settled;
    v_jo := v_jo + 1;
    v_done := c.first_seq;
    IF c.fed AND c.tool = 'task_set_claim' AND c.ok THEN
      v_claim_calls := v_claim_calls + 1;
    END IF;
    -- keyed creates: the scope's group, its baseline in this journal, the findings
    IF c.fed AND c.tool = 'task_create' AND c.key IS NOT NULL THEN
      v_keyed := v_keyed + 1;
      v_cls := CASE WHEN NOT ({truthy("c.run")} AND {truthy("c.cb")})
                  THEN CASE WHEN c.body IS NOT NULL THEN 'sent'
                            WHEN c.data IS NOT NULL THEN 'honoured' END
                  WHEN c.error_code = 'idempotency_conflict' THEN 'conflict'
                  WHEN c.data IS NULL OR c.body IS NULL THEN NULL
                  ELSE 'success' END;
      v_sk := jsonb_build_array(c.ws, c.agent, c.run, c.cb, c.key)::text;
      SELECT * INTO sc FROM agentteam.idem_scopes s
      WHERE s.journal_id = a_journal AND s.scope = v_sk;
      IF NOT FOUND THEN
        INSERT INTO agentteam.idem_scopes
          (journal_id, scope, ws, agent, run, cb, key, first_jo, first_seq, calls, conflicts,
           created, replays)
        VALUES (a_journal, v_sk, c.ws, c.agent, c.run, c.cb, c.key, v_jo, c.first_seq, 0, 0, 0, 0)
        RETURNING * INTO sc;
      END IF;
      sc.calls := sc.calls + 1;
      IF v_cls IN ('sent', 'honoured') THEN
        {
    _finding("0", "0", "'key_outside_callback'", "jsonb_build_array(c.key, v_cls)", "v_sk", "false")
}
      ELSIF v_cls = 'conflict' THEN
        sc.conflicts := sc.conflicts + 1;
      ELSIF v_cls = 'success' THEN
        v_identities := (
          SELECT coalesce(jsonb_agg(jsonb_build_array(t -> 'channel', t -> 'number',
                                                      t -> 'scope_id') ORDER BY i), '[]')
          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(c.data -> 'tasks') = 'array'
                                         THEN c.data -> 'tasks' ELSE '[]' END)
            WITH ORDINALITY x(t, i)
          WHERE jsonb_typeof(t) = 'object');
        v_reused := coalesce(c.data -> 'reused' = 'true', false);
        INSERT INTO agentteam.idem_successes
        VALUES (a_journal, v_jo, v_sk, c.call_id, c.fseq, c.payload, v_identities, v_reused);
        IF sc.base_jo IS NULL THEN
          v_numbers := (SELECT coalesce(jsonb_agg(t -> 1 ORDER BY i)
                                        FILTER (WHERE {is_int("t -> 1")}), '[]')
                      FROM jsonb_array_elements(v_identities) WITH ORDINALITY x(t, i));
          sc.base_jo := v_jo; sc.base_call := c.call_id; sc.base_payload := c.payload;
          sc.base_identities := v_identities; sc.base_numbers := v_numbers;
          sc.base_reused := v_reused;
          IF v_reused THEN sc.replays := sc.replays + 1; ELSE sc.created := sc.created + 1; END IF;
        ELSIF (c.payload <> sc.base_payload) IS TRUE THEN
          {
    _finding("0", "0", "'conflict_not_reported'", "jsonb_build_array(c.key)", "v_sk", "true")
}
        ELSIF (c.payload = sc.base_payload) IS TRUE THEN
          sc.replays := sc.replays + 1;
          v_fresh := (SELECT coalesce(jsonb_agg(t -> 1 ORDER BY i), '[]')
                    FROM jsonb_array_elements(v_identities) WITH ORDINALITY x(t, i)
                    WHERE NOT sc.base_numbers @> jsonb_build_array(t -> 1));
          IF jsonb_array_length(v_fresh) > 0 THEN
            {
    _finding(
        "0", "0", "'replay_allocated_numbers'", "jsonb_build_array(c.key, v_fresh)", "v_sk", "true"
    )
}
          ELSIF v_identities <> sc.base_identities THEN
            {
    _finding(
        "0", "0", "'replay_identities_differ'", "jsonb_build_array(c.key, v_fresh)", "v_sk", "true"
    )
}
          END IF;
          IF NOT v_reused THEN
            {_finding("0", "1", "'replay_not_reused'", "jsonb_build_array(c.key)", "v_sk", "true")}
          END IF;
        END IF;
      END IF;
      UPDATE agentteam.idem_scopes s SET calls = sc.calls, conflicts = sc.conflicts,
        created = sc.created, replays = sc.replays, base_jo = sc.base_jo,
        base_call = sc.base_call, base_payload = sc.base_payload,
        base_identities = sc.base_identities, base_numbers = sc.base_numbers,
        base_reused = sc.base_reused
      WHERE s.journal_id = a_journal AND s.scope = v_sk;
    END IF;
    -- claims read their tasks' state before this call changes it
    IF c.claims IS NOT NULL THEN
      v_ch := {text_of("c.data -> 'channel'")};
      v_desired := CASE WHEN c.data -> 'claimed' = 'true' THEN c.agent END;
      v_local_same := false;
      v_asked := false;
      FOR el IN SELECT (l ->> 0)::boolean AS listed, l -> 1 AS num, (l ->> 2)::bigint AS pos
                FROM jsonb_array_elements(c.claims) l
      LOOP
        v_tk := {_task("c.ws", "v_ch", "el.num")};
        SELECT t.through, t.set_holder, t.set_through INTO v_known FROM agentteam.idem_tasks t
        WHERE t.journal_id = a_journal AND t.task = v_tk;
        IF FOUND AND v_known.set_through IS NOT NULL THEN
          IF v_known.set_through = v_known.through THEN
            v_same := v_known.set_holder IS NOT DISTINCT FROM v_desired;
            v_local_same := v_local_same OR v_same;
            IF el.listed = v_same THEN
              {
    _finding(
        "1",
        "el.pos",
        "CASE WHEN el.listed THEN 'claim_repeat_changed' ELSE 'claim_state_wrong' END",
        "jsonb_build_array(v_ch, el.num,"
        " CASE WHEN el.listed THEN v_desired ELSE v_known.set_holder END)",
        "NULL",
        "false",
    )
}
            END IF;
          END IF;
        ELSIF coalesce(v_known.through, 0) = 0 THEN
          -- no claim set and no change of it in this journal before: the earlier journals'
          INSERT INTO agentteam.idem_claimq
          VALUES (a_journal, v_jo, el.pos, v_tk, c.call_id, c.fseq, v_ch, el.num, el.listed,
                  v_desired, false);
          v_asked := true;
        END IF;
      END LOOP;
      IF v_local_same THEN
        v_claim_repeats := v_claim_repeats + 1;
        IF v_asked THEN
          UPDATE agentteam.idem_claimq q SET counted = true
          WHERE q.journal_id = a_journal AND q.jo = v_jo;
        END IF;
      END IF;
    END IF;
    -- the tasks it touched: their epochs before it and after it
    v_keys := '{{}}'; v_nows := '{{}}'; v_afters := '{{}}'; v_incs := '{{}}';
    IF c.touches IS NOT NULL THEN
      FOR el IN SELECT t ->> 0 AS ch, t -> 1 AS num, (t ->> 3)::bigint AS inc,
                  (t ->> 4)::bigint AS chg
                FROM jsonb_array_elements(c.touches) t
      LOOP
        v_tk := {_task("c.ws", "el.ch", "el.num")};
        SELECT t.through INTO v_b FROM agentteam.idem_tasks t
        WHERE t.journal_id = a_journal AND t.task = v_tk;
        v_b := coalesce(v_b, 0);
        v_keys := v_keys || v_tk; v_nows := v_nows || v_b; v_afters := v_afters || (v_b + el.chg);
        v_incs := v_incs || el.inc;
      END LOOP;
    END IF;
    -- repeats: the previous call of the signature in this journal, or a question
    IF c.fed AND c.sig IS NOT NULL AND c.has_outcome THEN
      SELECT * INTO sg FROM agentteam.idem_sigs s
      WHERE s.journal_id = a_journal AND s.sig = c.sig;
      IF NOT FOUND THEN
        INSERT INTO agentteam.idem_sigs VALUES (a_journal, c.sig, v_jo, c.call_id, c.fseq, c.tool,
          c.safe, v_keys, v_nows, v_jo, c.ok, v_keys, v_afters);
      ELSE
        IF sg.last_ok AND v_jo - sg.last_jo <= {REPEAT_WINDOW} THEN
          IF sg.last_tasks = v_keys THEN
            IF sg.last_after = v_nows THEN
              v_hints := jsonb_set(v_hints, ARRAY[c.tool], jsonb_build_array(
                coalesce((v_hints -> c.tool ->> 0)::bigint, 0) + 1,
                coalesce((v_hints -> c.tool ->> 1)::bigint, 0)
                  + CASE WHEN c.safe THEN 1 ELSE 0 END));
              IF NOT c.safe THEN
                INSERT INTO agentteam.idem_unsafe
                VALUES (a_journal, v_jo, c.call_id, c.fseq, c.tool);
              END IF;
            END IF;
          ELSE
            INSERT INTO agentteam.idem_repq VALUES (a_journal, v_jo, c.call_id, c.fseq, c.tool,
              c.safe, sg.last_tasks, sg.last_after, v_keys, v_nows);
          END IF;
        END IF;
        UPDATE agentteam.idem_sigs s SET last_jo = v_jo, last_ok = c.ok, last_tasks = v_keys,
          last_after = v_afters
        WHERE s.journal_id = a_journal AND s.sig = c.sig;
      END IF;
    END IF;
    -- its changes, then its claim sets (seen at the epochs after it)
    FOR i IN 1 .. coalesce(array_length(v_keys, 1), 0) LOOP
      IF v_incs[i] <> 0 THEN
        INSERT INTO agentteam.idem_tasks AS t (journal_id, task, through)
        VALUES (a_journal, v_keys[i], v_incs[i])
        ON CONFLICT (journal_id, task) DO UPDATE SET through = t.through + EXCLUDED.through;
      END IF;
    END LOOP;
    IF c.claims IS NOT NULL AND c.mutation THEN
      FOR el IN SELECT l -> 1 AS num FROM jsonb_array_elements(c.claims) l LOOP
        v_tk := {_task("c.ws", "v_ch", "el.num")};
        INSERT INTO agentteam.idem_tasks AS t (journal_id, task, through, set_holder, set_through)
        VALUES (a_journal, v_tk, 0, v_desired, 0)
        ON CONFLICT (journal_id, task) DO UPDATE
        SET set_holder = EXCLUDED.set_holder, set_through = t.through;
      END LOOP;
    END IF;
  END LOOP;
  INSERT INTO agentteam.idem_hints AS h (journal_id, tool, n, safe)
  SELECT a_journal, x.key, (x.value ->> 0)::bigint, (x.value ->> 1)::bigint
  FROM jsonb_each(v_hints) x
  ON CONFLICT (journal_id, tool) DO UPDATE SET n = h.n + EXCLUDED.n, safe = h.safe + EXCLUDED.safe;
  UPDATE agentteam.idem_journals j SET done_seq = v_done, calls = v_jo, keyed = v_keyed,
    claim_calls = v_claim_calls, claim_repeats = v_claim_repeats
  WHERE j.journal_id = a_journal;
END $$;
REVOKE ALL ON FUNCTION agentteam.fold_idem(text, bigint, bigint), agentteam.idem_reset(text)
  FROM PUBLIC;
"""

IDEM_STATE_DDL: Final = _TABLES + _FOLD
