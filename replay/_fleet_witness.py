"""``verify --witness``: a local journal compared with what the fleet store received of it.

The store holds every event shipped and the latest checkpoint it verified, outside the machine
that wrote the journal, so it catches what no file on that machine can:

=============================  ==============================================================
``witness_truncated``          the journal ends before the last event the store holds (cut
                               back, or rolled back to an older copy, after shipping)
``witness_rewritten``          the journal holds another event at a seq the store holds: the
                               history was rewritten (or rolled back and written again) after
                               shipping; the first such seq is named
``witness_checkpoint_beyond``  the store witnessed a checkpoint past the journal's end
``witness_unknown``            the store has never received this journal: nothing to compare
``witness_prune_unheld``       a ``segments_pruned`` event names a segment the store does not
                               hold with the same last hash under a checkpoint it witnessed
                               (a prune nobody could have made: the segments are simply gone)
``witness_root_mismatch``      the journal's events are the store's but its Merkle tree is
                               not (another salt or payload digest from the named leaf on: a
                               fork of the log the hash chain does not show)
=============================  ==============================================================

With ``witness_keys`` (``verify --witness URL --witness-key VKEY``) the evidence is the
witness's cosignatures (:mod:`replay._fleet_cosign`), each checked under a named key here; rows
a shipping login wrote are never taken as evidence on their own. The largest cosigned size N
with its root R is compared:

===============================  ============================================================
``witness_uncosigned``           no cosignature of this journal verifies under the named
                                 key(s) (never cosigned, a v1 journal, or another witness's)
``witness_cosignature_invalid``  a row names a trusted witness key but its signature is not
                                 that key's (forged or damaged): never trusted
``witness_truncated``            the journal ends before N
``witness_root_mismatch``        the journal's tree at size N is not R: rewritten or rolled
                                 back after cosigning (the first differing seq when the
                                 store's rows still hold the cosigned tree)
``witness_store_rewritten``      the journal's tree at N is R but the store holds another
                                 event (or an event whose hash does not recompute) at a seq
                                 <= N: the store was changed after the witness cosigned
``witness_prune_unheld``         as above, a cosigned size standing for the checkpoint
``witness_erasure_unsigned``     the store holds a ``payload_erased`` event that no
                                 cosignature covers and this journal does not hold (another
                                 event there, or none): shipped without the journal's key by
                                 someone holding the shipping login; the store keeps it
                                 pending, never applies it
===============================  ============================================================

An erasure the journal wrote, shipped but not yet covered by a cosignature, is no finding: the
store applies it when the witness cosigns a checkpoint over it; until then it still holds the
payloads, and :func:`pending_erasures` names the event (``verify``'s ``erasures_pending``; one
the store held back because a key rotated, ``erasures_held``).

Hash chains make the comparison cheap: two journals with the same hash at seq N hold the same
events 1..N, so the first differing seq is found by a binary search over hashes.

The store is read as one instant taken before the files are opened (``_store_then_files``): it
holds only what a file held when it was shipped, so a batch shipped while the comparison runs
(``ship --follow`` beside it) is no finding, neither a store "ahead" of the files nor a
checkpoint past the head read. ``verify --witness`` reads the findings and the pending
erasures in the same instant.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Reader

from ._cosign import CosignerKey
from ._findings import Finding
from ._fleet_cosign import store_reader, trusted_cosignature
from ._fleet_ingest import ERASED_ROW, leaf_hash_sql, row_hash_sql
from ._fleet_store import Instant, connect, read_only, stored_head, witnessed_checkpoint
from ._source import journal_files, open_reader

if TYPE_CHECKING:
    import psycopg

__all__ = ["pending_erasures", "registered_keys", "witness_findings"]


@contextmanager
def _store_then_files(store_url: str | Instant) -> Iterator[psycopg.Connection[Any]]:
    """A read-only connection to one instant of the store, taken before the caller opens the
    journal files (an :class:`Instant`'s is older still)."""
    with read_only(store_url) as conn:
        conn.execute("SELECT 1")  # the transaction's snapshot: its first statement's
        yield conn


def witness_findings(
    store_url: str | Instant,
    paths: Sequence[str | Path],
    *,
    witness_keys: Sequence[CosignerKey] | None = None,
) -> list[Finding]:
    """Findings for every journal the paths stand for that differs from the store's copy, or
    (``witness_keys``) from what a trusted witness cosigned.

    The files of one journal id (its segments) are compared as one journal.
    """
    found: list[Finding] = []
    with _store_then_files(store_url) as conn, ExitStack() as stack:
        readers = [stack.enter_context(open_reader(p)) for p in journal_files(paths)]
        by_journal: dict[str | None, list[Reader]] = {}
        for reader in readers:
            by_journal.setdefault(reader.journal_id, []).append(reader)
        for jid, group in by_journal.items():
            if witness_keys is not None:
                found += _compare_cosigned(conn, jid, _Local(group), witness_keys)
            else:
                found += _compare(conn, jid, _Local(group))
    return found


class _Local:
    """One journal held in one or several files (segments): its head, and its hash at a seq."""

    def __init__(self, readers: list[Reader]) -> None:
        self.readers = readers
        self.head = max(r.head()[0] for r in readers)
        firsts = [row for row in (next(r.rows(), None) for r in readers) if row is not None]
        first = min(firsts, key=lambda row: row[0]) if firsts else None
        # The first seq held here, and the hash it follows (older segments may be pruned).
        self.low = int(first[0]) if first else 1
        self.low_prev = str(first[15]) if first else journal.GENESIS_HASH

    def root(self, size: int) -> bytes | None:
        """The journal's tree hash at ``size`` (None: a v1 journal, or hashes not held here)."""
        if not all(r.merkle for r in self.readers):
            return None
        ordered = sorted(self.readers, key=lambda r: r.segment.first_seq)
        read = journal.files_reader([(r.segment.first_seq, r.stored_hash) for r in ordered])
        try:
            return journal.tree_hash(size, read)
        except journal.ProofError:
            return None

    def cosigned_event(self, seq: int, size: int, root: bytes) -> bool:
        """Whether the event held here at ``seq`` (its leaf rebuilt from its columns and
        payload) is in the tree of ``size`` whose hash is ``root`` (an inclusion proof from the
        stored hashes here)."""
        for reader in self.readers:
            stored = list(reader.stored_rows(since_seq=seq - 1, until_seq=seq))
            if stored:
                break
        else:
            return False
        row, leaf = stored[0]
        if leaf is None or not 0 < seq <= size:
            return False
        ordered = sorted(self.readers, key=lambda r: r.segment.first_seq)
        read = journal.files_reader([(r.segment.first_seq, r.stored_hash) for r in ordered])
        try:
            if journal.is_erased(row.payload, leaf.salt):  # its digest is all that is left
                digest = leaf.payload_sha256
            else:
                digest = journal.payload_digest(bytes.fromhex(leaf.salt), row.payload)
            proof = journal.inclusion_proof(seq - 1, size, read)
        except (ValueError, journal.ProofError):
            return False
        hashed = journal.leaf_hash(journal.leaf_bytes(row, digest))
        return journal.verify_inclusion(seq - 1, size, hashed, proof, root)

    def hash_at(self, seq: int) -> str | None:
        if seq == self.low - 1:
            return self.low_prev
        for reader in self.readers:
            found = reader.hash_at(seq)
            if found is not None:
                return found
        return None


def registered_keys(store_url: str, journal_ids: Sequence[str]) -> list[journal.VerifierKey]:
    """The signing keys the store registered for these journals (what their checkpoints were
    verified under when shipped): trusted by ``verify --witness``."""
    keys: list[journal.VerifierKey] = []
    with connect(store_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT DISTINCT vkey FROM agentteam.journal_keys WHERE journal_id = ANY(%s)",
            (list(journal_ids),),
        ).fetchall()
    for (vkey,) in rows:
        try:
            keys.append(journal.VerifierKey.parse(str(vkey)))
        except ValueError:
            continue
    return keys


def _compare(conn: psycopg.Connection[Any], jid: str | None, local: _Local) -> list[Finding]:
    known = conn.execute(
        "SELECT 1 FROM agentteam.journals WHERE journal_id = %s", (jid,)
    ).fetchone()
    if known is None:
        return [
            Finding(
                journal_id=jid,
                seq=None,
                rule="witness_unknown",
                detail="the store has never received this journal: nothing witnesses it",
            )
        ]
    assert jid is not None
    store_seq, _ = stored_head(conn, jid)
    local_seq = local.head
    found: list[Finding] = []
    common = min(store_seq, local_seq)
    if common >= local.low - 1 and local.hash_at(common) != _hash_at(conn, jid, common):
        first = _first_difference(conn, local, jid, common)
        found.append(
            Finding(
                journal_id=jid,
                seq=first,
                rule="witness_rewritten",
                detail=f"event {first} differs from the one shipped to the store: the history"
                " was rewritten after shipping",
            )
        )
    forked = None if found else _first_other_leaf(conn, jid, local, common)
    if forked is not None:
        found.append(
            Finding(
                journal_id=jid,
                seq=forked,
                rule="witness_root_mismatch",
                detail=f"the journal's Merkle tree differs from the store's from leaf {forked}"
                " on, its events the same: a fork of the log (another salt or payload digest)"
                " made after shipping",
            )
        )
    if local_seq < store_seq:
        found.append(
            Finding(
                journal_id=jid,
                seq=local_seq + 1,
                rule="witness_truncated",
                detail=f"the journal ends at seq {local_seq}; the store holds events up to"
                f" {store_seq} (cut back or rolled back after shipping)",
            )
        )
    witnessed = witnessed_checkpoint(conn, jid)
    found += _prunes_unheld(conn, jid, local, 0 if witnessed is None else witnessed[0])
    if witnessed is not None and witnessed[0] > local_seq:
        found.append(
            Finding(
                journal_id=jid,
                seq=local_seq + 1,
                rule="witness_checkpoint_beyond",
                detail=f"the store witnessed a checkpoint at seq {witnessed[0]}; the journal"
                f" ends at {local_seq}",
            )
        )
    return found


def _compare_cosigned(
    conn: psycopg.Connection[Any], jid: str | None, local: _Local, keys: Sequence[CosignerKey]
) -> list[Finding]:
    """The journal against the largest cosignature under ``keys`` (see the module)."""
    known = None
    if jid is not None:
        known = conn.execute(
            "SELECT 1 FROM agentteam.journals WHERE journal_id = %s", (jid,)
        ).fetchone()
    if known is None or jid is None:
        return [
            Finding(
                journal_id=jid,
                seq=None,
                rule="witness_unknown",
                detail="the store has never received this journal: nothing witnesses it",
            )
        ]
    cosigned, forged = trusted_cosignature(conn, jid, keys)
    found = [
        Finding(
            journal_id=jid,
            seq=row.tree_size,
            rule="witness_cosignature_invalid",
            detail=f"the store holds a cosignature of size {row.tree_size} naming witness key"
            f" {row.key_id} that this key did not make: not trusted",
        )
        for row in forged
    ]
    if cosigned is None:
        return [
            *found,
            Finding(
                journal_id=jid,
                seq=None,
                rule="witness_uncosigned",
                detail="no cosignature of this journal verifies under the witness key(s) given:"
                " nothing witnesses it (run agentteam-replay witness; a v1 journal is never"
                " cosigned)",
            ),
        ]
    size, root = cosigned.tree_size, bytes.fromhex(cosigned.root_hash)
    witness = cosigned.key_id
    if local.head < size:
        return [
            *found,
            Finding(
                journal_id=jid,
                seq=local.head + 1,
                rule="witness_truncated",
                detail=f"the journal ends at seq {local.head}; witness {witness} cosigned its"
                f" first {size} events (cut back or rolled back after cosigning)",
            ),
        ]
    try:
        store_root: bytes | None = journal.tree_hash(size, store_reader(conn, jid))
    except journal.ProofError:
        store_root = None
    if local.root(size) != root:
        seq = None
        if store_root == root and local.hash_at(size) != _hash_at(conn, jid, size):
            seq = _first_difference(conn, local, jid, size)
        where = "" if seq is None else f" (first at seq {seq})"
        return [
            *found,
            Finding(
                journal_id=jid,
                seq=seq,
                rule="witness_root_mismatch",
                detail=f"the journal's tree at size {size} is not the root witness {witness}"
                f" cosigned{where}: rewritten or rolled back after cosigning",
            ),
        ]
    altered = _store_altered(conn, jid, local, size)
    if altered is not None and not local.cosigned_event(altered, size, root):
        return [
            *found,
            Finding(
                journal_id=jid,
                seq=altered,
                rule="witness_root_mismatch",
                detail=f"event {altered} of the journal is not the one witness {witness} cosigned"
                " (its leaf is not in the cosigned tree): rewritten after cosigning",
            ),
        ]
    if altered is not None or store_root != root:
        found.append(
            Finding(
                journal_id=jid,
                seq=altered,
                rule="witness_store_rewritten",
                detail=f"the journal agrees with what witness {witness} cosigned at size {size},"
                " the store does not"
                + ("" if altered is None else f" at seq {altered}")
                + ": the store was changed after the witness cosigned",
            )
        )
    for seq, held, named in _pending(conn, jid):
        mine = local.hash_at(seq)
        if mine is not None and mine == held:
            continue  # the journal's own erasure, waiting for a cosignature: no finding
        what = "another event there" if mine is not None else f"nothing (its head is {local.head})"
        found.append(
            Finding(
                journal_id=jid,
                seq=seq,
                rule="witness_erasure_unsigned",
                detail=f"the store holds a payload_erased event at seq {seq} naming"
                f" {_seqs_text(named)} that no cosignature covers; this journal holds {what}:"
                " shipped without the journal's key, it stays pending and is never applied",
            )
        )
    found += _prunes_unheld(conn, jid, local, size)
    return found


def pending_erasures(
    store_url: str | Instant, paths: Sequence[str | Path]
) -> dict[str, tuple[list[int], list[int]]]:
    """Per journal id of ``paths``: the seqs of its own ``payload_erased`` events (held here
    with the store's hash) the store has not applied: (pending, no cosignature covering them
    yet; held, a key rotated since the journal was registered: the owner's ``erase --from``
    applies them). Information, not findings."""
    found: dict[str, tuple[list[int], list[int]]] = {}
    with _store_then_files(store_url) as conn, ExitStack() as stack:
        readers = [stack.enter_context(open_reader(p)) for p in journal_files(paths)]
        by_journal: dict[str, list[Reader]] = {}
        for reader in readers:
            if reader.journal_id is not None:
                by_journal.setdefault(reader.journal_id, []).append(reader)
        for jid, group in by_journal.items():
            local = _Local(group)
            pending = [s for s, held, _ in _pending(conn, jid) if local.hash_at(s) == held]
            kept = [s for s, held, _ in _pending(conn, jid, held=True) if local.hash_at(s) == held]
            if pending or kept:
                found[jid] = (pending, kept)
    return found


def _pending(
    conn: psycopg.Connection[Any], jid: str, *, held: bool = False
) -> list[tuple[int, str | None, list[int]]]:
    """(seq, the store's hash there, the seqs it names) of each ``payload_erased`` event of the
    journal the store recorded and no cosignature settled yet (``held``: that one settled
    without applying it, a key having rotated)."""
    row = conn.execute("SELECT to_regclass('agentteam.erasures_settled') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return []
    settled = "s.outcome = 'key_rotated'" if held else "s.event_seq IS NULL"
    rows = conn.execute(
        "SELECT p.event_seq, e.hash, p.seqs FROM agentteam.erasures_pending p"
        " LEFT JOIN agentteam.events e ON e.journal_id = p.journal_id AND e.seq = p.event_seq"
        " LEFT JOIN agentteam.erasures_settled s"
        "   ON s.journal_id = p.journal_id AND s.event_seq = p.event_seq"
        f" WHERE p.journal_id = %s AND {settled} ORDER BY p.event_seq",
        (jid,),
    ).fetchall()
    return [
        (int(seq), None if stored is None else str(stored), [int(n) for n in named or []])
        for seq, stored, named in rows
    ]


def _seqs_text(seqs: list[int]) -> str:
    shown = ", ".join(str(s) for s in seqs[:8])
    return f"seqs {shown}{', ...' if len(seqs) > 8 else ''}" if seqs else "no seq"


# A stored event's hash recomputed from its columns, as the ingest computed it when it came in.
_ROW_HASH: Final = row_hash_sql("r", "r.journal_id")

# A stored event erased by a recorded erasure its witness could vouch for: its hash covered the
# erased bytes and is taken as stored (as verify takes it), but its leaf (envelope and payload
# digest, the first of its stored hashes) must still rebuild from its columns, and the erasure
# must be the store owner's (``erase --from``: no event) or a ``payload_erased`` event inside the
# cosigned history (so under a checkpoint whose signature the witness verified). A
# ``payload_erased`` past it is not yet evidence: anyone holding the shipping login could have
# shipped it unsigned, and its rows read as rewritten until a cosignature covers it.
_RECORDED_ERASURE: Final = f"""({ERASED_ROW}
  AND EXISTS (SELECT 1 FROM agentteam.erased_seqs x JOIN agentteam.erasures e
              ON e.journal_id = x.journal_id AND e.id = x.erasure
              WHERE x.journal_id = r.journal_id AND x.seq = r.seq
                AND (e.event_seq IS NULL OR e.event_seq <= %(size)s))
  AND substring(r.tree_hashes FROM 1 FOR 32) = {leaf_hash_sql("r", "r.journal_id")})"""


def _store_altered(conn: psycopg.Connection[Any], jid: str, local: _Local, size: int) -> int | None:
    """The first seq <= size (held here) where the store's event differs from this journal's,
    or whose stored hash does not recompute from its columns (a recorded erasure's leaf must);
    None when none does."""
    first = None
    low = local.low
    if local.hash_at(size) != _hash_at(conn, jid, size):
        first = _first_difference(conn, local, jid, size)
    conn.execute("SET extra_float_digits = 1")  # the float text the ingest hashed
    row = conn.execute(
        "SELECT min(r.seq) FROM agentteam.events r WHERE r.journal_id = %(jid)s"
        f" AND r.seq BETWEEN %(low)s AND %(size)s AND r.hash IS DISTINCT FROM {_ROW_HASH}"
        f" AND NOT coalesce({_RECORDED_ERASURE}, false)",
        {"jid": jid, "low": low, "size": size},
    ).fetchone()
    if row is not None and row[0] is not None:
        first = int(row[0]) if first is None else min(first, int(row[0]))
    return first


def _prunes_unheld(
    conn: psycopg.Connection[Any], jid: str, local: _Local, witnessed_seq: int
) -> list[Finding]:
    """Each segment a ``segments_pruned`` event names must be in the store: its last event with
    the same hash, under a witnessed checkpoint (what ``prune`` checked before deleting it)."""
    found: list[Finding] = []
    for reader in local.readers:
        for record in reader.events(kind="segments_pruned"):
            payload = record.payload
            if not isinstance(payload, journal.SegmentsPruned):
                continue  # payload_invalid, reported by verify
            for segment in payload.segments:
                held = _hash_at(conn, jid, segment.last_seq)
                if held == segment.last_hash and witnessed_seq >= segment.last_seq:
                    continue
                why = "holds another event there" if held is not None else "does not hold it"
                if held == segment.last_hash:
                    why = f"witnessed a checkpoint only up to seq {witnessed_seq}"
                found.append(
                    Finding(
                        journal_id=jid,
                        seq=record.seq,
                        rule="witness_prune_unheld",
                        detail=f"the prune at seq {record.seq} names {segment.file} (seqs"
                        f" {segment.first_seq}..{segment.last_seq}); the store {why}",
                    )
                )
    return found


def _hash_at(conn: psycopg.Connection[Any], journal_id: str, seq: int) -> str | None:
    if seq == 0:
        return journal.GENESIS_HASH
    row = conn.execute(
        "SELECT hash FROM agentteam.events WHERE journal_id = %s AND seq = %s", (journal_id, seq)
    ).fetchone()
    return None if row is None else str(row[0])


def _first_other_leaf(
    conn: psycopg.Connection[Any], jid: str, local: _Local, size: int
) -> int | None:
    """The first seq <= size whose Merkle leaf here is not the store's, when the trees of the
    first ``size`` events differ (None: the same, a v1 journal, or leaves not held on a side).
    The chain does not cover a v2 event's salt and payload digest, its leaf does: two trees
    over one chain are a fork only the leaves show. Binary search over tree hashes."""
    if size <= 0:
        return None
    read = store_reader(conn, jid)

    def differs(n: int) -> bool | None:
        try:
            theirs = journal.tree_hash(n, read)
        except journal.ProofError:
            return None
        mine = local.root(n)
        return None if mine is None else mine != theirs

    if not differs(size):
        return None
    low, high = 0, size  # the trees agree at low (the empty tree), differ at high
    while high - low > 1:
        middle = (low + high) // 2
        if differs(middle):
            high = middle
        else:
            low = middle
    return high


def _first_difference(
    conn: psycopg.Connection[Any], local: _Local, journal_id: str, high: int
) -> int:
    """The lowest seq <= high held here where the journal and the store disagree (they do at
    ``high``); the first seq held when they disagree already before it."""
    low = local.low - 1
    if local.hash_at(low) != _hash_at(conn, journal_id, low):
        return local.low
    while high - low > 1:
        middle = (low + high) // 2
        if local.hash_at(middle) == _hash_at(conn, journal_id, middle):
            low = middle
        else:
            high = middle
    return high
