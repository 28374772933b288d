"""The store's witness: a process with its own key and login that cosigns what the ingest accepted.

PostgreSQL cannot sign Ed25519, and a key the database could read would be the owner's too, so
the witness is a separate process run by the store's operator (``agentteam-replay witness
--from postgresql://WITNESS_LOGIN@... --key FILE``): its key file stays on its machine (0600),
its login is a member of ``agentteam_witness``, the only role besides the owner that may INSERT
into ``agentteam.cosignatures`` (no role may UPDATE, DELETE or TRUNCATE it). For each journal it
takes the newest checkpoint the ingest accepted (a v2 journal's: a Merkle tree), and cosigns it
(c2sp.org/tlog-cosignature, :mod:`replay._cosign`) only when

* its signature verifies under the journal's registered key in force at its size, and that key
  is one this witness trusts for the journal: the journal's first registered key, the key in
  force at the last size this witness cosigned, or one its operator approved
  (``--approve-key JOURNAL_ID=VKEY``). Nothing signs a ``key_rotated`` event (the writer names
  its new key and signs on with it), so anyone holding the shipping login and the journal's
  directory could rotate a journal to a key of their own and sign a history: the witness does
  not follow a rotation by itself (``key_unapproved``, exit 1), as a tlog witness is configured
  with each log's key;
* its root is the tree hash of the store's stored hashes at that size, recomputed here;
* it extends the last checkpoint this witness cosigned (its own row, whose signature verifies
  under its own key: a row someone else wrote does not move it): a Merkle consistency proof
  built from the store's stored hashes and checked here (RFC 9162 2.1.4.2), as a tlog witness
  checks a log's proof. A journal whose history contradicts what it cosigned is never cosigned
  again: the witness says so and exits 1.

A tick visits only the journals with a checkpoint added since this witness's last tick, and
those its operator approved a key for (:func:`due_journals`): ``checkpoints.queued`` (the adding
transaction's id, indexed) is a queue, and ``agentteam.witness_cursors`` keeps, per login and
key, the oldest transaction still running when its last tick began (moved only by that login,
``witness_moved``, once every journal due was visited). A journal with nothing new costs
nothing; the cursor decides only what is visited, never what is cosigned. The first tick of a
login and key, and ``every`` (``--all``), visit every journal.

Readers trust a cosignature only under a witness key they name (``verify --witness-key``,
``prune --witness-key``): :func:`trusted_cosignature` checks each row's signature, so who wrote
a row never matters. A v1 journal (hash chain, no tree) is not cosigned.
"""

from __future__ import annotations

import itertools
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from threading import Event
from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentteam_task_bridge import journal

from ._cosign import Cosignature, CosignerKey, WitnessKey
from ._fleet_store import StoreUnreachable, connect, psycopg_module, redact_store_url
from ._terminal import shown

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "COSIGN_DDL",
    "QUEUE_FIRST",
    "QUEUE_NEXT",
    "WITNESS_ROLE",
    "CosignReport",
    "JournalCosigned",
    "cosign_once",
    "cosignatures",
    "due_journals",
    "first_unheld_leaf",
    "store_reader",
    "trusted_cosignature",
    "witness_follow",
]

WITNESS_ROLE: Final = "agentteam_witness"
HashReader = Callable[[Sequence[int]], list[bytes]]

# ---- cosign DDL: begin (its own table, trigger function and role; nothing else changed) ----
COSIGN_DDL: Final = f"""
CREATE TABLE IF NOT EXISTS agentteam.cosignatures (
  journal_id text NOT NULL REFERENCES agentteam.journals,
  tree_size bigint NOT NULL,
  root_hash text NOT NULL,
  key_id text NOT NULL,
  cosigned_at bigint NOT NULL,
  signature text NOT NULL,
  written_by name NOT NULL DEFAULT session_user,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (journal_id, key_id, tree_size)
);
-- Who wrote a row is the login that did, whatever it claims; only a witness (or the owner).
CREATE OR REPLACE FUNCTION agentteam.cosignature_written() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT pg_has_role(session_user, '{WITNESS_ROLE}', 'USAGE') THEN
    RAISE EXCEPTION 'only a witness login (a member of {WITNESS_ROLE}) writes cosignatures'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  NEW.written_by := session_user;
  NEW.received_at := now();
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER cosignatures_written BEFORE INSERT ON agentteam.cosignatures
  FOR EACH ROW EXECUTE FUNCTION agentteam.cosignature_written();
-- A cosignature applies the pending erasures it newly covers (_fleet_erase), in its transaction.
CREATE OR REPLACE TRIGGER cosignatures_apply_erasures AFTER INSERT ON agentteam.cosignatures
  FOR EACH ROW EXECUTE FUNCTION agentteam.apply_cosigned_erasures();
CREATE OR REPLACE TRIGGER cosignatures_append_only BEFORE UPDATE OR DELETE
  ON agentteam.cosignatures FOR EACH ROW EXECUTE FUNCTION agentteam.refuse_change();
CREATE OR REPLACE TRIGGER cosignatures_no_truncate BEFORE TRUNCATE
  ON agentteam.cosignatures FOR EACH STATEMENT EXECUTE FUNCTION agentteam.refuse_change();
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{WITNESS_ROLE}') THEN
    CREATE ROLE {WITNESS_ROLE} NOLOGIN;
  END IF;
END $$;
GRANT USAGE ON SCHEMA agentteam TO {WITNESS_ROLE};
GRANT SELECT ON ALL TABLES IN SCHEMA agentteam TO {WITNESS_ROLE};
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA agentteam FROM {WITNESS_ROLE};
GRANT INSERT ON agentteam.cosignatures TO {WITNESS_ROLE};
-- Where each witness (its login, its key) left off in the checkpoints' queue: every checkpoint
-- added by a transaction below ``settled`` was settled (committed or rolled back) when its last
-- tick began, and read by that tick. A login moves only its own (witness_moved).
CREATE TABLE IF NOT EXISTS agentteam.witness_cursors (
  login name NOT NULL,
  key_id text NOT NULL,
  settled xid8 NOT NULL,
  moved_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (login, key_id)
);
CREATE OR REPLACE FUNCTION agentteam.witness_moved(a_key_id text, a_settled xid8) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
BEGIN
  IF NOT pg_has_role(session_user, '{WITNESS_ROLE}', 'USAGE') THEN
    RAISE EXCEPTION 'only a witness login (a member of {WITNESS_ROLE}) has a cursor'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  INSERT INTO agentteam.witness_cursors (login, key_id, settled)
  VALUES (session_user, a_key_id, a_settled)
  ON CONFLICT (login, key_id) DO UPDATE SET settled = a_settled, moved_at = now();
END $$;
REVOKE ALL ON agentteam.witness_cursors FROM {WITNESS_ROLE}, agentteam_ship, agentteam_read, PUBLIC;
GRANT SELECT ON agentteam.witness_cursors TO {WITNESS_ROLE}, agentteam_ship, agentteam_read;
REVOKE ALL ON FUNCTION agentteam.witness_moved(text, xid8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agentteam.witness_moved(text, xid8) TO {WITNESS_ROLE};
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON agentteam.cosignatures
  FROM agentteam_ship, agentteam_read, PUBLIC;
GRANT SELECT ON agentteam.cosignatures TO agentteam_ship, agentteam_read;
"""
# ---- cosign DDL: end ----


REFUSED: Final = frozenset(
    {"checkpoint_unverified", "key_unapproved", "root_mismatch", "inconsistent", "erase_mismatch"}
)
Approved = Mapping[str, Collection[str]]  # journal id -> verifier keys its operator approved


class JournalCosigned(msgspec.Struct, frozen=True, kw_only=True):
    """What the witness did with one journal: ``cosigned`` (a new size), ``current`` (nothing
    new since its last cosignature), ``v1`` (no tree), ``no_checkpoint``, or a refusal:
    ``checkpoint_unverified``, ``key_unapproved`` (signed by a key the journal rotated to that
    this witness does not trust yet), ``root_mismatch``, ``inconsistent``, ``erase_mismatch`` (an
    erasure the cosignature would apply names a row the store cannot vouch for: neither is
    written)."""

    journal_id: str
    outcome: str
    tree_size: int | None = None
    previous_size: int | None = None
    detail: str = ""


class CosignReport(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    witness_key: str
    journals: list[JournalCosigned]

    @property
    def ok(self) -> bool:
        return not any(j.outcome in REFUSED for j in self.journals)


def store_reader(conn: psycopg.Connection[Any], journal_id: str) -> HashReader:
    """A HashReader over the stored hashes the ingest kept with the journal's events (Go tlog's
    layout: the hashes event ``seq`` stored, at ``stored_index_of(seq)`` on)."""

    def read(indexes: Sequence[int]) -> list[bytes]:
        places = []
        for index in indexes:
            seq = journal.record_of_index(index) + 1
            places.append((seq, index - journal.stored_index_of(seq)))
        rows = conn.execute(
            "SELECT seq, tree_hashes FROM agentteam.events WHERE journal_id = %s AND seq = ANY(%s)",
            (journal_id, sorted({seq for seq, _ in places})),
        ).fetchall()
        held = {int(seq): bytes(hashes or b"") for seq, hashes in rows}
        out = []
        for seq, offset in places:
            found = held.get(seq, b"")[32 * offset : 32 * offset + 32]
            if len(found) != 32:
                raise journal.ProofError(f"the store holds no stored hash of event {seq}")
            out.append(found)
        return out

    return read


def cosignatures(
    conn: psycopg.Connection[Any], journal_id: str, key_ids: Sequence[str] | None = None
) -> list[Cosignature]:
    """The cosignature rows of the journal (naming one of ``key_ids``, or all), largest size
    first (unchecked: see :func:`trusted_cosignature`)."""
    rows = conn.execute(
        "SELECT tree_size, root_hash, key_id, cosigned_at, signature FROM agentteam.cosignatures"
        " WHERE journal_id = %s AND (%s::text[] IS NULL OR key_id = ANY(%s::text[]))"
        " ORDER BY tree_size DESC, key_id",
        (journal_id, key_ids, key_ids),
    ).fetchall()
    return [
        Cosignature(
            journal_id=journal_id,
            tree_size=int(size),
            root_hash=str(root),
            key_id=str(key_id),
            timestamp=int(stamp),
            signature=str(signature),
        )
        for size, root, key_id, stamp, signature in rows
    ]


def trusted_cosignature(
    conn: psycopg.Connection[Any], journal_id: str, keys: Iterable[CosignerKey]
) -> tuple[Cosignature | None, list[Cosignature]]:
    """(the largest cosignature whose signature verifies under one of ``keys``, the rows that
    name one of ``keys`` but do not verify: forged or damaged). Rows of other keys are ignored."""
    by_id = {key.key_id: key for key in keys}
    bad: list[Cosignature] = []
    for row in cosignatures(conn, journal_id, list(by_id)):
        key = by_id.get(row.key_id)
        if key is None:
            continue
        if row.check(key):
            return row, bad
        bad.append(row)
    return None, bad


def first_unheld_leaf(
    conn: psycopg.Connection[Any],
    journal_id: str,
    events: Iterable[tuple[int, str, bytes | None]],
) -> int | None:
    """The first seq of ``events`` ((seq, chain hash, leaf hash or None), in order) the store
    does not hold with the same chain hash and the same Merkle leaf hash; None if it holds all."""
    pairs = iter(events)
    while chunk := list(itertools.islice(pairs, 5_000)):
        row = conn.execute(
            "SELECT l.seq FROM unnest(%s::bigint[], %s::text[], %s::bytea[]) AS l(seq, hash, leaf)"
            " LEFT JOIN agentteam.events e ON e.journal_id = %s AND e.seq = l.seq"
            " WHERE e.hash IS DISTINCT FROM l.hash OR (l.leaf IS NOT NULL"
            "   AND substring(e.tree_hashes FROM 1 FOR 32) IS DISTINCT FROM l.leaf)"
            " ORDER BY l.seq LIMIT 1",
            ([c[0] for c in chunk], [c[1] for c in chunk], [c[2] for c in chunk], journal_id),
        ).fetchone()
        if row is not None:
            return int(row[0])
    return None


def _registered_key(conn: psycopg.Connection[Any], journal_id: str, seq: int) -> str | None:
    """The journal's key in force at ``seq``, as the ingest registered it."""
    row = conn.execute(
        "SELECT vkey FROM agentteam.journal_keys WHERE journal_id = %s AND seq <= %s"
        " ORDER BY seq DESC LIMIT 1",
        (journal_id, seq),
    ).fetchone()
    return None if row is None else str(row[0])


def _first_key(conn: psycopg.Connection[Any], journal_id: str) -> str | None:
    """The key the journal's first ship registered."""
    row = conn.execute(
        "SELECT vkey FROM agentteam.journal_keys WHERE journal_id = %s ORDER BY seq LIMIT 1",
        (journal_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def _rotated_at(conn: psycopg.Connection[Any], journal_id: str, vkey: str, size: int) -> int:
    """The seq of the ``key_rotated`` event that made ``vkey`` the key in force at ``size``."""
    row = conn.execute(
        "SELECT seq FROM agentteam.journal_keys WHERE journal_id = %s AND vkey = %s"
        " AND seq <= %s ORDER BY seq DESC LIMIT 1",
        (journal_id, vkey, size),
    ).fetchone()
    return 0 if row is None else int(row[0])


def _cosign_journal(
    conn: psycopg.Connection[Any],
    key: WitnessKey,
    journal_id: str,
    now: int,
    approved: Approved,
) -> JournalCosigned:
    row = conn.execute(
        "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash"
        " FROM agentteam.checkpoints WHERE journal_id = %s ORDER BY seq DESC LIMIT 1",
        (journal_id,),
    ).fetchone()
    if row is None:
        return JournalCosigned(journal_id=journal_id, outcome="no_checkpoint")
    jid, seq, head_hash, ts_wall, key_id, signature, root_hash = row
    checkpoint = journal.Checkpoint(
        journal_id=str(jid),
        seq=int(seq),
        head_hash=str(head_hash),
        ts_wall=str(ts_wall),
        key_id=str(key_id),
        signature=str(signature),
        root_hash=None if root_hash is None else str(root_hash),
    )
    if checkpoint.root_hash is None:
        return JournalCosigned(
            journal_id=journal_id,
            outcome="v1",
            detail="a v1 journal (hash chain, no Merkle tree): nothing to cosign",
        )
    size, root = checkpoint.seq, bytes.fromhex(checkpoint.root_hash)

    def refused(outcome: str, detail: str, previous: int | None = None) -> JournalCosigned:
        return JournalCosigned(
            journal_id=journal_id,
            outcome=outcome,
            tree_size=size,
            previous_size=previous,
            detail=detail,
        )

    vkey = _registered_key(conn, journal_id, size)
    try:
        verifier = journal.VerifierKey.parse(vkey or "")
    except ValueError:
        verifier = None
    if verifier is None or not checkpoint.check(verifier):
        return refused(
            "checkpoint_unverified",
            f"checkpoint {size} does not verify under the journal's registered key",
        )
    last, _ = trusted_cosignature(conn, journal_id, [key.verifier])
    trusted = {
        _first_key(conn, journal_id),
        None if last is None else _registered_key(conn, journal_id, last.tree_size),
        *approved.get(journal_id, ()),
    }
    if vkey not in trusted:
        return refused(
            "key_unapproved",
            f"checkpoint {size} is signed by {verifier.fingerprint}, a key the journal rotated"
            f" to at seq {_rotated_at(conn, journal_id, vkey or '', size)}: nothing signs a"
            " rotation, so this witness cosigns under it only when its operator approves it"
            f" (--approve-key {journal_id}={vkey})",
            None if last is None else last.tree_size,
        )
    read = store_reader(conn, journal_id)
    try:
        computed = journal.tree_hash(size, read)
    except journal.ProofError as exc:
        return refused("root_mismatch", str(exc))
    if computed != root:
        return refused(
            "root_mismatch",
            f"the store's stored hashes at size {size} are not the checkpoint's tree",
        )
    if last is not None:
        old, old_root = last.tree_size, bytes.fromhex(last.root_hash)
        if old > size or (old == size and old_root == root):
            return JournalCosigned(
                journal_id=journal_id, outcome="current", tree_size=old, previous_size=old
            )
        try:
            proof = [] if old == size else journal.consistency_proof(old, size, read)
        except journal.ProofError as exc:
            return refused("inconsistent", str(exc), old)
        if not journal.verify_consistency(old, size, old_root, root, proof):
            return refused(
                "inconsistent",
                f"the tree of size {size} does not extend the one this witness cosigned at"
                f" size {old}: the history changed after it was cosigned",
                old,
            )
    cosignature = key.cosign(journal_id, size, root, now)
    try:  # its trigger applies the pending erasures it covers, in the same transaction
        conn.execute(
            "INSERT INTO agentteam.cosignatures"
            " (journal_id, tree_size, root_hash, key_id, cosigned_at, signature)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (
                journal_id,
                size,
                cosignature.root_hash,
                cosignature.key_id,
                cosignature.timestamp,
                cosignature.signature,
            ),
        )
    except psycopg_module().errors.CheckViolation as exc:
        detail = (exc.diag.message_detail or "").split(" ")
        at = detail[1] if len(detail) > 1 and detail[0] == "erase_mismatch" else "?"
        return refused(
            "erase_mismatch",
            f"a payload_erased event up to size {size} names event {at}, which the store's row"
            " no longer matches (hash or leaf digest): not erased, not cosigned",
            None if last is None else last.tree_size,
        )
    return JournalCosigned(
        journal_id=journal_id,
        outcome="cosigned",
        tree_size=size,
        previous_size=None if last is None else last.tree_size,
    )


# A page of the checkpoints' queue (queued, journal_id), first from a cursor, then after a row;
# the output's name is not ``queued``, which ORDER BY would take for the text, not the xid8.
QUEUE_FIRST: Final = (
    "SELECT queued::text AS at, journal_id FROM agentteam.checkpoints WHERE queued >= %s::xid8"
    " ORDER BY queued, journal_id LIMIT %s"
)
QUEUE_NEXT: Final = (
    "SELECT queued::text AS at, journal_id FROM agentteam.checkpoints"
    " WHERE (queued, journal_id) > (%s::xid8, %s) ORDER BY queued, journal_id LIMIT %s"
)


def due_journals(
    conn: psycopg.Connection[Any], key: WitnessKey, extra: Collection[str], *, every: bool = False
) -> tuple[list[str], int]:
    """(the journals this tick visits, in id order; where the next one starts reading): those
    with a checkpoint added since this witness's last tick began (the queue, read from its
    cursor over the index ``checkpoints_queued``: a journal with nothing new is not read), and
    ``extra`` (the journals its operator approved a key for) that the store holds. Every journal
    on the first tick of this login and key, or with ``every``.

    The queue is ordered by transaction id, not by commit: a checkpoint below the oldest
    transaction still running when the tick began (``pg_snapshot_xmin``) can no longer appear,
    so the next tick starts there; one above it is read again until that transaction ends."""
    xmin = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").fetchone()
    settled = 0 if xmin is None else int(xmin[0])
    row = conn.execute(
        "SELECT settled::text FROM agentteam.witness_cursors"
        " WHERE login = session_user AND key_id = %s",
        (key.key_id,),
    ).fetchone()
    if every or row is None:
        ids = {str(i) for (i,) in conn.execute("SELECT journal_id FROM agentteam.journals")}
    else:
        ids = _queued_since(conn, str(row[0]))
        ids.update(
            str(i)
            for (i,) in conn.execute(
                "SELECT journal_id FROM agentteam.journals WHERE journal_id = ANY(%s)",
                (list(extra),),
            )
        )
    return sorted(ids), settled


def _queued_since(conn: psycopg.Connection[Any], since: str, page: int = 5_000) -> set[str]:
    """The journals with a checkpoint queued at or after ``since`` (an xid8's text): pages in
    the order of the index ``checkpoints_queued`` (queued, journal_id), so the plan walks the
    index whatever the table's statistics (before its first ANALYZE the planner chose to scan
    the whole table for a range)."""
    found: set[str] = set()
    rows = conn.execute(QUEUE_FIRST, (since, page)).fetchall()
    while rows:
        found.update(str(j) for _, j in rows)
        if len(rows) < page:
            break
        last, journal_id = rows[-1]
        rows = conn.execute(QUEUE_NEXT, (last, journal_id, page)).fetchall()
    return found


def cosign_once(
    store_url: str,
    key: WitnessKey,
    *,
    now: int | None = None,
    approved: Approved | None = None,
    every: bool = False,
) -> CosignReport:
    """Cosign the newest accepted checkpoint of each journal with a checkpoint added since this
    witness's last tick (:func:`due_journals`; ``every``: of every journal), see the module;
    ``approved``: the keys the operator approved for journals that rotated theirs (visited on
    every tick). The cursor moves once every journal due was visited."""
    stamp = int(time.time()) if now is None else now
    done = []
    with connect(store_url, autocommit=True) as conn:
        ids, settled = due_journals(conn, key, list(approved or {}), every=every)
        for journal_id in ids:
            done.append(_cosign_journal(conn, key, journal_id, stamp, approved or {}))
        conn.execute("SELECT agentteam.witness_moved(%s, %s::xid8)", (key.key_id, str(settled)))
    return CosignReport(
        store=redact_store_url(store_url), witness_key=key.verifier.to_text(), journals=done
    )


def witness_follow(
    store_url: str,
    key: WitnessKey,
    *,
    interval: float,
    stop: Event | None = None,
    approved: Approved | None = None,
    every: bool = False,
) -> CosignReport:
    """Cosign every ``interval`` seconds until SIGTERM/SIGINT (or ``stop``); an outage of the
    store is said once on stderr and waited out. The last round's report."""
    stop = stop or Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    report = CosignReport(
        store=redact_store_url(store_url), witness_key=key.verifier.to_text(), journals=[]
    )
    down = False
    said: set[tuple[str, str, int | None]] = set()
    try:
        while not stop.is_set():
            try:
                report = cosign_once(store_url, key, approved=approved, every=every)
                if down:
                    print("agentteam-replay witness: the store is back", file=sys.stderr)
                down = False
            except StoreUnreachable as exc:
                if not down:
                    print(
                        f"agentteam-replay witness: waiting for the store: {exc}", file=sys.stderr
                    )
                down = True
            for item in report.journals:
                told = (item.journal_id, item.outcome, item.tree_size)
                if item.outcome in REFUSED and told not in said:
                    said.add(told)
                    line = f"{item.journal_id}: {item.outcome}: {item.detail}"
                    print(
                        f"agentteam-replay witness: {shown(line, one_line=True)}", file=sys.stderr
                    )
            stop.wait(interval)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return report
