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
=============================  ==============================================================

Hash chains make the comparison cheap: two journals with the same hash at seq N hold the same
events 1..N, so the first differing seq is found by a binary search over hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Reader

from ._findings import Finding
from ._fleet_store import connect, stored_head, witnessed_checkpoint
from ._source import journal_files, open_reader

if TYPE_CHECKING:
    import psycopg

__all__ = ["registered_keys", "witness_findings"]


def witness_findings(store_url: str, paths: Sequence[str | Path]) -> list[Finding]:
    """Findings for every journal the paths stand for that differs from the store's copy.

    The files of one journal id (its segments) are compared as one journal.
    """
    found: list[Finding] = []
    with ExitStack() as stack, connect(store_url, autocommit=True) as conn:
        readers = [stack.enter_context(open_reader(p)) for p in journal_files(paths)]
        by_journal: dict[str | None, list[Reader]] = {}
        for reader in readers:
            by_journal.setdefault(reader.journal_id, []).append(reader)
        for jid, group in by_journal.items():
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
