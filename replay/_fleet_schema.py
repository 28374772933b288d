"""The fleet store's PostgreSQL schema: tables, roles, append-only triggers, partitions, views.

Everything lives in the schema ``agentteam``:

* ``events``: every shipped event, the journal's columns as stored (the payload text as hashed,
  already redacted) plus ``ts`` (the event's wall time, derived from ``ts_wall`` at ingest).
  Text columns sort bytewise (``COLLATE "C"``), as SQLite and Python do. Declaratively
  partitioned by month of ``ts``, each partition with its own TRUNCATE trigger; ``journal_id``
  leads every key, the distribution key on Citus. No parsed copy of the payload is stored: it
  is parsed where it is read (``payload_doc``: jsonb, its strings escaped one to one; the view
  ``event_docs`` adds it as ``doc``; the call lines' fold reads its calls' payloads once):
  writing a stored jsonb column was two thirds of the ingest's INSERT (issue 25). Three
  indexes besides the key: a call's events, the few events outside a call (sessions' starts,
  handshakes and ends, key rotations) and the deprecated uses, both partial: the events of
  other kinds add no entry.
* ``store_meta``: the schema version and the store's settings (``journals_per_login``, the cap
  of journals a login registers, ``_fleet_register``), written by the owner only.
* ``journals``: the registry (journal id, when first shipped, from where, the login that owns
  it, indexed: a login's journals are counted against its cap); ``heads``: each journal's
  last seq and hash, keyed by journal id alone, moved only by
  the ingest, with the earliest and latest ``ts_wall`` of its events; ``journal_keys``: the
  signing keys each journal named (its key at creation, then each ``key_rotated`` event
  ingested), the keys its checkpoints must verify under;
  ``checkpoints``: the checkpoints received over rows the store holds, the latest being the
  witness, each with the id of the transaction that added it (``queued``, indexed: the
  witness's queue, ``_fleet_cosign``); ``findings``: forks, bad signatures, broken chains
  refused, with who reported them.
* ``call_lines`` and ``call_counts``: one line per call, kept by the ingest (``_fleet_calls``),
  what the reports read instead of the events.
* ``erasures_pending``: each shipped ``payload_erased`` event, applied once a witness cosignature
  covers it; ``erasures`` and ``erased_seqs``: the erasures the store applied (``_fleet_erase``).
* Views ``calls``, ``errors``, ``deprecated_usages``, ``injected_context``, ``sessions``: the
  local journal's views (``journal/_schema.py``) over the fleet, each with its ``journal_id``
  (those that read payloads over ``event_docs``).

The shipping role ``agentteam_ship`` may only SELECT, and write through the checked ingest
functions (``_fleet_ingest``), which run as the store's owner; triggers refuse UPDATE, DELETE
and TRUNCATE on every table (a head: DELETE and TRUNCATE) for everyone, the owner included,
but the erasure of an event's payload (``_fleet_erase``: its trigger replaces events' own).
``agentteam_read`` may only SELECT. ``agentteam_witness`` (the witness process's login,
``_fleet_cosign``, whose DDL is its own block there) may SELECT and INSERT into
``cosignatures``, which nobody may UPDATE, DELETE or TRUNCATE.
"""

from __future__ import annotations

from typing import Final

from agentteam_task_bridge import journal

from ._fleet_ingest import INGEST, SHIP_FUNCTIONS
from ._fleet_register import DEFAULT_JOURNALS_PER_LOGIN, JOURNALS_PER_LOGIN

__all__ = ["READ_ROLE", "SCHEMA", "SCHEMA_VERSION", "SHIP_ROLE", "ddl", "partition_function"]

SCHEMA: Final = "agentteam"
SCHEMA_VERSION: Final = 8
SHIP_ROLE: Final = "agentteam_ship"
READ_ROLE: Final = "agentteam_read"

_TABLES: Final = r"""
-- The payload as jsonb for the reports and views. jsonb cannot hold U+0000, which JSON text
-- can (a model may send it), so its strings are stored escaped, one to one: U+FFFF (a
-- noncharacter) as U+FFFF "1", U+0000 as U+FFFF "0"; the reports' client decodes them
-- (_fleet_store.exact_text). The payload text keeps the journal's bytes (and its hash). Not
-- STRICT (NULL gives NULL all the same), so the planner inlines it: no function call per row.
CREATE OR REPLACE FUNCTION agentteam.payload_doc(payload text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(payload, '\u0000') = 0 AND strpos(payload, U&'\FFFF') = 0
         THEN payload::jsonb
         ELSE regexp_replace(replace(payload, U&'\FFFF', U&'\FFFF1'),
                             '(?<!\\)((?:\\\\)*)\\u0000', '\1' || U&'\FFFF0', 'g')::jsonb
         END
$$;
CREATE TABLE IF NOT EXISTS agentteam.store_meta (
  key text PRIMARY KEY,
  value text NOT NULL
);
CREATE TABLE IF NOT EXISTS agentteam.journals (
  journal_id text PRIMARY KEY,
  created_at text,
  registered_at timestamptz NOT NULL DEFAULT now(),
  registered_from text,
  owner name NOT NULL DEFAULT session_user
);
-- A login's journals, counted against its cap when it registers one (register_journal).
CREATE INDEX IF NOT EXISTS journals_owner ON agentteam.journals (owner);
CREATE TABLE IF NOT EXISTS agentteam.heads (
  journal_id text PRIMARY KEY REFERENCES agentteam.journals,
  seq bigint NOT NULL,
  hash text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  tree_size bigint NOT NULL DEFAULT 0,
  border bytea[] NOT NULL DEFAULT '{}',
  -- The earliest and latest ts_wall of the journal's events (bytewise), kept by the ingest:
  -- a report's time window over whole journals without a scan of their events (schema 6).
  first_wall text COLLATE "C",
  last_wall text COLLATE "C"
);
CREATE TABLE IF NOT EXISTS agentteam.journal_keys (
  journal_id text NOT NULL REFERENCES agentteam.journals,
  seq bigint NOT NULL,
  vkey text NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, seq)
);
CREATE TABLE IF NOT EXISTS agentteam.checkpoints (
  journal_id text NOT NULL REFERENCES agentteam.journals,
  seq bigint NOT NULL,
  head_hash text NOT NULL,
  ts_wall text NOT NULL,
  key_id text NOT NULL,
  signature text NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  root_hash text,
  -- The transaction that added it (schema 8): the witness's queue, read from where its last
  -- tick left off (_fleet_cosign.due_journals), so a journal with nothing new costs nothing.
  queued xid8 NOT NULL DEFAULT pg_current_xact_id(),
  PRIMARY KEY (journal_id, seq, key_id)
);
CREATE INDEX IF NOT EXISTS checkpoints_queued ON agentteam.checkpoints (queued, journal_id);
CREATE TABLE IF NOT EXISTS agentteam.findings (
  journal_id text NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  seq bigint,
  rule text NOT NULL,
  detail text NOT NULL,
  source text,
  reported_by name NOT NULL DEFAULT session_user,
  found_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, id)
);
CREATE TABLE IF NOT EXISTS agentteam.events (
  journal_id text COLLATE "C" NOT NULL,
  seq bigint NOT NULL,
  ts timestamptz NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  call_id text COLLATE "C",
  ts_mono_ns bigint NOT NULL,
  ts_wall text COLLATE "C" NOT NULL,
  kind text COLLATE "C" NOT NULL,
  kind_version integer NOT NULL,
  mcp_method_name text COLLATE "C",
  gen_ai_tool_name text COLLATE "C",
  jsonrpc_request_id text COLLATE "C",
  http_response_status_code integer,
  error_type text COLLATE "C",
  duration_ms double precision,
  payload text COLLATE "C" NOT NULL,
  prev_hash text COLLATE "C" NOT NULL,
  hash text COLLATE "C" NOT NULL,
  salt text COLLATE "C",
  payload_sha256 text COLLATE "C",
  tree_hashes bytea,
  PRIMARY KEY (journal_id, seq, ts)
) PARTITION BY RANGE (ts);
CREATE INDEX IF NOT EXISTS events_call ON agentteam.events (journal_id, call_id, seq);
-- A session's own events (start, handshake, end), found by their session: a call's session start
-- is one probe, not a walk back through every event of a long session (SESSION_STARTED_OF_CALL).
CREATE INDEX IF NOT EXISTS events_session ON agentteam.events (journal_id, session_id, kind, seq)
  WHERE call_id IS NULL;
-- The deprecated uses (deprecations --from), as rare: an event of another kind adds no entry.
CREATE INDEX IF NOT EXISTS events_deprecated ON agentteam.events (journal_id, seq)
  WHERE kind = 'deprecated_usage';
"""

_APPEND_ONLY: Final = """
CREATE OR REPLACE FUNCTION agentteam.refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the fleet store is append-only: % on %.% refused',
    TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END $$;
"""


# The first month a partition of its own is made for. Earlier rows (a device whose clock
# started at 1970 before its first time sync, a journal written before the product existed)
# share one DEFAULT partition, ``<table>_early``, whose CHECK tells PostgreSQL it holds nothing
# of a later month (no scan when a month is added). With rows refused more than a day ahead of
# the server's clock (``ts_ahead`` at ingest), a shipping login can make at most one partition
# per month between this one and next month, as an honest fleet does: 1,000 chain-valid rows a
# month apart from 1900 made 1,000 partitions, and every report over the fleet took minutes.
FIRST_PARTITION_MONTH: Final = "2025-01-01"


def partition_function(function: str, table: str, column: str, *, definer: bool) -> str:
    """``agentteam.<function>(month)``: makes ``table``'s partition for that month once (under
    an advisory lock), with the TRUNCATE trigger the parent's cannot give it; a month before
    FIRST_PARTITION_MONTH goes to the DEFAULT partition ``<table>_early`` (made once the same
    way). One definition for ``events`` (SECURITY DEFINER: the ingest's role calls it) and
    ``call_lines``, each partitioned by its ``column``."""
    security = " SECURITY DEFINER" if definer else ""
    return f"""
CREATE OR REPLACE FUNCTION agentteam.{function}(month date) RETURNS void
LANGUAGE plpgsql{security} SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  first_day date := date_trunc('month', month)::date;
  early boolean := first_day < DATE '{FIRST_PARTITION_MONTH}';
  name text := CASE WHEN early THEN '{table}_early'
                    ELSE format('{table}_%s', to_char(first_day, 'YYYY_MM')) END;
BEGIN
  IF to_regclass(format('agentteam.%I', name)) IS NOT NULL THEN
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('agentteam.{function}'));
  -- Read the catalog itself, not to_regclass: this session's cache may still hold the miss
  -- above, from before another session made the partition and let the lock go.
  IF NOT EXISTS (SELECT 1 FROM pg_class c
                 WHERE c.relname = name AND c.relnamespace = 'agentteam'::regnamespace) THEN
    IF early THEN
      EXECUTE format(
        'CREATE TABLE agentteam.%I PARTITION OF agentteam.{table}'
        ' (CONSTRAINT %I CHECK ({column} < %L)) DEFAULT',
        name, name || '_before', DATE '{FIRST_PARTITION_MONTH}'::timestamp AT TIME ZONE 'UTC');
    ELSE
      -- Bounds are UTC instants, whatever the session's TimeZone (ts_wall is UTC).
      EXECUTE format(
        'CREATE TABLE agentteam.%I PARTITION OF agentteam.{table}'
        ' FOR VALUES FROM (%L) TO (%L)',
        name, first_day::timestamp AT TIME ZONE 'UTC',
        (first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC');
    END IF;
    -- A statement trigger of the parent does not fire for its partitions: each has its own.
    EXECUTE format(
      'CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON agentteam.%I'
      ' FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change()', name);
  END IF;
END $$;
"""


# The local views (journal/_views.py VIEWS), in PostgreSQL, over every journal of the fleet.
VIEWS: Final[dict[str, str]] = {
    # The events with their payloads parsed (``doc``), for the views below and ad hoc queries.
    "event_docs": "SELECT e.*, agentteam.payload_doc(e.payload) AS doc FROM agentteam.events e",
    "calls": journal.calls_view("postgresql"),  # one definition with the local view
    "errors": """
SELECT
  journal_id, seq, ts_wall, session_id, call_id, gen_ai_tool_name, kind, error_type,
  http_response_status_code,
  doc ->> 'message' AS message,
  (doc -> 'retryable')::boolean AS retryable,
  duration_ms
FROM agentteam.event_docs
WHERE kind IN ('call_error', 'call_rejected')
   OR (kind = 'upstream_response' AND http_response_status_code >= 400)""",
    "deprecated_usages": """
SELECT
  journal_id, seq, ts_wall, session_id, call_id, gen_ai_tool_name,
  doc ->> 'use_kind' AS use_kind,
  doc ->> 'old_name' AS old_name,
  doc ->> 'replacement' AS replacement,
  doc ->> 'client_name' AS client_name,
  doc ->> 'client_version' AS client_version,
  doc ->> 'agent_id' AS agent_id
FROM agentteam.event_docs
WHERE kind = 'deprecated_usage'""",
    "injected_context": """
SELECT
  e.journal_id, e.seq, e.ts_wall, e.session_id, e.call_id, e.gen_ai_tool_name,
  f.value ->> 'name' AS name,
  f.value ->> 'source' AS source,
  f.value -> 'value' AS value
FROM agentteam.event_docs e,
  jsonb_array_elements(CASE WHEN jsonb_typeof(e.doc -> 'fields') = 'array'
                       THEN e.doc -> 'fields' ELSE '[]'::jsonb END) f
WHERE e.kind = 'context_injected'""",
    "sessions": """
SELECT
  s.journal_id,
  s.session_id,
  s.seq AS started_seq,
  s.ts_wall AS started_at,
  coalesce(h.doc ->> 'client_name', s.doc ->> 'client_name') AS client_name,
  coalesce(h.doc ->> 'client_version', s.doc ->> 'client_version') AS client_version,
  coalesce(h.doc ->> 'protocol_version', s.doc ->> 'protocol_version') AS protocol_version,
  s.doc ->> 'bridge_version' AS bridge_version,
  s.doc ->> 'compat_policy' AS compat_policy,
  s.doc ->> 'agent_id' AS agent_id,
  x.ts_wall AS ended_at,
  x.doc ->> 'reason' AS end_reason,
  (x.doc ->> 'calls')::bigint AS calls
FROM agentteam.event_docs s
LEFT JOIN agentteam.event_docs x
  ON x.journal_id = s.journal_id AND x.session_id = s.session_id AND x.kind = 'session_ended'
LEFT JOIN agentteam.event_docs h
  ON h.journal_id = s.journal_id AND h.session_id = s.session_id AND h.kind = 'session_handshake'
WHERE s.kind = 'session_started'""",
}

_TABLE_NAMES: Final = (
    "store_meta",
    "journals",
    "journal_keys",
    "checkpoints",
    "findings",
    "heads",
    "events",
)


def _roles() -> str:
    grants = "\n".join(
        f"REVOKE ALL ON FUNCTION {f} FROM PUBLIC; GRANT EXECUTE ON FUNCTION {f} TO {SHIP_ROLE};"
        for f in SHIP_FUNCTIONS
    )
    return f"""
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SHIP_ROLE}') THEN
    CREATE ROLE {SHIP_ROLE} NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READ_ROLE}') THEN
    CREATE ROLE {READ_ROLE} NOLOGIN;
  END IF;
END $$;
GRANT USAGE ON SCHEMA agentteam TO {SHIP_ROLE}, {READ_ROLE};
GRANT SELECT ON ALL TABLES IN SCHEMA agentteam TO {SHIP_ROLE}, {READ_ROLE};
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA agentteam
  FROM {SHIP_ROLE}, {READ_ROLE};
REVOKE ALL ON FUNCTION agentteam.ensure_partition(date), agentteam.owned_head(text, boolean),
  agentteam.staged_by_owner() FROM PUBLIC;
{grants}
"""


def _triggers() -> str:
    statements = []
    for table in _TABLE_NAMES:
        if table == "store_meta":
            continue  # the owner records the schema version there
        # A head moves (the ingest function, as the owner, updates it); it is never removed.
        changes = "DELETE" if table == "heads" else "UPDATE OR DELETE"
        statements.append(
            f"CREATE OR REPLACE TRIGGER {table}_append_only BEFORE {changes}"
            f" ON agentteam.{table} FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();"
        )
        statements.append(
            f"CREATE OR REPLACE TRIGGER {table}_no_truncate BEFORE TRUNCATE"
            f" ON agentteam.{table} FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();"
        )
    return "\n".join(statements)


def ddl() -> list[str]:
    """The statements that create (or bring up to date) the store; idempotent."""
    views = [
        f"CREATE OR REPLACE VIEW agentteam.{name} AS {sql.strip()};" for name, sql in VIEWS.items()
    ]
    from ._fleet_calls import CALLS_DDL  # it builds on the reports' SQL (_fleet_store)
    from ._fleet_cosign import COSIGN_DDL  # the witness's table and role (_fleet_cosign)
    from ._fleet_erase import ERASE_DDL  # erasure's functions and trigger (_fleet_erase)
    from ._fleet_idem_state import IDEM_STATE_DDL  # the idempotency state (_fleet_idem_state)

    return [
        "CREATE SCHEMA IF NOT EXISTS agentteam;",
        _TABLES,
        _APPEND_ONLY,
        partition_function("ensure_partition", "events", "ts", definer=True),
        INGEST,
        CALLS_DDL,
        IDEM_STATE_DDL,
        _triggers(),
        ERASE_DDL,  # after _triggers: it replaces events' update trigger
        *views,
        _roles(),
        COSIGN_DDL,
        f"GRANT SELECT ON ALL TABLES IN SCHEMA agentteam TO {SHIP_ROLE}, {READ_ROLE};",
        "INSERT INTO agentteam.store_meta (key, value) VALUES"
        f" ('schema_version', '{SCHEMA_VERSION}'),"
        f" ('{JOURNALS_PER_LOGIN}', '{DEFAULT_JOURNALS_PER_LOGIN}') ON CONFLICT (key) DO NOTHING;",
    ]
