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
=============================  ==============================================================

Hash chains make the comparison cheap: two journals with the same hash at seq N hold the same
events 1..N, so the first differing seq is found by a binary search over hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import journal
from journal import Reader

from ._findings import Finding
from ._fleet_store import connect, stored_head, witnessed_checkpoint
from ._source import journal_files, open_reader

if TYPE_CHECKING:
    import psycopg

__all__ = ["registered_keys", "witness_findings"]


def witness_findings(store_url: str, paths: Sequence[str | Path]) -> list[Finding]:
    """Findings for every journal the paths stand for that differs from the store's copy."""
    found: list[Finding] = []
    with connect(store_url, autocommit=True) as conn:
        for path in journal_files(paths):
            with open_reader(path) as reader:
                found += _compare(conn, reader)
    return found


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


def _compare(conn: psycopg.Connection[Any], reader: Reader) -> list[Finding]:
    jid = reader.journal_id
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
    local_seq, _ = reader.head()
    found: list[Finding] = []
    common = min(store_seq, local_seq)
    if common and reader.hash_at(common) != _hash_at(conn, jid, common):
        first = _first_difference(conn, reader, jid, common)
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


def _hash_at(conn: psycopg.Connection[Any], journal_id: str, seq: int) -> str | None:
    row = conn.execute(
        "SELECT hash FROM agentteam.events WHERE journal_id = %s AND seq = %s", (journal_id, seq)
    ).fetchone()
    return None if row is None else str(row[0])


def _first_difference(
    conn: psycopg.Connection[Any], reader: Reader, journal_id: str, high: int
) -> int:
    """The lowest seq <= high where the journal and the store disagree (they do at ``high``)."""
    low = 0  # they agree at seq 0 (genesis)
    while high - low > 1:
        middle = (low + high) // 2
        if reader.hash_at(middle) == _hash_at(conn, journal_id, middle):
            low = middle
        else:
            high = middle
    return high
