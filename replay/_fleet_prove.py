"""``prove --from postgresql://...``: inclusion and consistency proofs answered from the store.

The store keeps each v2 event's leaf columns and the stored hashes its append made (Go tlog's
layout, recomputed by the ingest in SQL: ``_fleet_ingest``), and each checkpoint with the root
the ingest checked. A proof from the store is the local ``prove``'s (:mod:`replay._prove`):
the same hashes, the same ``--json`` fields, checked by ``check-proof`` and any RFC 6962
implementation. Reads O(log n) rows per proof; it trusts nothing the shipper sent unchecked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Checkpoint

from . import _prove
from ._fleet_store import read_only
from ._source import ReplayInputError

if TYPE_CHECKING:
    import psycopg

__all__ = ["open_store_log"]

_HASH = 32
_CHECKPOINTS = (
    "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash"
    " FROM agentteam.checkpoints WHERE journal_id = %s AND root_hash IS NOT NULL"
)


class _StoreLog(_prove._Journal):
    """One journal's Merkle log as the fleet store holds it (``_prove._Journal``'s questions)."""

    def __init__(self, conn: psycopg.Connection[Any], journal_id: str, size: int) -> None:
        self.readers = []
        self.journal_id = journal_id
        self.origin = _prove.origin_of(journal_id)
        self.read = self._stored
        self._conn = conn
        self._size = size

    def _stored(self, indexes: Sequence[int]) -> list[bytes]:
        wanted = {i: journal.record_of_index(i) + 1 for i in indexes}
        rows = dict(
            self._conn.execute(
                "SELECT seq, tree_hashes FROM agentteam.events"
                " WHERE journal_id = %s AND seq = ANY(%s)",
                (self.journal_id, sorted(set(wanted.values()))),
            ).fetchall()
        )
        found = []
        for index in indexes:
            seq = wanted[index]
            at = (index - journal.stored_index_of(seq)) * _HASH
            stored = rows.get(seq)
            if stored is None or len(stored) < at + _HASH:
                raise journal.ProofError(f"the store holds no stored hash {index}")
            found.append(bytes(stored[at : at + _HASH]))
        return found

    def head(self) -> int:
        return self._size

    def held(self, seq: int) -> None:
        return None  # the store holds every event up to its head

    def call_seqs(self, call_id: str) -> list[int]:
        rows = self._conn.execute(
            "SELECT seq FROM agentteam.events WHERE journal_id = %s AND call_id = %s"
            " AND seq <= %s ORDER BY seq",
            (self.journal_id, call_id, self._size),
        )
        return [int(r[0]) for r in rows]

    def _checkpoints(self, where: str, params: tuple[Any, ...]) -> list[Checkpoint]:
        rows = self._conn.execute(f"{_CHECKPOINTS} {where}", (self.journal_id, *params))
        return [
            Checkpoint(
                journal_id=r[0],
                seq=r[1],
                head_hash=r[2],
                ts_wall=r[3],
                key_id=r[4],
                signature=r[5],
                root_hash=r[6],
            )
            for r in rows
        ]

    def latest_checkpoint(self) -> Checkpoint | None:
        found = self._checkpoints("ORDER BY seq DESC, received_at LIMIT 1", ())
        return found[0] if found else None

    def notes_at(self, *sizes: int) -> dict[int, str]:
        found = self._checkpoints("AND seq = ANY(%s) ORDER BY received_at", (list(sizes),))
        return {cp.seq: cp.note() for cp in found}

    def leaf(self, seq: int) -> bytes:
        row = self._conn.execute(
            f"SELECT {', '.join(journal.COLUMNS)}, payload_sha256 FROM agentteam.events"
            " WHERE journal_id = %s AND seq = %s",
            (self.journal_id, seq),
        ).fetchone()
        if row is None or row[17] is None:
            raise ReplayInputError(f"the store holds no leaf of event {seq} of {self.journal_id}")
        return journal.leaf_bytes(tuple(row[:17]), str(row[17]))


@contextmanager
def open_store_log(url: str, journal_id: str) -> Iterator[_prove._Journal]:
    """The store's copy of a v2 journal's Merkle log (ReplayInputError when it holds none), as
    one instant of the store: its head, hashes and checkpoints read in one snapshot (a ship
    landing meanwhile would give a checkpoint past the head read)."""
    with read_only(url) as conn:
        row = conn.execute(
            "SELECT tree_size FROM agentteam.heads WHERE journal_id = %s", (journal_id,)
        ).fetchone()
        if row is None:
            raise ReplayInputError(f"the store holds no journal {journal_id}")
        if int(row[0]) == 0:
            raise ReplayInputError(
                f"the store holds journal {journal_id} as v1 (chain only, no proofs)"
            )
        yield _StoreLog(conn, journal_id, int(row[0]))
