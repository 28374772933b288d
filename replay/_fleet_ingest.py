"""The fleet store's checked ingest: the only way a shipping login writes, checked in SQL.

A shipping login (a member of ``agentteam_ship``) holds no INSERT, UPDATE, DELETE or TRUNCATE
grant on any table: it calls these SECURITY DEFINER functions, which run as the store's owner
and refuse what breaks a rule, whatever the client sent:

* ``register_journal(journal_id, created_at, registered_from, vkey)``: the first ship of a
  journal registers it to the calling login (``session_user``), with its head at seq 0 and its
  creation key (trust on first use). Every later call by another login is refused
  (``insufficient_privilege``): a login writes only the journals registered to it. A new id must
  be NFC (``journal_id_malformed``) and its login under its cap of journals (``journals_capped``,
  ``store_meta``'s ``journals_per_login``, which only the owner may change): ``_fleet_register``.
* ``stage_batch()``: this session's staging table ``pg_temp.ship_batch``, made by the owner
  (rows gone at commit); the login may only INSERT (COPY) into it, so nothing it adds runs as
  the owner. A relation of that name the login made itself is refused, never read.
* ``ingest(journal_id)``: the staged batch, checked as a whole in one query (which also computes
  each v2 leaf hash: the chain's and the leaf's images share the envelope's text, built once per
  row) and moved with one INSERT ... SELECT. Refused as a whole unless, in seq order, the i-th row
  is the journal's head + i (``sequence_gap``), each ``prev_hash`` is the hash before it
  (``chain_broken``), each hash is the SHA-256 of the row's canonical encoding rebuilt in SQL
  (``hash_mismatch``, see ``journal/_canonical.py``: the same text byte for byte, so the server
  recomputes what the writer hashed), ``ts_wall`` is a time as the writer writes it (RFC 3339)
  (``row_malformed``) no more than a day past the server's clock (``ts_ahead``: the month of a row's
  time makes its partition, see ``_fleet_schema.FIRST_PARTITION_MONTH``), and a v2 journal's payload
  digest is ``sha256(salt || payload)`` (``leaf_mismatch``) with a leaf for every event from seq 1
  (``leaf_missing``), and each payload parses as the store's readers parse it (``payload_invalid``:
  the chain hashes any text, and one that does not parse failed every report over the fleet that
  read it). ``ts`` (the partition key) is derived from ``ts_wall``, so no row can be placed at
  another instant than the one its hash covers. The journal's head row (``agentteam.heads``, keyed
  by ``journal_id`` alone) is locked for the batch and moved to its last event: one row per
  ``(journal_id, seq)`` holds because the only way in appends at the head; it keeps the earliest and
  latest ``ts_wall`` of the journal's events (a report's window, read without the events). Each v2
  leaf (``journal/_tlog.py``'s, rebuilt in SQL) is appended to the journal's tree: the stored hashes
  its append makes (Go tlog's layout) are kept with the event, the tree's border with the head. A
  ``key_rotated`` event registers the key it names at its seq: keys enter only through the journal's
  own chain. A row the journal erased before shipping (``ERASED_ROW``) is taken with its hash as
  stored, as verify takes it; a ``payload_erased`` event is recorded as pending (``_fleet_erase``,
  one marked hook), applied once a witness cosignature covers it.
* ``add_checkpoint(...)``: kept only if the store holds the event at its seq with the head
  hash it names (``checkpoint_hash_mismatch``), its key id is the registered key in force at
  that seq (``checkpoint_unverified``), and a v2 journal's root is the tree hash the store
  computed at that size (``tree_root``; ``checkpoint_root_mismatch``). The Ed25519 signature
  itself is verified by the shipper (core PostgreSQL has no Ed25519).
* ``record_finding(...)``: what a shipper refused, with the login that reported it.

A refusal is ``check_violation`` (SQLSTATE 23514) whose DETAIL is ``<rule> <seq>``, so the
shipper records it as the same finding the client-side check would have made.
"""

from __future__ import annotations

from typing import Final

from ._fleet_register import MAX_JOURNAL_ID, REGISTER, read_committed_only

__all__ = [
    "ERASED_ROW",
    "ESCAPED_COLUMNS",
    "INGEST",
    "INGEST_CALL",
    "MAX_JOURNAL_ID",
    "MAX_ROW_KEYS",
    "SHIP_FUNCTIONS",
    "STAGE_CALL",
    "STAGE_COPY",
    "leaf_hash_sql",
    "row_hash_sql",
]

# The envelope's members in both images (the chain's and the leaf's), as SQL over the functions'
# arguments; each image adds its own and lists all of them sorted by key, as msgspec's sorted
# encoder does (journal/_canonical.py, journal/_tlog.py).
_ENVELOPE: Final = {
    "call_id": "agentteam.json_text(call_id)",
    "duration_ms": "agentteam.json_float(duration_ms)",
    "error_type": "agentteam.json_text(error_type)",
    "gen_ai_tool_name": "agentteam.json_text(gen_ai_tool_name)",
    "http_response_status_code": "coalesce(http_response_status_code::text, 'null')",
    "journal_id": "agentteam.json_text(journal_id)",
    "jsonrpc_request_id": "agentteam.json_text(jsonrpc_request_id)",
    "kind": "agentteam.json_text(kind)",
    "kind_version": "kind_version::text",
    "mcp_method_name": "agentteam.json_text(mcp_method_name)",
    "seq": "seq::text",
    "session_id": "agentteam.json_text(session_id)",
    "ts_mono_ns": "ts_mono_ns::text",
    "ts_wall": "agentteam.json_text(ts_wall)",
}
# Each image's own members, over the row aliased ``{r}`` (empty: the function's arguments).
_CHAIN_ONLY: Final = {"payload": "{r}payload", "prev_hash": "agentteam.json_text({r}prev_hash)"}
_LEAF_ONLY: Final = {"payload_sha256": "agentteam.json_text({r}payload_sha256)"}
# The images' own members sort between the envelope's: each image is the envelope's head (its
# members before them), its own members, the envelope's tail. The ingest builds head and tail
# once per row and both hashes from them (agentteam.image_head, agentteam.image_tail).
_OWN_KEYS: Final = sorted({**_CHAIN_ONLY, **_LEAF_ONLY})
_HEAD: Final = sorted((k, v) for k, v in _ENVELOPE.items() if k < _OWN_KEYS[0])
_TAIL: Final = sorted((k, v) for k, v in _ENVELOPE.items() if k > _OWN_KEYS[-1])
if len(_HEAD) + len(_TAIL) != len(_ENVELOPE):
    raise RuntimeError("an envelope member sorts between the images' own members")
_ARGUMENTS: Final = (
    "journal_id, seq, session_id, call_id, ts_mono_ns, ts_wall, kind, kind_version,"
    " mcp_method_name, gen_ai_tool_name, jsonrpc_request_id, http_response_status_code,"
    " error_type, duration_ms"
)
_SIGNATURE: Final = """
  journal_id text, seq bigint, session_id text, call_id text, ts_mono_ns bigint, ts_wall text,
  kind text, kind_version integer, mcp_method_name text, gen_ai_tool_name text,
  jsonrpc_request_id text, http_response_status_code integer, error_type text,
  duration_ms double precision"""


def _members(members: list[tuple[str, str]], opening: bool) -> str:
    return "\n    || ".join(
        f"'{'{' if opening and not i else ','}\"{key}\":' || {sql}"
        for i, (key, sql) in enumerate(members)
    )


def _image(head: str, own: dict[str, str], row: str, tail: str) -> str:
    """SQL for an image's text: the envelope's ``head`` and ``tail`` texts around ``own``."""
    members = _members([(k, v.format(r=row)) for k, v in sorted(own.items())], False)
    return f"{head}\n    || {members}\n    || {tail}"


def _image_function(name: str, own_arguments: str, own: dict[str, str]) -> str:
    """``agentteam.<name>(...)``: the compact JSON of the envelope and ``own`` members."""
    body = _image(
        f"agentteam.image_head({_ARGUMENTS})", own, "", f"agentteam.image_tail({_ARGUMENTS})"
    )
    return f"""CREATE OR REPLACE FUNCTION agentteam.{name}({_SIGNATURE}, {own_arguments})
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT {body}
$$;"""


# The canonical encoding (journal/_canonical.py) of a row, in SQL: keys sorted, compact, the
# payload verbatim. PostgreSQL's JSON string escaping is msgspec's (", \\, \b \f \n \r \t, other
# controls as lowercase \u00xx, everything else as UTF-8); a float's shortest text is Python's
# once ".0" is added to a whole number (the writer keeps |duration| < 1e15, 3 decimals).
_CANONICAL: Final = r"""
-- A text column arrives escaped as the store keeps text (see ``store_text``): U+FFFF "0" for
-- U+0000 (which PostgreSQL text cannot hold), U+FFFF "1" for U+FFFF. Its JSON string is the
-- original's: the escape of U+0000 in JSON is the ASCII \u0000.
CREATE OR REPLACE FUNCTION agentteam.json_text(value text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN value IS NULL THEN 'null'
         WHEN strpos(value, U&'\FFFF') = 0 THEN to_json(value)::text
         ELSE replace(replace(to_json(value)::text, U&'\FFFF0', '\u0000'), U&'\FFFF1', U&'\FFFF')
         END
$$;
CREATE OR REPLACE FUNCTION agentteam.json_float(value double precision) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN value IS NULL THEN 'null'
         WHEN value::text ~ '^-?[0-9]+$' THEN value::text || '.0'
         ELSE value::text END
$$;
"""
_CANONICAL_IMAGES: Final = f"""
-- The envelope's members both images share: those sorted before the images' own, and after.
CREATE OR REPLACE FUNCTION agentteam.image_head({_SIGNATURE}) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT {_members(_HEAD, True)}
$$;
CREATE OR REPLACE FUNCTION agentteam.image_tail({_SIGNATURE}) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT {_members(_TAIL, False)}
    || '}}'
$$;
{_image_function("canonical", "payload text, prev_hash text", _CHAIN_ONLY)}
-- The Merkle leaf of a v2 journal's event (journal/_tlog.py): the canonical encoding of its
-- columns without payload, prev_hash and hash, plus its salted payload digest.
{_image_function("leaf", "payload_sha256 text", _LEAF_ONLY)}
"""

# Indexes (journal.COLUMNS) of the text columns a model or client fills, sent escaped
# (store_text): session_id, call_id, mcp_method_name, gen_ai_tool_name, jsonrpc_request_id,
# error_type. The payload goes as it is (JSON text: its U+0000 is already the escape \u0000).
ESCAPED_COLUMNS: Final = frozenset({2, 3, 8, 9, 10, 12})

# The staging table's columns, in COLUMNS order without journal_id (the ingest's argument).
_STAGED: Final = (
    ("seq", "bigint"),
    ("session_id", "text"),
    ("call_id", "text"),
    ("ts_mono_ns", "bigint"),
    ("ts_wall", "text"),
    ("kind", "text"),
    ("kind_version", "integer"),
    ("mcp_method_name", "text"),
    ("gen_ai_tool_name", "text"),
    ("jsonrpc_request_id", "text"),
    ("http_response_status_code", "integer"),
    ("error_type", "text"),
    ("duration_ms", "double precision"),
    ("payload", "text"),
    ("prev_hash", "text"),
    ("hash", "text"),
    ("salt", "text"),
    ("payload_sha256", "text"),
)
STAGE_CALL: Final = "SELECT agentteam.stage_batch()"
STAGE_COPY: Final = (
    "COPY pg_temp.ship_batch (" + ", ".join(name for name, _ in _STAGED) + ") FROM STDIN"
)
INGEST_CALL: Final = "SELECT agentteam.ingest(%s)"
_COLUMNS: Final = ", ".join(name for name, _ in _STAGED)
_S_COLUMNS: Final = ", ".join(f"s.{name}" for name, _ in _STAGED)
_STAGE_DEFINITION: Final = ", ".join(
    f'{name} {t} COLLATE "C"' if t == "text" else f"{name} {t}" for name, t in _STAGED
)

_OWNER: Final = """
-- Called by the functions below as the owner; nobody else may (a lock held by a stranger).
CREATE OR REPLACE FUNCTION agentteam.owned_head(a_journal text, a_lock boolean)
RETURNS agentteam.heads
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  head agentteam.heads;
  owner name;
BEGIN
  IF a_lock THEN
    SELECT h.* INTO head FROM agentteam.heads h WHERE h.journal_id = a_journal FOR UPDATE;
  ELSE
    SELECT h.* INTO head FROM agentteam.heads h WHERE h.journal_id = a_journal;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'journal % is not registered in the store', a_journal
      USING ERRCODE = 'check_violation', DETAIL = 'not_registered';
  END IF;
  SELECT j.owner INTO owner FROM agentteam.journals j WHERE j.journal_id = a_journal;
  IF owner IS DISTINCT FROM session_user THEN
    RAISE EXCEPTION 'journal % is registered to another login: only it may write there',
      a_journal USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN head;
END $$;
"""

# Bytes of the indexed texts a login chooses (a btree entry holds 2,704): a journal id
# (MAX_JOURNAL_ID, _fleet_register), and a row's session_id, call_id and kind together; past
# them a refusal, not program_limit_exceeded.
MAX_ROW_KEYS: Final = 1024

# The staging table of this session: created by the owner (so the shipping login, which may
# only INSERT into it, can add no trigger, rule or policy that would run as the owner), its rows
# gone at commit. A relation of that name the login made itself is refused, never read.
_STAGE: Final = f"""
CREATE OR REPLACE FUNCTION agentteam.staged_by_owner() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_class c
                 WHERE c.oid = to_regclass('pg_temp.ship_batch') AND c.relkind = 'r'
                   AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)
                   AND NOT c.relhastriggers AND NOT c.relhasrules AND NOT c.relrowsecurity) THEN
    RAISE EXCEPTION 'pg_temp.ship_batch is not the store''s staging table'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
END $$;
CREATE OR REPLACE FUNCTION agentteam.stage_batch() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
  IF to_regclass('pg_temp.ship_batch') IS NULL THEN
    CREATE TEMP TABLE ship_batch ({_STAGE_DEFINITION}) ON COMMIT DELETE ROWS;
    EXECUTE format('GRANT INSERT ON pg_temp.ship_batch TO %I', session_user);
  END IF;
  PERFORM agentteam.staged_by_owner();
END $$;
"""

# RFC 3339 UTC with microseconds, as the writer formats ts_wall (journal.format_wall): its shape
# here (LIKE costs a twentieth of a regular expression), its text of its instant at the cast.
_WALL: Final = "r.ts_wall LIKE '____-__-__T__:__:__.______Z' AND strpos(r.ts_wall, ' ') = 0"


def row_hash_sql(row: str, journal: str) -> str:
    """SQL for the chain hash (hex) of the event in the row aliased ``row`` of the journal
    ``journal`` (an expression), recomputed from its columns as the writer hashed them."""
    return f"""encode(sha256(convert_to(agentteam.canonical(
          {journal}, {row}.seq, {row}.session_id, {row}.call_id, {row}.ts_mono_ns, {row}.ts_wall,
          {row}.kind, {row}.kind_version, {row}.mcp_method_name, {row}.gen_ai_tool_name,
          {row}.jsonrpc_request_id, {row}.http_response_status_code, {row}.error_type,
          {row}.duration_ms, {row}.payload, {row}.prev_hash), 'UTF8')), 'hex')"""


def leaf_hash_sql(row: str, journal: str) -> str:
    """SQL for the Merkle leaf hash (bytea) of the v2 event in the row aliased ``row``: its
    envelope and stored payload digest (``agentteam.leaf``), as RFC 6962 hashes a leaf."""
    return f"""sha256('\\x00'::bytea || convert_to(agentteam.leaf(
             {journal}, {row}.seq, {row}.session_id, {row}.call_id, {row}.ts_mono_ns,
             {row}.ts_wall, {row}.kind, {row}.kind_version, {row}.mcp_method_name,
             {row}.gen_ai_tool_name, {row}.jsonrpc_request_id, {row}.http_response_status_code,
             {row}.error_type, {row}.duration_ms, {row}.payload_sha256), 'UTF8'))"""


_HASH: Final = row_hash_sql("r", "a_journal")  # a row of the journal a_journal (_fleet_erase)
# The hashes of a staged row aliased ``r`` that carries its envelope's head and tail texts.
_BATCH_HASH: Final = f"""encode(sha256(convert_to(
      {_image("r.image_head", _CHAIN_ONLY, "r.", "r.image_tail")}, 'UTF8')), 'hex')"""
_LEAF: Final = f"""sha256('\\x00'::bytea || convert_to(
      {_image("r.image_head", _LEAF_ONLY, "r.", "r.image_tail")}, 'UTF8'))"""
_STAGED_ARGUMENTS: Final = "a_journal, " + ", ".join(
    f"s.{name.strip()}" for name in _ARGUMENTS.split(",")[1:]
)
# A v2 leaf's payload digest: sha256(salt || payload), the salt 16 bytes in lowercase hex.
_DIGEST: Final = """length(r.salt) = 32 AND ltrim(r.salt, '0123456789abcdef') = ''
     AND r.payload_sha256 = encode(sha256(decode(r.salt, 'hex') || convert_to(r.payload, 'UTF8')),
                                   'hex')"""
# A row the journal erased before shipping (journal/_erase.py: the marker payload, the salt
# empty): its hash, which covered the erased bytes, is taken as stored, as verify takes it (the
# next row's prev_hash links it; its leaf commits to its envelope and digest). _fleet_erase.py.
# Never NULL: a v1 row (salt NULL) is never erased, whatever its payload says.
ERASED_ROW: Final = (
    """(r.salt IS NOT DISTINCT FROM '' AND r.payload IS NOT DISTINCT FROM '{"erased":true}')"""
)
_INGEST: Final = f"""
CREATE OR REPLACE FUNCTION agentteam.ingest(a_journal text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, agentteam, pg_temp SET extra_float_digits = 1 AS $$
DECLARE
  head agentteam.heads := agentteam.owned_head(a_journal, true);
  last record;
  bad_seq bigint;
  bad_rule text;
  leaves bytea[];
  v2 boolean[];
  size bigint := head.tree_size;
  tree bytea[] := head.border;
  h bytea;
  stored bytea;
  level integer;
  m bigint;
  trees bytea[] := ARRAY[]::bytea[];
  batch_first text COLLATE "C";
  batch_last text COLLATE "C";
BEGIN
  PERFORM agentteam.staged_by_owner();
  -- The whole batch in one pass: in seq order, the i-th row must be seq head + i, chained to
  -- the one before it (the head's hash for the first), well formed, and hash to its hash. A v2
  -- row's leaf hash comes from the same pass: both images share the envelope's head and tail
  -- texts, built once per row.
  SELECT (array_agg(c.seq ORDER BY c.i) FILTER (WHERE c.rule IS NOT NULL))[1],
         (array_agg(c.rule ORDER BY c.i) FILTER (WHERE c.rule IS NOT NULL))[1],
         array_agg(c.leaf ORDER BY c.i), array_agg(c.is_v2 ORDER BY c.i)
  INTO bad_seq, bad_rule, leaves, v2
  FROM (
    SELECT r.seq, r.i, CASE
        WHEN r.seq IS DISTINCT FROM head.seq + r.i THEN 'sequence_gap'
        WHEN r.prev_hash IS DISTINCT FROM r.before THEN 'chain_broken'
        WHEN NOT coalesce({_WALL}, false) THEN 'row_malformed'
        WHEN octet_length(concat(r.session_id, r.call_id, r.kind)) > {MAX_ROW_KEYS}
          THEN 'row_malformed'
        WHEN NOT {ERASED_ROW} AND r.hash IS DISTINCT FROM {_BATCH_HASH} THEN 'hash_mismatch'
        WHEN r.salt IS NOT NULL AND NOT {ERASED_ROW} AND NOT coalesce({_DIGEST}, false)
          THEN 'leaf_mismatch'
        END AS rule,
      r.salt IS NOT NULL AS is_v2,
      CASE WHEN r.salt IS NOT NULL THEN {_LEAF} END AS leaf
    FROM (SELECT s.*, row_number() OVER w AS i, coalesce(lag(s.hash) OVER w, head.hash) AS before,
            agentteam.image_head({_STAGED_ARGUMENTS}) AS image_head,
            agentteam.image_tail({_STAGED_ARGUMENTS}) AS image_tail
          FROM pg_temp.ship_batch s WINDOW w AS (ORDER BY s.seq)) r
    OFFSET 0  -- each row's rule once, not once per aggregate reading it
  ) c;
  -- Every payload is a document the store's readers parse (payload_doc): the chain hashes any
  -- text, and one that does not parse (not JSON, an escaped lone surrogate, nested past the
  -- parser's stack) would make every report over the fleet that reads it fail. One parse of
  -- the batch; the first such row is looked for only when it fails.
  IF bad_rule IS NULL THEN
    BEGIN
      PERFORM count(agentteam.payload_doc(s.payload)) FROM pg_temp.ship_batch s;
    EXCEPTION WHEN data_exception OR statement_too_complex OR program_limit_exceeded THEN
      bad_rule := 'payload_invalid';
      FOR last IN SELECT s.seq, s.payload FROM pg_temp.ship_batch s ORDER BY s.seq LOOP
        BEGIN
          PERFORM agentteam.payload_doc(last.payload);
        EXCEPTION WHEN data_exception OR statement_too_complex OR program_limit_exceeded THEN
          bad_seq := last.seq;
          EXIT;
        END;
      END LOOP;
    END;
  END IF;
  IF bad_rule IS NOT NULL THEN
    RAISE EXCEPTION 'the store refuses event % of journal %: %', bad_seq, a_journal, bad_rule
      USING ERRCODE = 'check_violation', DETAIL = bad_rule || ' ' || coalesce(bad_seq::text, '');
  END IF;
  SELECT s.seq, s.hash INTO last FROM pg_temp.ship_batch s ORDER BY s.seq DESC LIMIT 1;
  IF NOT FOUND THEN
    RETURN head.seq;
  END IF;
  SELECT min(s.ts_wall COLLATE "C"), max(s.ts_wall COLLATE "C") INTO batch_first, batch_last
  FROM pg_temp.ship_batch s;
  -- The Merkle state: each leaf appended to the journal's tree (Go tlog's stored hashes, kept
  -- with the event; the border, one hash per set bit of the size, kept with the head). A v2
  -- journal has a leaf for every event from seq 1; a v1 journal none. The k-th row is seq
  -- head + k (checked above).
  FOR k IN 1 .. cardinality(v2) LOOP
    IF (v2[k] AND size <> head.seq + k - 1) OR (NOT v2[k] AND size > 0) THEN
      RAISE EXCEPTION 'the store refuses event % of journal %: leaf_missing', head.seq + k,
        a_journal USING ERRCODE = 'check_violation', DETAIL = 'leaf_missing ' || head.seq + k;
    END IF;
    CONTINUE WHEN NOT v2[k];
    h := leaves[k];
    stored := h;
    level := 0;
    m := size;
    WHILE m & 1 = 1 LOOP
      h := sha256('\\x01'::bytea || tree[level + 1] || h);
      stored := stored || h;
      tree[level + 1] := NULL;
      level := level + 1;
      m := m >> 1;
    END LOOP;
    tree[level + 1] := h;
    size := size + 1;
    trees := trees || stored;
  END LOOP;
  BEGIN
    -- Each ts_wall the writer's text of its instant: PostgreSQL also reads zone letters, signs,
    -- 24:00 and :60 in the shape, as another instant (of another month than the partition's).
    SELECT s.seq INTO bad_seq FROM pg_temp.ship_batch s WHERE s.ts_wall
      <> to_char(s.ts_wall::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      ORDER BY s.seq LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'the store refuses event % of journal %: row_malformed', bad_seq, a_journal
        USING ERRCODE = 'check_violation', DETAIL = 'row_malformed ' || bad_seq;
    END IF;
    -- No row more than a day past the server's clock: its month would make a partition. Every
    -- ts_wall has the writer's fixed shape (checked above), so the latest sorts last bytewise:
    -- one parse a batch (a later one not a time is row_malformed, as the insert would find).
    IF (SELECT max(s.ts_wall COLLATE "C") FROM pg_temp.ship_batch s)::timestamptz
       > now() + interval '1 day' THEN
      SELECT s.seq INTO bad_seq FROM pg_temp.ship_batch s
      WHERE s.ts_wall::timestamptz > now() + interval '1 day' ORDER BY s.seq LIMIT 1;
      RAISE EXCEPTION 'the store refuses event % of journal %: ts_ahead', bad_seq, a_journal
        USING ERRCODE = 'check_violation', DETAIL = 'ts_ahead ' || bad_seq;
    END IF;
    PERFORM agentteam.ensure_partition(x.month)
    FROM (SELECT DISTINCT (left(s.ts_wall, 7) || '-01')::date AS month
          FROM pg_temp.ship_batch s) x;
    -- A batch's leaves are all or none (leaf_missing above), so the stored hashes of seq x
    -- are the (x - head.seq)-th the loop kept: an array lookup, no join.
    INSERT INTO agentteam.events (journal_id, ts, {_COLUMNS}, tree_hashes)
    SELECT a_journal, s.ts_wall::timestamptz, {_S_COLUMNS}, trees[s.seq - head.seq]
    FROM pg_temp.ship_batch s;
  EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
    OR invalid_time_zone_displacement_value THEN
    RAISE EXCEPTION 'the store refuses a batch of journal %: a ts_wall is not a time', a_journal
      USING ERRCODE = 'check_violation', DETAIL = 'row_malformed';
  END;
  INSERT INTO agentteam.journal_keys (journal_id, seq, vkey)
  SELECT a_journal, s.seq, agentteam.payload_doc(s.payload) ->> 'vkey'
  FROM pg_temp.ship_batch s
  WHERE s.kind = 'key_rotated' AND agentteam.payload_doc(s.payload) ->> 'vkey' IS NOT NULL;
  -- After the batch is accepted: what is kept per batch (beside the events) goes here, read
  -- from pg_temp.ship_batch (its rows checked above) before it is emptied below.
  -- HOOK (replay/_fleet_erase.py): the batch's payload_erased events, recorded as pending.
  PERFORM agentteam.record_erasures(a_journal);
  -- HOOK (replay/_fleet_calls.py): the call lines of the calls this batch touched.
  PERFORM agentteam.fold_calls(a_journal, head.seq + 1, last.seq);
  UPDATE agentteam.heads
  SET seq = last.seq, hash = last.hash, tree_size = size, border = tree, updated_at = now(),
    first_wall = least(head.first_wall, batch_first),
    last_wall = greatest(head.last_wall, batch_last)
  WHERE journal_id = a_journal;
  TRUNCATE pg_temp.ship_batch;
  RETURN last.seq;
END $$;
"""

_CHECKPOINT: Final = r"""
-- The RFC 6962 tree hash of a journal's first a_size leaves, from the stored hashes the ingest
-- kept (one per set bit of a_size: O(log n) reads); NULL when the store holds no such tree.
CREATE OR REPLACE FUNCTION agentteam.tree_root(a_journal text, a_size bigint) RETURNS bytea
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  nodes bytea[] := '{}';
  pos bigint := 0;
  node bytea;
  root bytea;
BEGIN
  IF a_size = 0 THEN
    RETURN sha256(''::bytea);
  END IF;
  FOR level IN REVERSE 62..0 LOOP
    IF a_size & (1::bigint << level) <> 0 THEN
      pos := pos + (1::bigint << level);
      node := NULL;
      SELECT substring(e.tree_hashes FROM level * 32 + 1 FOR 32) INTO node
      FROM agentteam.events e WHERE e.journal_id = a_journal AND e.seq = pos;
      IF node IS NULL OR length(node) <> 32 THEN
        RETURN NULL;
      END IF;
      nodes := nodes || node;
    END IF;
  END LOOP;
  root := nodes[cardinality(nodes)];
  FOR i IN REVERSE cardinality(nodes) - 1 .. 1 LOOP
    root := sha256('\x01'::bytea || nodes[i] || root);
  END LOOP;
  RETURN root;
END $$;
CREATE OR REPLACE FUNCTION agentteam.add_checkpoint(
  a_journal text, a_seq bigint, a_head_hash text, a_ts_wall text, a_key_id text,
  a_signature text, a_root_hash text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  head agentteam.heads := agentteam.owned_head(a_journal, false);
  held text;
  vkey text;
BEGIN
  SELECT e.hash INTO held FROM agentteam.events e WHERE e.journal_id = a_journal AND e.seq = a_seq;
  IF held IS DISTINCT FROM a_head_hash THEN
    RAISE EXCEPTION 'the store holds no event % of journal % with the hash the checkpoint names',
      a_seq, a_journal
      USING ERRCODE = 'check_violation', DETAIL = 'checkpoint_hash_mismatch ' || a_seq;
  END IF;
  SELECT k.vkey INTO vkey FROM agentteam.journal_keys k
  WHERE k.journal_id = a_journal AND k.seq <= a_seq ORDER BY k.seq DESC LIMIT 1;
  -- A key's text is <name>+<key id>+<base64>: its first two parts are the checkpoint's key_id.
  IF vkey IS NULL
     OR split_part(vkey, '+', 1) || '+' || split_part(vkey, '+', 2) IS DISTINCT FROM a_key_id THEN
    RAISE EXCEPTION 'checkpoint % of journal % is not signed by the registered key in force',
      a_seq, a_journal
      USING ERRCODE = 'check_violation', DETAIL = 'checkpoint_unverified ' || a_seq;
  END IF;
  -- A v2 journal's checkpoint signs its tree hash: the one the store computed at that size.
  IF (head.tree_size > 0 OR a_root_hash IS NOT NULL) AND (a_root_hash IS NULL
      OR head.tree_size < a_seq
      OR encode(agentteam.tree_root(a_journal, a_seq), 'hex') IS DISTINCT FROM a_root_hash) THEN
    RAISE EXCEPTION 'checkpoint % of journal % does not name the tree hash the store computed',
      a_seq, a_journal
      USING ERRCODE = 'check_violation', DETAIL = 'checkpoint_root_mismatch ' || a_seq;
  END IF;
  INSERT INTO agentteam.checkpoints
    (journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash)
  VALUES (a_journal, a_seq, a_head_hash, a_ts_wall, a_key_id, a_signature, a_root_hash)
  ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;
"""

# A finding is a shipper's word, kept with its login (the reports name it): any shipping login
# may report on any journal id (a copy of someone's journal refused is worth knowing), so each
# is bounded: a rule's shape, its texts' lengths, one row per distinct finding of a login, at
# most MAX_FINDINGS_PER_LOGIN rows per login (findings_capped). One login posted findings of any
# size and number about every journal of the fleet, which the reports listed as the store's.
MAX_FINDINGS_PER_LOGIN: Final = 1000
MAX_FINDING_TEXT: Final = 2000
_FINDING: Final = f"""
CREATE OR REPLACE FUNCTION agentteam.record_finding(
  a_journal text, a_seq bigint, a_rule text, a_detail text, a_source text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  cut_detail text := left(coalesce(a_detail, ''), {MAX_FINDING_TEXT});
  cut_source text := left(a_source, {MAX_FINDING_TEXT});
BEGIN
  IF a_rule IS NULL OR a_rule !~ '^[a-z][a-z0-9_]{{0,63}}$' OR a_journal IS NULL
     OR octet_length(a_journal) NOT BETWEEN 1 AND {MAX_JOURNAL_ID} THEN
    RAISE EXCEPTION 'the store refuses a finding: its rule or journal id is malformed'
      USING ERRCODE = 'check_violation', DETAIL = 'finding_malformed';
  END IF;
  -- A login's findings one at a time, so the count and the duplicate check hold.
  {read_committed_only("'the store refuses a finding'", "findings_capped")}
  PERFORM pg_advisory_xact_lock(hashtextextended('agentteam.record_finding ' || session_user, 0));
  IF EXISTS (SELECT 1 FROM agentteam.findings f
             WHERE f.journal_id = a_journal AND f.reported_by = session_user
               AND f.rule = a_rule AND f.seq IS NOT DISTINCT FROM a_seq
               AND f.detail = cut_detail) THEN
    RETURN;
  END IF;
  IF (SELECT count(*) FROM agentteam.findings f WHERE f.reported_by = session_user)
     >= {MAX_FINDINGS_PER_LOGIN} THEN
    RAISE EXCEPTION 'the store refuses a finding: login % reported % already',
      session_user, {MAX_FINDINGS_PER_LOGIN}
      USING ERRCODE = 'check_violation', DETAIL = 'findings_capped';
  END IF;
  INSERT INTO agentteam.findings (journal_id, seq, rule, detail, source, reported_by)
  VALUES (a_journal, a_seq, a_rule, cut_detail, cut_source, session_user);
END $$;
"""

# Functions a shipping login may call; everything else it may only read.
SHIP_FUNCTIONS: Final = (
    "agentteam.register_journal(text, text, text, text)",
    "agentteam.stage_batch()",
    "agentteam.ingest(text)",
    "agentteam.add_checkpoint(text, bigint, text, text, text, text, text)",
    "agentteam.record_finding(text, bigint, text, text, text)",
)

INGEST: Final = "\n".join(
    (_CANONICAL, _CANONICAL_IMAGES, _OWNER, REGISTER, _STAGE, _INGEST, _CHECKPOINT, _FINDING)
)
