"""``prune``: remove a journal's old segments once a fleet store holds and has witnessed them.

This is the only code that deletes journal data. A segment file goes only when every one of
these holds:

* it is closed and whole: a later segment of the journal is here and its first event links to
  this one's last (never the live segment, never a file whose successor is missing);
* it comes first: every segment before it goes too (or went before), so what is left is one
  chain from a link a ``segments_pruned`` event names;
* its last event is older than ``older_than_days``;
* the store holds every event of it: ``contiguous_seq`` (the store holds 1..n without a gap)
  reaches its last seq, and the store holds each of its events with the same chain hash and
  the same Merkle leaf hash (``first_unheld_leaf``: every seq compared, so a journal rolled back
  and written again after shipping keeps what the store never held);
* a witness the operator names (``witness_keys``, ``--witness-key``) cosigned it: the largest
  cosignature under those keys (``trusted_cosignature``, its signature checked here) is at or
  after its last seq, and ``verify --witness`` with those keys finds nothing for the journal
  (its tree at the cosigned size is the cosigned root, the store's rows agree, every earlier
  prune held): a store or journal that disagrees with the witness prunes nothing.

The prune is journaled first: a ``segments_pruned`` event, durable, in the live segment (taken
with the writer's lock, so a journal a live session holds is skipped and reported: prune it once
the session ends), naming each file, its seq range and last hash, the store (without password)
and what it held and witnessed. Then the files go (with any ``-wal``/``-shm`` beside them).
A crash between the two leaves files an event already names: harmless, the next prune removes
them. ``verify`` accepts a journal starting after seq 1 when such an event names the segment
just before its first file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Event, PrunedSegment, SegmentsPruned

from ._cosign import CosignerKey
from ._fleet_cosign import first_unheld_leaf, trusted_cosignature
from ._fleet_ingest import ERASED_ROW
from ._fleet_store import connect, contiguous_seq, redact_store_url
from ._source import ReplayInputError, journal_files, open_reader

if TYPE_CHECKING:
    import psycopg

__all__ = ["JournalPruned", "PruneReport", "prune"]

PRUNE_SESSION: Final = "agentteam-replay-prune"


class JournalPruned(msgspec.Struct, frozen=True, kw_only=True):
    """What a prune did to one journal: the files removed, and why it stopped where it did."""

    journal: str  # the journal's name (its first segment's path)
    journal_id: str | None
    removed: list[PrunedSegment]
    kept: int  # segment files left
    held_seq: int
    witnessed_seq: int | None
    # Why the next segment (or the journal) was kept: "live segment", "newer than N days",
    # "not all in the store", "not witnessed", "in use by a live session", ...
    stopped: str
    bytes_removed: int = 0


class PruneReport(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    older_than_days: float
    dry_run: bool
    journals: list[JournalPruned]

    @property
    def removed(self) -> int:
        return sum(len(j.removed) for j in self.journals)


class _Segment:
    __slots__ = ("first_seq", "last_hash", "last_seq", "last_wall", "linked", "path", "size")

    def __init__(self, path: Path) -> None:
        self.path = path
        with open_reader(path) as reader:
            self.first_seq = reader.segment.first_seq
            self.last_seq, self.last_hash = reader.head()
            last = list(reader.rows(since_seq=self.last_seq - 1))
        self.last_wall = str(last[-1][5]) if last else ""
        self.linked = False  # the next segment's first event follows this one's last (_link)
        self.size = sum(_size(p) for p in _files_of(path))

    def hashes(self) -> Iterator[tuple[int, str, bytes | None]]:
        """(seq, hash, Merkle leaf hash or None) of each event of the segment, in order."""
        with open_reader(self.path) as reader:
            for row, leaf in reader.stored_rows(leaves=True):
                tree = None if leaf is None or leaf.tree_hashes is None else leaf.tree_hashes
                yield int(row[0]), str(row[16]), None if tree is None else bytes(tree[:32])

    def whole(self) -> PrunedSegment:
        return PrunedSegment(
            file=self.path.name,
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            last_hash=self.last_hash,
        )


def prune(
    paths: Sequence[str | os.PathLike[str]],
    store_url: str,
    *,
    older_than_days: float,
    witness_keys: Sequence[CosignerKey] = (),
    key: journal.SigningKey | bytes | Path | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneReport:
    """Prune the journals the paths stand for (files or directories; see the module).

    ``witness_keys``: the witnesses whose cosignature must cover each segment (required).
    ``key``: the signing key the prune's event and final checkpoint are signed with (default:
    this machine's, as the bridge signs). ``dry_run``: decide, journal and remove nothing.
    """
    if older_than_days < 0:
        raise ReplayInputError("--older-than must be 0 days or more")
    if not witness_keys:
        raise ReplayInputError(
            "prune needs the witness key whose cosignature must cover what it removes"
            " (--witness-key VKEY; see agentteam-replay witness)"
        )
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    # Events' ts_wall is RFC 3339 UTC with microseconds: such times compare as strings.
    cutoff = datetime.fromtimestamp(moment.timestamp() - older_than_days * 86400, UTC)
    cutoff_wall = cutoff.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    bases = list(dict.fromkeys(journal.base_path(p) for p in journal_files(paths)))
    reports = [
        _prune_journal(base, store_url, older_than_days, cutoff_wall, witness_keys, key, dry_run)
        for base in bases
    ]
    return PruneReport(
        store=redact_store_url(store_url),
        older_than_days=older_than_days,
        dry_run=dry_run,
        journals=reports,
    )


def _prune_journal(
    base: Path,
    store_url: str,
    older_than_days: float,
    cutoff_wall: str,
    witness_keys: Sequence[CosignerKey],
    key: journal.SigningKey | bytes | Path | None,
    dry_run: bool,
) -> JournalPruned:
    files = [path for _, path in journal.segment_files(base)]
    segments = [_Segment(path) for path in files]
    with open_reader(files[-1]) as reader:
        journal_id = reader.journal_id
    _link(segments)
    held = contiguous_seq(store_url, journal_id) if journal_id else 0
    witnessed, disagreement = (
        _cosigned(store_url, journal_id, files, witness_keys)
        if held
        else (None, "the store holds no event of this journal")
    )

    def report(removed: list[_Segment], stopped: str, *, removed_bytes: int = 0) -> JournalPruned:
        return JournalPruned(
            journal=str(base),
            journal_id=journal_id,
            removed=[s.whole() for s in removed],
            kept=len(segments) - (0 if dry_run else len(removed)),
            held_seq=held,
            witnessed_seq=None if witnessed is None else witnessed[0],
            stopped=stopped,
            bytes_removed=removed_bytes,
        )

    if disagreement is not None:
        return report([], disagreement)
    chosen: list[_Segment] = []
    stopped = "live segment"
    for segment in segments[:-1]:
        if not segment.linked:
            stopped = f"{segment.path.name} is not linked to the next segment (run verify)"
            break
        if segment.last_wall >= cutoff_wall:
            stopped = f"newer than {older_than_days:g} days"
            break
        if held < segment.last_seq:
            stopped = f"the store holds seq 1..{held}, not all of {segment.path.name}"
            break
        if witnessed is None or witnessed[0] < segment.last_seq:
            at = "nothing" if witnessed is None else f"up to seq {witnessed[0]}"
            stopped = f"the witness has cosigned {at}, not the end of {segment.path.name}"
            break
        with connect(store_url, autocommit=True) as conn:
            differs = first_unheld_leaf(conn, journal_id or "", segment.hashes())
            erased = None if differs is not None else _erased_there_only(conn, segment, journal_id)
        if differs is not None:
            stopped = (
                f"the store holds another event at seq {differs} of {segment.path.name}"
                " (rewritten or rolled back after shipping: run verify --witness)"
            )
            break
        if erased is not None:
            stopped = (
                f"held: the store holds event {erased} of {segment.path.name} erased, this file"
                " still holds its payload (the only copy: erase it here too, or keep the file)"
            )
            break
        chosen.append(segment)
    if not chosen or dry_run:
        return report(chosen, stopped)
    assert witnessed is not None
    event = SegmentsPruned(
        segments=[s.whole() for s in chosen],
        store=redact_store_url(store_url),
        held_seq=held,
        witnessed_seq=witnessed[0],
        witnessed_hash=witnessed[1],
        older_than_days=older_than_days,
    )
    try:
        writer = journal.open_sync_writer(
            base, key=key, checkpoint_path=Path(f"{base}.checkpoint.json")
        )
    except journal.JournalUnavailable as exc:
        if exc.reason == "locked":
            return report([], "in use by a live session (prune it once the session ends)")
        raise ReplayInputError(f"cannot write the journal {base}: {exc}") from None
    with writer:
        if writer.path in {s.path for s in chosen}:  # cannot be: the live one is never chosen
            raise ReplayInputError(f"{writer.path} is live")
        writer.append(Event(session_id=PRUNE_SESSION, payload=event))  # durable first
        removed_bytes = 0
        for segment in chosen:
            for path in _files_of(segment.path):
                removed_bytes += _size(path)
                path.unlink(missing_ok=True)
        journal_dir = base.parent
        fd = os.open(journal_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return report(chosen, stopped, removed_bytes=removed_bytes)


def _cosigned(
    store_url: str,
    journal_id: str | None,
    files: list[Path],
    keys: Sequence[CosignerKey],
) -> tuple[tuple[int, str] | None, str | None]:
    """((cosigned size, this journal's hash there), None), or (None, why nothing goes): no
    cosignature under ``keys``, or a finding of ``verify --witness`` with them."""
    from ._fleet_witness import witness_findings

    if journal_id is None:
        return None, "the journal has no id: the store never received it"
    found = witness_findings(store_url, files, witness_keys=keys)
    if found:
        first = found[0]
        at = "" if first.seq is None else f"@{first.seq}"
        return None, f"{first.rule}{at}: {first.detail} (run verify --witness)"
    with connect(store_url, autocommit=True) as conn:
        cosigned, _ = trusted_cosignature(conn, journal_id, keys)
    if cosigned is None:  # cannot be: witness_uncosigned above
        return None, "no cosignature under the witness key(s)"
    size = cosigned.tree_size
    with ExitStack() as stack:
        readers = [stack.enter_context(open_reader(p)) for p in files]
        local = next((h for r in readers if (h := r.hash_at(size)) is not None), None)
    return (size, local or ""), None


def _erased_there_only(
    conn: psycopg.Connection[Any], segment: _Segment, journal_id: str | None
) -> int | None:
    """The first seq of the segment whose payload the store holds erased while this file still
    holds it (the store's erasure applied, or its row shipped erased by someone else): None if
    there is none. Same leaf, so nothing else tells them apart."""
    rows = conn.execute(
        "SELECT r.seq FROM agentteam.events r WHERE r.journal_id = %s"
        f" AND r.seq BETWEEN %s AND %s AND {ERASED_ROW} ORDER BY r.seq",
        (journal_id or "", segment.first_seq, segment.last_seq),
    ).fetchall()
    if not rows:
        return None
    with open_reader(segment.path) as reader:
        for (seq,) in rows:
            for row, leaf in reader.stored_rows(since_seq=int(seq) - 1, until_seq=int(seq)):
                if not journal.is_erased(row.payload, None if leaf is None else leaf.salt):
                    return int(seq)
    return None


def _link(segments: list[_Segment]) -> None:
    """Mark each segment whose successor's first event follows its last event."""
    for segment, successor in itertools.pairwise(segments):
        with open_reader(successor.path) as reader:
            row = reader.first_row()
        segment.linked = (
            row is not None
            and row[6] == "segment_started"
            and row[0] == segment.last_seq + 1
            and row[15] == segment.last_hash
        )


def _files_of(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm")]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
