"""Erasure in the fleet store: the payloads a journal erased, or the store's owner erases, go.

Rules (the SQL below is the store's; ``journal/_erase.py`` is the local twin):

* An erased row keeps every column but ``payload`` (:data:`journal.ERASED_PAYLOAD`) and ``salt``
  (``''``): its ``hash``, ``payload_sha256`` and ``tree_hashes`` stay, so the store's Merkle
  state, every checkpoint it witnessed, ``prove --from`` and ``verify --witness`` (which compares
  hashes) are unchanged. Nothing else holds the payload's text: readers parse it when they read
  (``payload_doc``), and the call lines are refolded.
* The checked ingest accepts a row that arrives erased (:data:`ERASED_ROW`: the journal erased it
  before shipping) as ``verify`` does: its hash is taken as stored (the next row's ``prev_hash``
  still links it) and its leaf, which commits to the envelope and the digest, enters the tree.
  The store cannot tell it from a row stripped by whoever shipped it, nor recover the text:
  ``prune`` keeps a local segment still holding the payload of an event the store holds erased.
* A shipped ``payload_erased`` event erases nothing when it arrives: anyone holding the
  shipping login can append a chain-valid one (hashes and leaves need no key). The ingest (one
  marked hook in ``agentteam.ingest``) records it in ``agentteam.erasures_pending``. It is
  applied only by a witness cosignature whose size covers it (``apply_cosigned_erasures``, a
  trigger on ``agentteam.cosignatures`` INSERT with the owner's rights, in the witness's
  transaction): the witness cosigns a size only after verifying the checkpoint there under the
  journal's registered key, so an event the journal's key did not sign is never applied. Each
  pending erasure is settled once (``agentteam.erasures_settled``, append-only): ``applied``,
  or ``key_rotated`` (held, nothing erased) when the store registered another key for the
  journal than its first at a seq up to the cosigned size: nothing signs a ``key_rotated``
  event, so the shipping login could have rotated to its own key and signed the checkpoint;
  the owner erases those rows with ``erase --from``. An erasure that cannot apply
  (``erase_mismatch``) aborts the cosignature too: the witness reports it and cosigns nothing.
  Until applied, the store shows the payloads (reports ``--from``); ``verify --witness`` lists
  the journal's pending and held erasures, and names a pending one the journal does not hold.
* Applying an erasure is ``agentteam.erase_stored`` (one at a time per journal), which
  first re-checks that each row still matches its hash and its leaf digest (``erase_mismatch``
  otherwise: the store never erases what it cannot vouch for), records the act in
  ``agentteam.erasures`` and each seq in ``agentteam.erased_seqs`` (both append-only), rewrites
  the rows and refolds the call lines they feed. Kinds the verifier needs
  (``journal._erase.PROTECTED_KINDS``) are never erased. Rows named that are already erased
  here are recorded, not rewritten; a run that finds nothing new records nothing (a no-op).
* ``events``' update trigger lets exactly that change through (the row equal but for payload
  and salt, the seq listed in ``erased_seqs``); every other UPDATE, any DELETE, is refused.
* ``erase --from URL --journal ID`` erases in the store alone (data only the store holds, or that
  must leave it first), as its owner: recorded in ``erasures`` with ``event_seq`` NULL, the
  owner's login, the selector and the reason; not signed and not in the journal's chain (the
  store holds no journal's key, and the journal's own history is the journal's). A later re-ship
  never sends those rows again (shipping resumes after the store's head); a later
  ``payload_erased`` event of the journal naming them is recorded, not applied twice.
* The bytes: PostgreSQL keeps old row versions until the table is rewritten, and WAL until a
  checkpoint removes it. :func:`scrub` (run by ``erase --from`` and ``store-maintain``) rewrites
  the partitions holding rows erased since the last scrub (``VACUUM (FULL, ANALYZE)``: heap,
  TOAST and indexes), then ``pg_statistic``, and forces ``CHECKPOINT``, a WAL switch and a
  second ``CHECKPOINT``; it reports the server settings under which old WAL segments are not
  deleted (``wal_recycle``, ``wal_keep_size``, archiving, replication slots). Replicas, backups
  and WAL archives are out of its reach (docs/privacy.md, docs/fleet.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentteam_task_bridge import journal

from ._erase import EraseReport, EraseResult, Selector
from ._fleet_calls import LINE_COLUMNS, fold_sql
from ._fleet_ingest import _DIGEST, _HASH, ERASED_ROW
from ._fleet_store import (
    StoreError,
    connect,
    psycopg_module,
    redact_store_url,
    store_errors,
    store_text,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["ERASE_DDL", "ScrubReport", "erase_from", "scrub", "scrub_store"]

_MARKER: Final = journal.ERASED_PAYLOAD.replace("'", "''")
_PROTECTED: Final = "(" + ", ".join(f"'{k}'" for k in journal.ERASE_PROTECTED_KINDS) + ")"
_NAMES: Final = ", ".join(("journal_id", "call_id", "started_ts", *(n for n, _ in LINE_COLUMNS)))
_UPDATE: Final = ", ".join(f"{n} = EXCLUDED.{n}" for n, _ in LINE_COLUMNS)

ERASE_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS agentteam.erasures (
  journal_id text NOT NULL REFERENCES agentteam.journals,
  id bigint GENERATED ALWAYS AS IDENTITY,
  event_seq bigint,
  selector text NOT NULL,
  reason text,
  seqs bigint[] NOT NULL,
  erased_by name NOT NULL DEFAULT session_user,
  erased_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, id)
);
CREATE TABLE IF NOT EXISTS agentteam.erased_seqs (
  journal_id text NOT NULL,
  seq bigint NOT NULL,
  erasure bigint NOT NULL,
  PRIMARY KEY (journal_id, seq)
);
-- Each payload_erased event shipped, as the ingest received it: applied once a cosignature
-- covers it (apply_cosigned_erasures), pending until then.
CREATE TABLE IF NOT EXISTS agentteam.erasures_pending (
  journal_id text NOT NULL REFERENCES agentteam.journals,
  event_seq bigint NOT NULL,
  selector text NOT NULL,
  seqs bigint[] NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, event_seq)
);
-- What became of each: 'applied', or 'key_rotated' (held: see apply_cosigned_erasures).
CREATE TABLE IF NOT EXISTS agentteam.erasures_settled (
  journal_id text NOT NULL,
  event_seq bigint NOT NULL,
  outcome text NOT NULL,
  tree_size bigint NOT NULL,
  settled_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, event_seq)
);
CREATE OR REPLACE TRIGGER erasures_settled_append_only BEFORE UPDATE OR DELETE
  ON agentteam.erasures_settled FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erasures_settled_no_truncate BEFORE TRUNCATE
  ON agentteam.erasures_settled FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erasures_pending_append_only BEFORE UPDATE OR DELETE
  ON agentteam.erasures_pending FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erasures_pending_no_truncate BEFORE TRUNCATE
  ON agentteam.erasures_pending FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erasures_append_only BEFORE UPDATE OR DELETE ON agentteam.erasures
  FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON agentteam.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erased_seqs_append_only BEFORE UPDATE OR DELETE
  ON agentteam.erased_seqs FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER erased_seqs_no_truncate BEFORE TRUNCATE ON agentteam.erased_seqs
  FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();

-- events: append-only but for an erasure (the row equal but for payload and salt, listed).
CREATE OR REPLACE FUNCTION agentteam.events_erase_only() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.payload = '{_MARKER}' AND NEW.salt = ''
     AND OLD.salt IS NOT NULL AND OLD.salt <> ''
     AND to_jsonb(NEW) - 'payload' - 'salt' = to_jsonb(OLD) - 'payload' - 'salt'
     AND EXISTS (SELECT 1 FROM agentteam.erased_seqs x
                 WHERE x.journal_id = OLD.journal_id AND x.seq = OLD.seq) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'the fleet store is append-only: % on %.% refused',
    TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE OR REPLACE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON agentteam.events
  FOR EACH ROW EXECUTE FUNCTION agentteam.events_erase_only();

-- The call lines of the calls the erased rows feed (their own, and the calls of a session
-- whose start or handshake was erased), refolded from the events as they now are.
CREATE OR REPLACE FUNCTION agentteam.refold_erased(a_journal text, a_seqs bigint[])
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  touched text[];
BEGIN
  SELECT array_agg(DISTINCT c.call_id) INTO touched FROM agentteam.call_lines c
  WHERE c.journal_id = a_journal AND (
    c.call_id IN (SELECT e.call_id FROM agentteam.events e
                  WHERE e.journal_id = a_journal AND e.seq = ANY (a_seqs))
    OR c.session_id IN (SELECT e.session_id FROM agentteam.events e
                        WHERE e.journal_id = a_journal AND e.seq = ANY (a_seqs)
                          AND e.call_id IS NULL
                          AND e.kind IN ('session_started', 'session_handshake')));
  IF touched IS NULL THEN
    RETURN;
  END IF;
  WITH folded AS (
    {fold_sql("e.journal_id = a_journal AND e.call_id = ANY (touched)")}
  )
  INSERT INTO agentteam.call_lines ({_NAMES})
  SELECT {_NAMES} FROM folded
  ON CONFLICT (journal_id, call_id, started_ts) DO UPDATE SET {_UPDATE};
  -- HOOK (replay/_fleet_idem_state.py): the lines changed, the journal's state is folded again.
  PERFORM agentteam.fold_idem(a_journal, 0);
END $$;

-- Erase the named rows of a journal the store holds; the seqs rewritten (none: a no-op).
CREATE OR REPLACE FUNCTION agentteam.erase_stored(
  a_journal text, a_seqs bigint[], a_event_seq bigint, a_selector text, a_reason text)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp SET extra_float_digits = 1 AS $$
DECLARE
  named bigint[];
  rewrite bigint[];
  bad record;
  erasure bigint;
BEGIN
  -- One erasure of a journal at a time (a witness applying, the owner's erase --from): each
  -- statement below sees what the one before it committed.
  PERFORM pg_advisory_xact_lock(hashtext('agentteam.erase_stored'), hashtext(a_journal));
  SELECT coalesce(array_agg(r.seq ORDER BY r.seq), '{{}}'),
         coalesce(array_agg(r.seq ORDER BY r.seq) FILTER (WHERE NOT {ERASED_ROW}), '{{}}')
  INTO named, rewrite
  FROM agentteam.events r
  WHERE r.journal_id = a_journal AND r.seq = ANY (a_seqs) AND r.kind NOT IN {_PROTECTED}
    AND (a_event_seq IS NULL OR r.seq < a_event_seq);
  -- Only what the store can vouch for: each row to rewrite still hashes to its hash and its
  -- payload still has its leaf digest (a v1 row has no leaf: its payload cannot go).
  SELECT r.seq, CASE WHEN r.salt IS NULL OR r.salt = '' THEN 'erase_unsupported'
                     WHEN r.hash IS DISTINCT FROM {_HASH} THEN 'hash_mismatch'
                     ELSE 'leaf_mismatch' END AS rule
  INTO bad
  FROM agentteam.events r
  WHERE r.journal_id = a_journal AND r.seq = ANY (rewrite)
    AND (r.salt IS NULL OR r.salt = '' OR r.hash IS DISTINCT FROM {_HASH}
         OR NOT coalesce({_DIGEST}, false))
  ORDER BY r.seq LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'the store refuses to erase event % of journal %: %', bad.seq, a_journal,
      bad.rule USING ERRCODE = 'check_violation', DETAIL = 'erase_mismatch ' || bad.seq;
  END IF;
  IF cardinality(rewrite) = 0 AND NOT EXISTS (
      SELECT 1 FROM unnest(named) s WHERE NOT EXISTS (
        SELECT 1 FROM agentteam.erased_seqs x WHERE x.journal_id = a_journal AND x.seq = s)) THEN
    RETURN rewrite;
  END IF;
  INSERT INTO agentteam.erasures (journal_id, event_seq, selector, reason, seqs)
  VALUES (a_journal, a_event_seq, a_selector, a_reason, named) RETURNING id INTO erasure;
  INSERT INTO agentteam.erased_seqs (journal_id, seq, erasure)
  SELECT a_journal, s, erasure FROM unnest(named) s ON CONFLICT DO NOTHING;
  UPDATE agentteam.events SET payload = '{_MARKER}', salt = ''
  WHERE journal_id = a_journal AND seq = ANY (rewrite);
  PERFORM agentteam.refold_erased(a_journal, rewrite);
  RETURN rewrite;
END $$;

-- The ingest's hook: each payload_erased event of the staged batch (checked, accepted) is
-- recorded as pending, with the seqs it names; nothing is erased yet (see the module).
CREATE OR REPLACE FUNCTION agentteam.record_erasures(a_journal text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
  INSERT INTO agentteam.erasures_pending (journal_id, event_seq, selector, seqs)
  SELECT a_journal, d.seq, coalesce(d.doc ->> 'selector', ''),
         ARRAY(SELECT x.value::text::numeric::bigint FROM jsonb_array_elements(d.doc -> 'seqs') x
               WHERE jsonb_typeof(x.value) = 'number' AND x.value::text ~ '^[0-9]{{1,18}}$')
  FROM (SELECT s.seq, agentteam.payload_doc(s.payload) AS doc FROM pg_temp.ship_batch s
        WHERE s.kind = 'payload_erased') d
  WHERE jsonb_typeof(d.doc -> 'seqs') = 'array'
  ON CONFLICT DO NOTHING;
END $$;

-- A cosignature of size N (inserted by a witness login, or the owner: cosignature_written)
-- settles each pending erasure of the journal at a seq <= N not settled yet: applied, as the
-- witness verified the checkpoint at N under the journal's key, so the event is the journal's
-- own; or held ('key_rotated') when the store registered another key for the journal than its
-- first (a key_rotated event at a seq <= N): nothing signs a rotation, so anyone holding the
-- shipping login could have shipped one with their own key and signed the checkpoint; the
-- owner erases those rows with erase --from. Owner's rights (SECURITY DEFINER), in the
-- witness's transaction: no cosignature without its erasures, and the reverse; erase_mismatch
-- aborts both (the witness reports it).
CREATE OR REPLACE FUNCTION agentteam.apply_cosigned_erasures() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  rotated boolean;
  p record;
BEGIN
  SELECT EXISTS (
    SELECT 1 FROM agentteam.journal_keys k
    WHERE k.journal_id = NEW.journal_id AND k.seq > 0 AND k.seq <= NEW.tree_size
      AND k.vkey IS DISTINCT FROM (SELECT f.vkey FROM agentteam.journal_keys f
                                   WHERE f.journal_id = NEW.journal_id
                                   ORDER BY f.seq LIMIT 1)) INTO rotated;
  FOR p IN
    SELECT x.event_seq, x.seqs, x.selector FROM agentteam.erasures_pending x
    WHERE x.journal_id = NEW.journal_id AND x.event_seq <= NEW.tree_size
      AND NOT EXISTS (SELECT 1 FROM agentteam.erasures_settled s
                      WHERE s.journal_id = x.journal_id AND s.event_seq = x.event_seq)
    ORDER BY x.event_seq
  LOOP
    IF NOT rotated THEN
      PERFORM agentteam.erase_stored(NEW.journal_id, p.seqs, p.event_seq, p.selector, NULL);
    END IF;
    INSERT INTO agentteam.erasures_settled (journal_id, event_seq, outcome, tree_size)
    VALUES (NEW.journal_id, p.event_seq, CASE WHEN rotated THEN 'key_rotated' ELSE 'applied' END,
            NEW.tree_size)
    ON CONFLICT DO NOTHING;
  END LOOP;
  RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION agentteam.erase_stored(text, bigint[], bigint, text, text),
  agentteam.record_erasures(text), agentteam.refold_erased(text, bigint[]),
  agentteam.apply_cosigned_erasures() FROM PUBLIC;
"""

# The rows a selector of ``erase --from`` names (``%s``: the journal id, then its values).
_TASK_CALLS: Final = """
SELECT DISTINCT d.call_id FROM (
  SELECT e.call_id, agentteam.payload_doc(e.payload) -> 'arguments' AS a
  FROM agentteam.events e
  WHERE e.journal_id = %s AND e.kind = 'call_received' AND e.call_id IS NOT NULL
) d
WHERE jsonb_typeof(d.a) = 'object' AND d.a ->> 'channel' = %s
  AND (d.a -> 'number' = to_jsonb(%s::bigint) OR d.a -> 'parent' = to_jsonb(%s::bigint)
       OR (jsonb_typeof(d.a -> 'numbers') = 'array' AND d.a -> 'numbers' @> to_jsonb(%s::bigint)))
"""
_SCRUBBED_KEY: Final = "erasures_scrubbed"


def _selected(conn: psycopg.Connection[Any], journal_id: str, selector: Selector) -> list[int]:
    name = selector.name
    where: str
    params: list[Any]
    if name == "call":
        where, params = "call_id = %s", [store_text(selector.call_id or "")]
    elif name == "session":
        where, params = "session_id = %s", [store_text(selector.session_id or "")]
    elif name == "task":
        channel, number = selector.task or ("", 0)
        calls = [
            str(r[0])
            for r in conn.execute(_TASK_CALLS, (journal_id, channel, number, number, number))
        ]
        if not calls:
            return []
        where, params = "call_id = ANY (%s)", [calls]
    elif name == "matching":
        text = selector.matching or ""
        if not text:
            raise StoreError("--matching needs a text")
        escaped = msgspec.json.encode(text).decode()[1:-1]  # as it is stored inside a JSON string
        where, params = "(strpos(payload, %s) > 0 OR strpos(payload, %s) > 0)", [text, escaped]
    else:
        raise StoreError(
            "--older-than erases a journal's own payloads: run it on the journal (or the "
            "bridge's --retain-payloads) and ship its payload_erased events"
        )
    rows = conn.execute(
        f"SELECT seq FROM agentteam.events WHERE journal_id = %s AND kind NOT IN {_PROTECTED}"
        f" AND NOT (payload = %s AND salt = '') AND {where} ORDER BY seq",
        [journal_id, journal.ERASED_PAYLOAD, *params],
    )
    return [int(r[0]) for r in rows]


def erase_from(
    store_url: str,
    journal_id: str,
    selector: Selector,
    *,
    reason: str,
    dry_run: bool = False,
) -> EraseReport:
    """``erase --from URL --journal ID``: erase in the store alone, as its owner, then scrub."""
    if not reason.strip():
        raise StoreError("--reason must say why (it is recorded in the store)")
    driver = psycopg_module()
    shown = redact_store_url(store_url)
    with store_errors(store_url), connect(store_url, autocommit=True) as conn:
        _erasing_store(conn, shown)
        if (
            conn.execute(
                "SELECT 1 FROM agentteam.journals WHERE journal_id = %s", (journal_id,)
            ).fetchone()
            is None
        ):
            raise StoreError(f"the store {shown} holds no journal {journal_id!r}")
        seqs = _selected(conn, journal_id, selector)
        done: list[int] = []
        report: ScrubReport | None = None
        if not dry_run and seqs:
            try:
                with conn.transaction():
                    row = conn.execute(
                        "SELECT agentteam.erase_stored(%s, %s, NULL, %s, %s)",
                        (journal_id, seqs, selector.name, reason),
                    ).fetchone()
            except driver.errors.InsufficientPrivilege:
                raise StoreError(
                    f"erase --from needs the store's owner (the role that created the schema of"
                    f" {shown}), not a shipping or reading login"
                ) from None
            done = sorted(int(s) for s in (row[0] if row else []) or [])
        if not dry_run:
            report = scrub(conn, shown)
    result = EraseResult(
        journal=shown,
        journal_id=journal_id,
        selector=selector.name,
        seqs=seqs if dry_run else done,
        files=[] if report is None else report.rewritten,
        dry_run=dry_run,
        scrubbed=report is not None and report.ok,
    )
    return EraseReport(selector=selector.name, reason=reason, dry_run=dry_run, journals=[result])


class ScrubReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``store-maintain`` (and ``erase --from``) did to make erased bytes leave the files."""

    store: str
    erasures: int  # erasures scrubbed by this run (recorded since the last scrub)
    rewritten: list[str]  # relations rewritten (VACUUM FULL)
    statistics: bool  # pg_statistic rewritten too
    wal_switched: bool  # CHECKPOINT, WAL switch, CHECKPOINT done
    problems: list[str]  # what keeps old bytes on this server (a setting, a missing right)

    @property
    def ok(self) -> bool:
        return not self.problems


def scrub_store(store_url: str) -> ScrubReport:
    """``store-maintain --from URL``: :func:`scrub`, as the store's owner."""
    with store_errors(store_url), connect(store_url, autocommit=True) as conn:
        _erasing_store(conn, redact_store_url(store_url))
        return scrub(conn, redact_store_url(store_url))


def _erasing_store(conn: psycopg.Connection[Any], shown: str) -> None:
    """StoreError unless the database holds a store that erases (nothing is created here)."""
    row = conn.execute(
        "SELECT to_regclass('agentteam.store_meta') IS NOT NULL,"
        " to_regprocedure('agentteam.erase_stored(text, bigint[], bigint, text, text)')"
        " IS NOT NULL"
    ).fetchone()
    if row is None or not row[0]:
        raise StoreError(f"{shown} holds no fleet store (the agentteam schema)")
    if not row[1]:
        raise StoreError(f"the store {shown} predates erasure: ship into a new database")


def scrub(conn: psycopg.Connection[Any], shown: str) -> ScrubReport:
    """Rewrite what holds old versions of rows erased since the last scrub, then the WAL.

    ``conn`` is the owner's, in autocommit (VACUUM cannot run in a transaction or a function).
    Each step that the role may not run, or a setting that keeps old WAL, is a problem said.
    """
    driver = psycopg_module()
    problems: list[str] = []
    done = conn.execute(
        "SELECT value FROM agentteam.store_meta WHERE key = %s", (_SCRUBBED_KEY,)
    ).fetchone()
    since = int(done[0]) if done else 0
    last_row = conn.execute("SELECT max(id) FROM agentteam.erasures").fetchone()
    last = int(last_row[0]) if last_row and last_row[0] is not None else since
    relations = [
        str(r[0])
        for r in conn.execute(
            """
SELECT DISTINCT e.tableoid::regclass::text FROM agentteam.events e
JOIN agentteam.erased_seqs x ON x.journal_id = e.journal_id AND x.seq = e.seq
WHERE x.erasure > %s
UNION
SELECT DISTINCT c.tableoid::regclass::text FROM agentteam.call_lines c
WHERE c.journal_id IN (SELECT z.journal_id FROM agentteam.erasures z WHERE z.id > %s)
ORDER BY 1""",
            (since, since),
        )
    ]
    rewritten: list[str] = []
    # VACUUM skips, with a mere warning, a table the role does not own: asked first.
    owns = (
        "SELECT pg_has_role(current_user, c.relowner, 'MEMBER') FROM pg_class c"
        " WHERE c.oid = %s::regclass"
    )
    for relation in relations:
        owned = conn.execute(owns, (relation,)).fetchone()
        if not (owned and owned[0]):
            problems.append(f"this role may not rewrite {relation} (run as the store's owner)")
            continue
        conn.execute(f"VACUUM (FULL, ANALYZE) {relation}")
        rewritten.append(relation)
    statistics = False
    if rewritten:
        dba = conn.execute(
            "SELECT pg_has_role(current_user, d.datdba, 'MEMBER') FROM pg_database d"
            " WHERE d.datname = current_database()"
        ).fetchone()
        if dba and dba[0]:
            conn.execute("VACUUM FULL pg_catalog.pg_statistic")
            statistics = True
        else:
            problems.append("pg_statistic not rewritten (run as the database's owner)")
    wal = _switch_wal(conn, driver, problems)
    problems += _wal_settings(conn)
    if last > since and not any(p.startswith("this role") for p in problems):
        conn.execute(
            "INSERT INTO agentteam.store_meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (_SCRUBBED_KEY, str(last)),
        )
    return ScrubReport(
        store=shown,
        erasures=_count(conn, since, last),
        rewritten=rewritten,
        statistics=statistics,
        wal_switched=wal,
        problems=problems,
    )


def _count(conn: psycopg.Connection[Any], since: int, last: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM agentteam.erasures WHERE id > %s AND id <= %s", (since, last)
    ).fetchone()
    return int(row[0]) if row else 0


def _switch_wal(conn: psycopg.Connection[Any], driver: Any, problems: list[str]) -> bool:
    """CHECKPOINT (old relation files go, dirty pages reach the new ones), a WAL switch, and a
    second CHECKPOINT, whose redo point is past every segment written before: they are removed."""
    try:
        conn.execute("CHECKPOINT")
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
    except driver.errors.InsufficientPrivilege:
        problems.append(
            "no CHECKPOINT or pg_switch_wal() for this role: grant it pg_checkpoint and EXECUTE"
            " ON FUNCTION pg_switch_wal(), or run store-maintain as a superuser"
        )
        return False
    return True


def _wal_settings(conn: psycopg.Connection[Any]) -> list[str]:
    """The settings under which a checkpoint keeps (or recycles) old WAL segments."""
    rows = conn.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN"
        " ('wal_recycle', 'wal_keep_size', 'archive_mode')"
    ).fetchall()
    settings = {str(n): str(v) for n, v in rows}
    found = []
    if settings.get("wal_recycle", "on") != "off":
        found.append("wal_recycle is on: old WAL segments are renamed for reuse, not removed")
    if settings.get("wal_keep_size", "0") != "0":
        found.append("wal_keep_size keeps old WAL segments: set it to 0")
    if settings.get("archive_mode", "off") != "off":
        found.append("archive_mode is on: the WAL archive keeps the erased bytes")
    slots = conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone()
    if slots and int(slots[0]) > 0:
        found.append("replication slots hold old WAL (and replicas hold their own copies)")
    return found
