"""``ship``: copy journals' events into the fleet store, incrementally and verified.

For each journal the store's head (last seq and hash) is the resume point: the local journal must
hold the same hash at that seq (otherwise it is a fork, refused and recorded as a finding), and
every row after it is checked as ``verify`` checks it (sequence, chain, hash, journal id) before it
is accepted. Rows go in batches of ``batch_size``, each one call of the store's checked ingest
(``_fleet_ingest``: the server checks them all again, and refuses what a modified shipper would
send) in one transaction with the checkpoints it covers, so an interrupted ship leaves whole
batches and the next one resumes after them; a repeated ship finds nothing new. Memory is two
batches a job (the next one is read and checked while the server takes this one; ``jobs``
journals go at once, one connection each). What the store refuses is the same finding as a
refusal here. ``ship --follow`` is ``_fleet_follow``.

Checkpoints are accepted only when they verify under the key the journal names at their seq, as
the store registered it: the journal's key at its first ship (``journal_meta.signing_key``), then
each ``key_rotated`` event shipped in its chain. A forged or foreign signature is refused and
recorded; checkpoints of the HMAC era (which only the writer's secret can check) are skipped.
The payloads shipped are the stored text, already redacted when written: nothing is re-read
from anywhere else.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Checkpoint, Reader

from ._fleet_ingest import ESCAPED_COLUMNS, INGEST_CALL, STAGE_CALL, STAGE_COPY
from ._fleet_store import (
    StoreFinding,
    connect,
    ensure_schema,
    record_finding,
    redact_store_url,
    refusal,
    store_text,
    stored_head,
)
from ._source import Progress, ReplayInputError, journal_files, open_reader

if TYPE_CHECKING:
    import psycopg

__all__ = ["JournalShipped", "ShipReport", "send_batch", "ship"]

BATCH_SIZE: Final = 5_000
_ADD_CHECKPOINT: Final = "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s, %s)"
# Rules of journal.ChainVerifier that make a row unacceptable.
_REFUSED: Final = {
    "sequence_gap",
    "chain_broken",
    "hash_mismatch",
    "row_malformed",
    "journal_id_mismatch",
}


class JournalShipped(msgspec.Struct, kw_only=True):
    """What one ship did for one journal file."""

    path: str
    journal_id: str | None
    store_head_before: int
    shipped: int = 0
    store_head: int = 0
    checkpoints: int = 0
    checkpoints_skipped: int = 0
    refused: StoreFinding | None = None
    # A later segment of a journal whose earlier one the store does not hold yet: not shipped.
    waiting: str | None = None


class ShipReport(msgspec.Struct, kw_only=True):
    """Every journal shipped; ``ok`` unless one was refused."""

    store: str
    journals: list[JournalShipped]
    shipped: int
    refused: int

    @property
    def ok(self) -> bool:
        return self.refused == 0


class _Refused(Exception):
    def __init__(self, finding: StoreFinding) -> None:
        super().__init__(finding.detail)
        self.finding = finding


def _connect(store_url: str) -> psycopg.Connection[Any]:
    """A shipping connection, in autocommit, its transactions READ COMMITTED whatever the
    server's or the login's default: a new journal is registered (and a finding recorded) only
    in one, whose count of the login's journals sees every one committed before its lock."""
    conn = connect(store_url, autocommit=True)
    conn.execute("SET default_transaction_isolation TO 'read committed'")
    return conn


def ship(
    paths: Sequence[str | os.PathLike[str]],
    store_url: str,
    *,
    batch_size: int = BATCH_SIZE,
    progress: Progress | None = None,
    wait_unreadable: bool = False,
    jobs: int = 1,
) -> ShipReport:
    """Ship every journal the paths stand for (files, or directories of journals).

    ``progress(events shipped so far, None)`` after each batch. ``wait_unreadable``: a file
    that cannot be read as a journal (yet: one being created) waits instead of failing.
    ``jobs``: how many journals are shipped at once, each by its own connection (the server
    checks a batch on one core); the report lists them in the paths' order. A failure stops
    the others after the journal each is shipping (its batches committed or not).
    """
    files = journal_files(paths)
    conn = _connect(store_url)
    shipped: list[JournalShipped | None] = [None] * len(files)
    counts = [0] * len(files)
    lock = threading.Lock()
    pending = iter(range(len(files)))
    failed: list[BaseException] = []

    def told(index: int) -> Progress | None:
        if progress is None:
            return None

        def one(done: int, total: int | None = None) -> None:
            with lock:
                counts[index] = done
                progress(sum(counts), total)

        return one

    def work(conn: psycopg.Connection[Any]) -> None:
        while True:
            with lock:
                index = None if failed else next(pending, None)
            if index is None:
                return
            try:
                shipped[index] = _ship_path(
                    conn, files[index], batch_size, told(index), wait_unreadable
                )
            except BaseException as exc:
                with lock:
                    failed.append(exc)
                return

    def job() -> None:
        try:
            own = _connect(store_url)
        except BaseException as exc:
            with lock:
                failed.append(exc)
            return
        try:
            work(own)
        finally:
            own.close()

    try:
        ensure_schema(conn)
        workers = [
            threading.Thread(target=job, name="ship-job", daemon=True)
            for _ in range(max(0, min(jobs, len(files)) - 1))
        ]
        for worker in workers:
            worker.start()
        work(conn)
        for worker in workers:
            worker.join()
    finally:
        conn.close()
    if failed:
        raise failed[0]
    done = [item for item in shipped if item is not None]
    return ShipReport(
        store=redact_store_url(store_url),
        journals=done,
        shipped=sum(s.shipped for s in done),
        refused=sum(s.refused is not None for s in done),
    )


def _ship_path(
    conn: psycopg.Connection[Any],
    path: Path,
    batch_size: int,
    progress: Progress | None,
    wait_unreadable: bool,
) -> JournalShipped:
    try:
        return _ship_file(conn, path, batch_size, progress)
    except ReplayInputError as exc:
        if not wait_unreadable:
            raise
        waiting = f"not readable as a journal yet: {exc}"
        return JournalShipped(path=str(path), journal_id=None, store_head_before=0, waiting=waiting)


def _ship_file(
    conn: psycopg.Connection[Any],
    path: Path,
    batch_size: int,
    progress: Progress | None,
) -> JournalShipped:
    with open_reader(path) as reader:
        journal_id = reader.journal_id
        if journal_id is None:
            raise ReplayInputError(f"{path} has no journal id")
        result = JournalShipped(path=str(path), journal_id=journal_id, store_head_before=0)
        # One shipper per journal at a time (two machines shipping copies of one journal).
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (journal_id,))
        try:
            _ship_journal(conn, reader, journal_id, batch_size, progress, result)
        except _Refused as refused:
            record_finding(conn, refused.finding)
            result.refused = refused.finding
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (journal_id,))
        return result


def _ship_journal(
    conn: psycopg.Connection[Any],
    reader: Reader,
    journal_id: str,
    batch_size: int,
    progress: Progress | None,
    result: JournalShipped,
) -> None:
    source = str(reader.path)

    def refuse(seq: int | None, rule: str, detail: str) -> _Refused:
        return _Refused(
            StoreFinding(journal_id=journal_id, seq=seq, rule=rule, detail=detail, source=source)
        )

    head_seq, head_hash = stored_head(conn, journal_id)
    result.store_head_before = result.store_head = head_seq
    keys = _register(conn, reader, journal_id, refuse)
    if not _extends(conn, reader, journal_id, head_seq, head_hash, refuse, result):
        return
    pending = sorted(
        (cp for cp in reader.checkpoints() if cp.journal_id == journal_id),
        key=lambda cp: cp.seq,
    )
    _late_checkpoints(conn, journal_id, pending, head_seq, keys, refuse, result)
    later = [cp for cp in pending if cp.seq > head_seq]
    chain = journal.ChainVerifier(
        journal_id, start_seq=head_seq, start_hash=head_hash, check_payloads=False
    )
    # Reading and checking the next batch overlaps with the server taking this one.
    stored = reader.stored_rows(since_seq=head_seq, leaves=True)
    checked = _checked_batches(stored, chain, batch_size)
    with closing(_prefetched(checked)) as batches:
        for batch in batches:
            _take(conn, journal_id, batch, keys, later, refuse, result)
            if progress is not None:
                progress(result.shipped, None)


def _take(
    conn: psycopg.Connection[Any],
    journal_id: str,
    batch: _Batch,
    keys: list[tuple[int, str]],
    later: list[Checkpoint],
    refuse: Callable[[int | None, str, str], _Refused],
    result: JournalShipped,
) -> None:
    """Store one checked batch with the checkpoints it covers (verified), in one transaction."""
    keys.extend(batch.rotations)
    if batch.refused is not None:
        _commit_batch(conn, journal_id, batch.rows, [], refuse, result)
        bad = batch.refused
        raise refuse(bad.seq, bad.rule, bad.detail)
    covered: list[Checkpoint] = []
    while later and later[0].seq <= batch.rows[-1][0]:
        cp = later.pop(0)
        if _check_checkpoint(cp, batch.hashes.get(cp.seq), keys, refuse):
            covered.append(cp)
        else:
            result.checkpoints_skipped += 1
    _commit_batch(conn, journal_id, batch.rows, covered, refuse, result)


class _Batch:
    """Rows checked as verify checks them, up to the first unacceptable one (``refused``)."""

    __slots__ = ("hashes", "refused", "rotations", "rows")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.rotations: list[tuple[int, str]] = []
        self.hashes: dict[int, str] = {}
        self.refused: journal.Finding | None = None


def _checked_batches(
    rows: Iterator[Any], chain: journal.ChainVerifier, size: int
) -> Iterator[_Batch]:
    for raw in _batches(rows, size):
        batch = _Batch()
        for event, leaf in raw:
            before = len(chain.findings)
            chain.feed(event, leaf)
            bad = [f for f in chain.findings[before:] if f.rule in _REFUSED]
            if bad:
                batch.refused = bad[0]
                yield batch
                return
            # As staged: the columns, then a v2 leaf's salt and payload digest.
            leaf_columns = () if leaf is None else (leaf.salt, leaf.payload_sha256)
            batch.rows.append((*event, *leaf_columns))
            batch.hashes[event.seq] = event.hash
            if event.kind == "key_rotated":
                batch.rotations.append((event.seq, _rotated_key(event.payload)))
        yield batch


_T = TypeVar("_T")
_DONE: Final = object()


def _prefetched(items: Iterator[_T], depth: int = 2) -> Generator[_T, None, None]:
    """Yield ``items`` computed ahead in a worker thread (at most ``depth`` waiting).

    The worker ends when the consumer stops early; its exception is raised here.
    """
    ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put(_DONE)
        except BaseException as exc:  # handed to the consumer
            ready.put(exc)

    worker = threading.Thread(target=produce, name="ship-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():
            try:
                ready.get_nowait()
            except queue.Empty:
                worker.join(timeout=0.1)


def _extends(
    conn: psycopg.Connection[Any],
    reader: Reader,
    journal_id: str,
    head_seq: int,
    head_hash: str,
    refuse: Callable[[int | None, str, str], _Refused],
    result: JournalShipped,
) -> bool:
    """Whether the file continues what the store holds (False: nothing to do with it yet).

    A file may hold the whole journal or one segment of it (a later segment starts past seq
    1, its first row naming the previous segment's head as ``prev_hash``). The same history
    shows as the same hash at the last seq both hold (chain hashes cover everything before);
    another one is a fork. A segment starting past the store's head waits for its predecessor.
    """
    first = next(reader.rows(), None)
    if first is None:
        return False
    low, low_prev = int(first[0]), str(first[15])
    local_seq, _ = reader.head()
    if low > head_seq + 1:
        result.waiting = f"starts at seq {low}; the store holds up to {head_seq}"
        return False
    local_hash: str | None
    store_hash: str | None
    if low == head_seq + 1:
        at, local_hash, store_hash = low, low_prev, head_hash
    else:
        at = min(head_seq, local_seq)
        local_hash = reader.hash_at(at)
        store_hash = head_hash if at == head_seq else _store_hash(conn, journal_id, at)
    if local_hash != store_hash:
        raise refuse(
            at,
            "fork",
            f"the journal's history at seq {at} differs from the one the store holds"
            f" ({str(local_hash)[:16]}… here, {str(store_hash)[:16]}… in the store):"
            " rewritten after it was shipped",
        )
    return True


def _register(
    conn: psycopg.Connection[Any],
    reader: Reader,
    journal_id: str,
    refuse: Callable[[int | None, str, str], _Refused],
) -> list[tuple[int, str]]:
    """Register the journal to this login and its creation key (trust on first use) on first
    sight; the keys the store holds. Another login's journal is refused (``not_owner``)."""
    recorded = reader.recorded_keys()
    first_key = recorded[0][1] if recorded and recorded[0][0] == 0 else None
    with refusal() as refused:
        conn.execute(
            "SELECT agentteam.register_journal(%s, %s, %s, %s)",
            (journal_id, reader.created_at, str(reader.path), first_key),
        )
    if refused.finding is not None:
        raise refuse(refused.finding.seq, refused.finding.rule, refused.finding.detail)
    keys = [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT seq, vkey FROM agentteam.journal_keys WHERE journal_id = %s ORDER BY seq",
            (journal_id,),
        )
    ]
    local = dict(recorded)
    for seq, vkey in keys:
        if seq in local and local[seq] != vkey:
            raise refuse(
                seq,
                "signing_key_changed",
                f"the journal names another signing key at seq {seq} than the store registered"
                f" ({_key_name(local[seq])}, registered {_key_name(vkey)})",
            )
    return keys


def _late_checkpoints(
    conn: psycopg.Connection[Any],
    journal_id: str,
    pending: list[Checkpoint],
    head_seq: int,
    keys: list[tuple[int, str]],
    refuse: Callable[[int | None, str, str], _Refused],
    result: JournalShipped,
) -> None:
    """Checkpoints signed over events already shipped (e.g. at close, after the last ship)."""
    known = {
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT seq, key_id FROM agentteam.checkpoints WHERE journal_id = %s", (journal_id,)
        )
    }
    late = [cp for cp in pending if cp.seq <= head_seq and (cp.seq, cp.key_id) not in known]
    accepted = [
        cp
        for cp in late
        if cp.seq > 0 and _check_checkpoint(cp, _store_hash(conn, journal_id, cp.seq), keys, refuse)
    ]
    result.checkpoints_skipped += len(late) - len(accepted)
    if accepted:
        _commit_batch(conn, journal_id, [], accepted, refuse, result)


def _check_checkpoint(
    cp: Checkpoint,
    event_hash: str | None,
    keys: list[tuple[int, str]],
    refuse: Callable[[int | None, str, str], _Refused],
) -> bool:
    """True to keep it as a witness, False to skip it (HMAC era); _Refused when it is false."""
    if event_hash != cp.head_hash:
        raise refuse(cp.seq, "checkpoint_hash_mismatch", "a checkpoint names another head hash")
    if cp.scheme == "hmac":
        return False
    in_force = [vkey for seq, vkey in keys if seq <= cp.seq]
    if not in_force:
        raise refuse(cp.seq, "checkpoint_unverified", "no registered key for the journal")
    try:
        key = journal.VerifierKey.parse(in_force[-1])
    except ValueError:
        raise refuse(cp.seq, "checkpoint_unverified", "the registered key is not a key") from None
    verdict = journal.Trust([key]).check(cp)
    if verdict == "valid":
        return True
    if verdict == "invalid":
        raise refuse(
            cp.seq,
            "checkpoint_signature_invalid",
            f"forged or altered: does not verify under the registered {key.key_id}",
        )
    raise refuse(
        cp.seq,
        "checkpoint_unverified",
        f"signed by {cp.key_id}, not the registered key in force ({key.key_id})",
    )


def _commit_batch(
    conn: psycopg.Connection[Any],
    journal_id: str,
    rows: list[tuple[Any, ...]],
    checkpoints: list[Checkpoint],
    refuse: Callable[[int | None, str, str], _Refused],
    result: JournalShipped,
) -> None:
    """The rows through the store's checked ingest, then the checkpoints, in one transaction;
    what the store refuses (it re-checks everything) is refused here as the same finding."""
    if not (rows or checkpoints):
        return
    with refusal() as refused, conn.transaction():
        if rows:
            send_batch(conn, journal_id, rows)
        for cp in checkpoints:
            conn.execute(
                _ADD_CHECKPOINT,
                (
                    journal_id,
                    cp.seq,
                    cp.head_hash,
                    cp.ts_wall,
                    cp.key_id,
                    cp.signature,
                    cp.root_hash,
                ),
            )
    if refused.finding is not None:
        raise refuse(refused.finding.seq, refused.finding.rule, refused.finding.detail)
    result.shipped += len(rows)
    result.checkpoints += len(checkpoints)
    if rows:
        result.store_head = int(rows[-1][0])


def send_batch(
    conn: psycopg.Connection[Any], journal_id: str, rows: Sequence[Sequence[Any]]
) -> int:
    """Rows (COLUMNS order) through the store's checked ingest, inside the caller's transaction:
    COPY into this session's staging table, then one call that checks and moves them all.
    The store's head after them (what it refuses raises, as ``refusal`` reads it)."""
    conn.execute(STAGE_CALL)
    with conn.cursor() as cur, cur.copy(STAGE_COPY) as copy:
        for row in rows:
            copy.write_row(_staged(row))
    done = conn.execute(INGEST_CALL, (journal_id,)).fetchone()
    return int(done[0]) if done else 0


def _staged(row: Sequence[Any]) -> Sequence[Any]:
    """A row as staged: without journal_id, its text columns escaped for the store, then its
    leaf's salt and payload digest (a v2 journal's; None for v1)."""
    staged = [*row[:1], *row[2:17], *(row[17:19] if len(row) > 17 else (None, None))]
    for index in ESCAPED_COLUMNS:
        value = row[index]
        if isinstance(value, str) and ("\x00" in value or "\uffff" in value):
            staged[index - 1] = store_text(value)
    return staged


def _store_hash(conn: psycopg.Connection[Any], journal_id: str, seq: int) -> str | None:
    if seq == 0:
        return journal.GENESIS_HASH
    row = conn.execute(
        "SELECT hash FROM agentteam.events WHERE journal_id = %s AND seq = %s",
        (journal_id, seq),
    ).fetchone()
    return None if row is None else str(row[0])


def _batches(rows: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _rotated_key(payload: str) -> str:
    try:
        return str(msgspec.json.decode(payload)["vkey"])
    except (msgspec.DecodeError, KeyError, TypeError, RecursionError):
        return ""


def _key_name(vkey: str) -> str:
    return "+".join(vkey.split("+", 2)[:2])
