"""The trio writer: appends from many tasks, group-committed by one worker thread.

``append`` builds the row at once in the event loop (so seq order is append order; this is CPU
only, microseconds). A durable row goes to the worker's queue at once, with the rows appended
before it; a row appended with ``durable=False`` waits in the event loop for the next durable one,
or for ``LINGER_S``, whichever comes first, so that a call's events travel to the worker as one
item (one thread wake-up, one transaction) rather than one each. The worker is one thread with the
one connection, started by a task of the writer's nursery (``trio.to_thread.run_sync``), so it is
owned like any task. It takes every item that is ready, commits them in one transaction, and hands
the outcome back to the event loop (``TrioToken.run_sync_soon``), which wakes the appenders that
wait for durability. While a commit runs, new rows gather for the next one: that is the group
commit, and it needs no timer. A semaphore of ``queue_size`` slots gives back-pressure: ``append``
waits for room before it takes a seq.

A failed commit makes the writer *failed* (``writer.failed``): every queued and later append
raises JournalUnavailable with the failure's reason until the writer recovers. Failure is sticky
because appends made with ``durable=False`` had already returned. The writer recovers by itself:
a task of its nursery re-probes (reopens the connection) with a bounded backoff (``PROBE_MIN_S``
doubling to ``PROBE_MAX_S``), and ``await writer.recover()`` probes at once. The first row after
a recovery is a ``journal_gap`` event: what failed, since when, for how long, and the calls that
lost an event. Those calls are closed in this journal: their later events are refused, so each
one's story stays a clean prefix (a reader closes it at the gap).

On exit, even when cancelled, the worker commits what is queued, signs a final checkpoint and
closes the connection before the ``async with`` block ends.

The queued items and the gap's bookkeeping are in :mod:`journal._handoff`; the core that builds
and commits rows (and rolls segments over) is :mod:`journal._core`.
"""

from __future__ import annotations

import math
import os
import queue
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Final, Unpack

import msgspec
import trio

from ._checkpoint import Checkpoint
from ._core import WriterOptions, _Core, open_core
from ._errors import JournalUnavailable
from ._events import Event
from ._handoff import (
    _STOP,
    _Append,
    _Barrier,
    _Gap,
    _GapAppend,
    _Item,
    _Recover,
    _Rollover,
)

__all__ = ["AsyncWriter", "JournalWriter", "WriterStats", "open_writer"]

QUEUE_SIZE: Final = 1024
MAX_BATCH: Final = 512
LINGER_S: Final = 0.005  # longest a non-durable row waits in the event loop for company
PROBE_MIN_S: Final = 0.05  # first re-probe of a failed journal; doubles up to PROBE_MAX_S
PROBE_MAX_S: Final = 2.0
_MAX_CLOSED_CALLS: Final = 10_000  # calls remembered as closed by a gap (oldest forgotten)


class WriterStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a writer since it opened."""

    appended: int
    committed: int
    commits: int
    durable_commits: int
    checkpoints: int
    largest_batch: int
    lost: int = 0  # appended, then lost with a failed commit (never committed)
    # Time spent degraded, the current spell too: from a failure until its journal_gap row is
    # committed (the writer refuses appends, then takes them behind the gap while it commits).
    degraded_seconds: float = 0.0


class AsyncWriter:
    """A journal open for writing from trio tasks; get one from :func:`open_writer`."""

    def __init__(self, core: _Core, *, queue_size: int, max_batch: int) -> None:
        self._core = core
        self._queue: queue.SimpleQueue[_Item | list[_Append] | object] = queue.SimpleQueue()
        # Non-durable rows not yet handed to the worker, in seq order (see _hand_over).
        self._lingering: list[_Append] = []
        self._linger_scope = trio.CancelScope()  # replaced by _linger's own
        self._slots = trio.Semaphore(queue_size)
        self._max_batch = max_batch
        self._token = trio.lowlevel.current_trio_token()
        self._failed: JournalUnavailable | None = None
        self._gap: _Gap | None = None  # open from a failure until its journal_gap row commits
        self._failure_seen = trio.Event()  # wakes the re-probe task
        # Calls that lost an event (redacted id -> the failure's reason): later events refused.
        self._closed_calls: dict[str, JournalUnavailable] = {}
        self._closed = False
        self._appended = self._committed = self._commits = self._durable_commits = 0
        self._checkpoints = self._largest_batch = self._lost = 0
        # Time spent degraded (a gap open): closed spells summed, and the open one's start
        # (monotonic seconds, not trio's clock: metrics read it from their exporter's thread).
        self._degraded_s = 0.0
        self._failed_since: float | None = None

    @property
    def journal_id(self) -> str:
        return self._core.journal_id

    @property
    def path(self) -> Path:
        return self._core.path

    @property
    def failed(self) -> JournalUnavailable | None:
        """The failure that made the writer refuse appends, or None while it is healthy."""
        return self._failed

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last committed event; (0, 64 zeros) when empty."""
        return self._core.committed_seq, self._core.committed_hash

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        return self._core.last_checkpoint

    @property
    def checkpoint_export_error(self) -> OSError | None:
        """Why the last checkpoint could not be exported to ``checkpoint_path``, if it could not."""
        return self._core.checkpoint_export_error

    @property
    def stats(self) -> WriterStats:
        return WriterStats(
            appended=self._appended,
            committed=self._committed,
            commits=self._commits,
            durable_commits=self._durable_commits,
            checkpoints=self._checkpoints,
            largest_batch=self._largest_batch,
            lost=self._lost,
            degraded_seconds=self._degraded_s + self._failed_for(),
        )

    def _failed_for(self) -> float:
        since = self._failed_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def add_secret(self, value: str) -> None:
        """Register a secret (e.g. the current bearer token) to be replaced in later events."""
        self._core.redactor.add_secret(value)

    async def append(self, event: Event, *, durable: bool = True) -> int:
        """Append one event and return its seq.

        ``durable=True`` returns once the event is committed with ``synchronous=FULL`` (on disk);
        ``durable=False`` returns at once: the event is committed with the next durable one, or
        on its own within about ``LINGER_S``, and a later durable event makes it durable too.
        Raises JournalUnavailable when the journal cannot record it (fail closed),
        EventEncodeError for an event that cannot be encoded.
        Cancelled while waiting, the event is still committed.
        """
        self._check_accepts(event)
        try:
            # No scheduling point when there is room (the common case): a call appends five
            # events, and a trio checkpoint each would cost more than building them.
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            self._check_accepts(event)
            item = _Append(self._core.build(event), durable)
        except BaseException:
            self._slots.release()
            raise
        self._appended += 1
        self._lingering.append(item)
        if durable or len(self._lingering) >= self._max_batch:
            self._hand_over()
        elif self._linger_scope.deadline == math.inf:
            self._linger_scope.deadline = trio.current_time() + LINGER_S
        if durable:
            await item.outcome()
        return int(item.row.event.seq)

    def _enqueue(self, item: object) -> None:
        """Queue a control item for the worker, after the rows appended before it."""
        self._hand_over()
        self._queue.put(item)

    def _hand_over(self) -> None:
        """Queue the lingering rows for the worker, as one item (they stay in seq order: every
        other path to the queue, `_enqueue`, passes here first)."""
        if self._lingering:
            self._queue.put(self._lingering)
            self._lingering = []
            self._linger_scope.deadline = math.inf  # nothing left to wait for

    async def _linger(self) -> None:
        """Hand non-durable rows over at most LINGER_S after the first of them was appended
        (`append` sets the deadline: cheaper than waking this task for every call)."""
        while True:
            with trio.CancelScope() as scope:
                self._linger_scope = scope
                if self._lingering:  # appended before this scope existed
                    scope.deadline = trio.current_time() + LINGER_S
                await trio.sleep_forever()
            self._hand_over()

    async def flush(self) -> None:
        """Wait until every event appended so far is committed durably."""
        await self._control(_Barrier(checkpoint=False))

    async def checkpoint(self) -> Checkpoint:
        """Commit what is queued, sign and store a checkpoint of the head, and return it."""
        await self._control(_Barrier(checkpoint=True))
        assert self._core.last_checkpoint is not None
        return self._core.last_checkpoint

    async def recover(self) -> None:
        """Reopen the connection after a failure, write the gap, accept appends again.

        Raises JournalUnavailable when the journal still cannot be written (the writer stays
        failed; its own re-probe goes on).
        """
        if self._failed is None or self._closed:
            return
        gap = self._gap
        if gap is not None:
            gap.probes += 1
        item = _Recover()
        self._enqueue(item)
        await item.outcome()
        if self._failed is None or self._closed:  # another recover() got there first
            return
        await self._slots.acquire()
        if gap is None:  # a failure with nothing lost cannot happen; write nothing then
            self._failed = None
            self._slots.release()
            return
        # The gap is the first row after the reopened head: appends build after it, and if
        # its commit fails they fail with it and the gap stays open (merged, not lost).
        gap_item = _GapAppend(self._core.build(gap.event()), gap)
        self._failed = None
        self._appended += 1
        self._lingering.append(gap_item)
        self._hand_over()
        await gap_item.outcome()

    async def _reprobe(self) -> None:
        """Re-probe a failed journal with a bounded backoff until it takes writes again."""
        while True:
            await self._failure_seen.wait()
            delay = PROBE_MIN_S
            while self._failed is not None and not self._closed:
                await trio.sleep(delay)
                delay = min(delay * 2, PROBE_MAX_S)
                try:
                    await self.recover()
                except JournalUnavailable:
                    continue
            self._failure_seen = trio.Event()

    async def _control(self, item: _Item) -> None:
        self._check_usable()
        self._enqueue(item)
        await item.outcome()

    def _check_usable(self) -> None:
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        if self._failed is not None:
            failure = self._failed
            raise JournalUnavailable(failure.reason, f"an earlier write failed: {failure.detail}")

    def _check_accepts(self, event: Event) -> None:
        """Refuse an event while failed (and note its call in the gap), or of a closed call."""
        if self._failed is not None and not self._closed:
            gap = self._gap
            if gap is not None:
                call_id = self._redacted_call(event)
                gap.refused += 1
                gap.add_call(call_id)
                gap.session_id = gap.session_id or event.session_id
                self._close_call(call_id, self._failed)
        self._check_usable()
        if self._closed_calls and event.call_id is not None:
            closing = self._closed_calls.get(self._core.redactor.redact_id(event.call_id))
            if closing is not None:
                raise JournalUnavailable(
                    closing.reason, "an earlier event of this call was lost in a journal gap"
                )

    def _redacted_call(self, event: Event) -> str | None:
        return None if event.call_id is None else self._core.redactor.redact_id(event.call_id)

    def _close_call(self, call_id: str | None, failure: JournalUnavailable) -> None:
        if call_id is None:
            return
        closed = self._closed_calls
        closed[call_id] = failure
        if len(closed) > _MAX_CLOSED_CALLS:
            del closed[next(iter(closed))]

    def _stop(self) -> None:
        if not self._closed:
            self._closed = True
            self._enqueue(_STOP)

    # --- in the event loop, called from the worker through run_sync_soon ---

    def _request_rollover(self, reason: str) -> None:
        """Sequence the next segment's first row after every row appended so far and queue it
        (the worker has prepared the file); a failed or closing writer drops it."""
        if self._closed:
            return  # the worker discards the prepared file as it closes
        if self._failed is not None:
            self._enqueue(_Rollover(None, None))
            return
        row, checkpoint = self._core.build_segment_started(reason)
        self._appended += 1
        self._enqueue(_Rollover(row, checkpoint))

    def _settle(self, items: list[_Item], failure: JournalUnavailable | None) -> None:
        """Wake the waiters of items, free their queue slots."""
        for item in items:
            item.error = failure
            if item.done is not None:
                item.done.set()
            if isinstance(item, _Append):
                self._slots.release()
                if failure is None and isinstance(item, _GapAppend) and self._gap is item.gap:
                    self._gap = None  # written down: the degraded spell ends
                    self._degraded_s += self._failed_for()
                    self._failed_since = None

    def _on_committed(self, items: list[_Item], rows: int, durable: bool, signed: bool) -> None:
        if rows or signed:
            self._commits += 1
            self._durable_commits += durable
            self._committed += rows
            self._checkpoints += signed
            self._largest_batch = max(self._largest_batch, rows)
        self._settle(items, None)

    def _on_failed(self, items: list[_Item], failure: JournalUnavailable) -> None:
        if self._gap is None:
            self._gap = _Gap(failure)
            self._failed_since = time.monotonic()
        gap = self._gap
        for item in items:
            if isinstance(item, _Append):
                self._lost += 1
            if isinstance(item, _Append) and not isinstance(item, _GapAppend):
                event = item.row.event
                call_id = event.call_id
                gap.lost += 1
                gap.add_call(call_id)
                gap.session_id = gap.session_id or str(event.session_id)
                self._close_call(call_id, failure)
        self._failed = failure
        self._failure_seen.set()
        self._settle(items, failure)

    # --- in the worker thread ---

    def _call_soon(self, fn: Callable[..., object], *args: object) -> None:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:  # the loop is gone; nobody is waiting any more
            pass

    def _work(self) -> None:
        """The worker: batch what is ready, commit it, report back; idle ticks checkpoint."""
        core, failed = self._core, None
        items: list[_Item] = []
        try:
            stopping = False
            while not stopping:
                if failed is None:
                    self._consider_rollover()
                batch = self._next_batch()
                stopping = _STOP in batch
                items = [item for item in batch if isinstance(item, _Item)]
                failed = self._process(items, failed)
                items = []
            if failed is None:
                try:
                    signed = core.commit([], durable=True, checkpoint=True) is not None
                    self._call_soon(self._on_committed, [], 0, signed, signed)
                except JournalUnavailable as failure:
                    self._call_soon(self._on_failed, [], failure)
        except BaseException as exc:  # a bug: fail every waiter rather than leave it hanging
            crash = JournalUnavailable("io_error", f"the journal writer crashed: {exc!r}")
            queued = [i for i in self._drain() if isinstance(i, _Item)]
            self._call_soon(self._on_failed, [*items, *queued], crash)
            raise
        finally:
            core.close()

    def _drain(self) -> list[_Item | object]:
        drained: list[_Item | object] = []
        while True:
            try:
                _add(drained, self._queue.get_nowait())
            except queue.Empty:
                return drained

    def _next_batch(self) -> list[_Item | object]:
        batch: list[_Item | object] = []
        try:
            _add(batch, self._queue.get(timeout=self._core.checkpoint_interval))
        except queue.Empty:
            return batch
        while len(batch) < self._max_batch:
            try:
                _add(batch, self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _process(
        self, items: list[_Item], failed: JournalUnavailable | None
    ) -> JournalUnavailable | None:
        """Commit items in order (a _Recover splits the batch); return the failure state."""
        segment: list[_Item] = []
        for item in [*items, None]:
            if item is not None and not isinstance(item, _Recover | _Rollover):
                segment.append(item)
                continue
            if segment or (item is None and not items):
                failed = self._commit(segment, failed)
                segment = []
            if isinstance(item, _Recover):
                failed = self._recover(item, failed)
            elif isinstance(item, _Rollover):
                failed = self._roll_over(item, failed)
        return failed

    def _consider_rollover(self) -> None:
        """Prepare the next segment when the live one is due (its file is made here, off the
        event loop); the event loop then sequences its first row (`_request_rollover`)."""
        core = self._core
        reason = core.rollover_due()
        if reason is not None and core.prepare_successor():
            self._call_soon(self._request_rollover, reason)

    def _roll_over(
        self, item: _Rollover, failed: JournalUnavailable | None
    ) -> JournalUnavailable | None:
        core = self._core
        if failed is not None or item.row is None or item.checkpoint is None:
            core.discard_successor()
            return failed
        try:
            core.roll_over(item.row, item.checkpoint)
        except JournalUnavailable as failure:
            self._call_soon(self._on_failed, [], failure)
            return failure
        self._call_soon(self._on_committed, [], 1, True, True)
        return None

    def _commit(
        self, items: list[_Item], failed: JournalUnavailable | None
    ) -> JournalUnavailable | None:
        if failed is not None:
            if items:
                self._call_soon(self._on_failed, items, failed)
            return failed
        rows = [item.row for item in items if isinstance(item, _Append)]
        durable = any(
            isinstance(item, _Barrier) or (isinstance(item, _Append) and item.durable)
            for item in items
        )
        # Signed at once: a journal gap as it is written (an excuse for lost events counts in
        # verify only under a trusted checkpoint, see replay._trust), and a journal's first
        # durable commit (its session_started): a session killed before its first periodic
        # checkpoint leaves its history signed, so one with none has had it stripped.
        checkpoint = any(
            (isinstance(item, _Barrier) and item.checkpoint) or isinstance(item, _GapAppend)
            for item in items
        ) or (durable and bool(rows) and self._core.last_checkpoint is None)
        try:
            signed = self._core.commit(rows, durable=durable, checkpoint=checkpoint)
        except JournalUnavailable as failure:
            self._call_soon(self._on_failed, items, failure)
            return failure
        if items or signed is not None:
            durable = durable or signed is not None
            self._call_soon(self._on_committed, items, len(rows), durable, signed is not None)
        return None

    def _recover(
        self, item: _Recover, failed: JournalUnavailable | None
    ) -> JournalUnavailable | None:
        if failed is None:
            self._call_soon(self._settle, [item], None)
            return None
        try:
            self._core.reconnect()
        except JournalUnavailable as failure:
            self._call_soon(self._settle, [item], failure)
            return failed
        self._call_soon(self._settle, [item], None)
        return None


def _add(batch: list[_Item | object], got: object) -> None:
    if isinstance(got, list):
        batch.extend(got)
    else:
        batch.append(got)


JournalWriter = AsyncWriter  # the name the bridge knows it by


@asynccontextmanager
async def open_writer(
    path: str | os.PathLike[str],
    *,
    queue_size: int = QUEUE_SIZE,
    max_batch: int = MAX_BATCH,
    **options: Unpack[WriterOptions],
) -> AsyncIterator[AsyncWriter]:
    """Open (creating and migrating if needed) a journal for writing from trio tasks.

    ``key``: the checkpoint signer: a :class:`SigningKey`, a 32-byte Ed25519 seed, a signing key
    file, or None for the default key file (see :func:`journal._core.resolve_key`).
    ``journal_id``: the id of a new journal (default a UUID4); for an existing one it must match.
    ``secrets``: values to redact from the start (more with ``add_secret``).
    ``max_bytes``: cap on the database size; beyond it appends fail with reason ``disk_full``.
    ``queue_size``: events queued before ``append`` waits; ``max_batch``: events per transaction.
    ``checkpoint_every`` events / ``checkpoint_interval`` seconds: when checkpoints are signed
    (also on close); ``checkpoint_path``: where the latest one is exported, outside the database.
    ``synchronous_full=False`` never fsyncs (``synchronous=NORMAL``): commits survive a process
    crash but not a power loss; ``durable=True`` then only means "committed". For tests and
    benchmarks, not for production. ``busy_timeout``: seconds to wait for SQLite's lock (held
    briefly by other tools) before an append fails with reason ``locked``.
    ``segment_bytes`` / ``segment_age`` (seconds): the live segment rolls over into a new file
    chained to it once it is that large or that old (None: never; see :mod:`journal._segments`);
    ``path`` names the journal (its first segment), and the writer appends to its live segment.
    ``max_bytes`` then caps each segment file.
    On exit, queued events are committed and a final checkpoint is signed, even when cancelled.
    """
    core = await trio.to_thread.run_sync(partial(open_core, path, **options))
    writer = AsyncWriter(core, queue_size=queue_size, max_batch=max_batch)
    async with trio.open_nursery() as nursery:

        async def work(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            # Shielded, and started before the block runs: the thread must run even when the
            # block is cancelled before its first checkpoint (appends need none), and it is
            # never abandoned, so the shutdown below always completes.
            with trio.CancelScope(shield=True):
                task_status.started()
                await trio.to_thread.run_sync(
                    writer._work, thread_name="journal-writer", limiter=trio.CapacityLimiter(1)
                )

        lingering = trio.CancelScope()

        async def linger(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with lingering:
                task_status.started()
                await writer._linger()

        reprobing = trio.CancelScope()

        async def reprobe(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with reprobing:
                task_status.started()
                await writer._reprobe()

        await nursery.start(work)
        await nursery.start(linger)
        await nursery.start(reprobe)
        try:
            yield writer
        finally:
            reprobing.cancel()
            writer._stop()
            lingering.cancel()
