"""The trio writer: appends from many tasks, group-committed by one worker off the event loop.

``append`` builds the row at once (so seq order is append order) and queues it; one consumer task,
owned by the writer's nursery, takes every row that is ready, commits them in one transaction in a
worker thread (``trio.to_thread``, capacity 1, so one connection in one thread at a time), then
wakes the appenders that wait for durability. While a commit runs, new rows gather for the next
one: that is the group commit, and it needs no timer. A bounded number of queued rows
(``queue_size``) gives back-pressure: ``append`` waits for room before it takes a seq.

A failed commit makes the writer *failed* (``writer.failed``): every queued and later append
raises JournalUnavailable with the failure's reason until ``await writer.recover()`` succeeds.
Failure is sticky because appends made with ``durable=False`` had already returned.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Final

import msgspec
import trio

from ._canonical import Row
from ._checkpoint import Checkpoint
from ._errors import JournalUnavailable
from ._events import Event
from ._schema import BUSY_TIMEOUT_S
from ._writer import CHECKPOINT_EVERY, CHECKPOINT_INTERVAL_S, _Core, open_core

__all__ = ["AsyncWriter", "JournalWriter", "WriterStats", "open_writer"]

QUEUE_SIZE: Final = 1024
MAX_BATCH: Final = 512


class WriterStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a writer since it opened."""

    appended: int
    committed: int
    commits: int
    durable_commits: int
    checkpoints: int
    largest_batch: int


class _Pending:
    __slots__ = ("done", "durable", "error", "row")

    def __init__(self, row: Row, durable: bool) -> None:
        self.row = row
        self.durable = durable
        self.done: trio.Event | None = trio.Event() if durable else None
        self.error: JournalUnavailable | None = None


class _Barrier:
    """A queued request to commit everything before it durably (and maybe checkpoint)."""

    __slots__ = ("checkpoint", "done", "durable", "error")

    def __init__(self, checkpoint: bool) -> None:
        self.checkpoint = checkpoint
        self.durable = True
        self.done: trio.Event | None = trio.Event()
        self.error: JournalUnavailable | None = None


_Item = _Pending | _Barrier


class AsyncWriter:
    """A journal open for writing from trio tasks; get one from :func:`open_writer`."""

    def __init__(self, core: _Core, *, queue_size: int, max_batch: int) -> None:
        self._core = core
        self._send, self._recv = trio.open_memory_channel[_Item](math.inf)
        self._slots = trio.Semaphore(queue_size)
        self._max_batch = max_batch
        self._limiter = trio.CapacityLimiter(1)
        self._failed: JournalUnavailable | None = None
        self._closed = False
        self._appended = self._committed = self._commits = self._durable_commits = 0
        self._checkpoints = self._largest_batch = 0

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
        )

    def add_secret(self, value: str) -> None:
        """Register a secret (e.g. the current bearer token) to be replaced in later events."""
        self._core.redactor.add_secret(value)

    async def append(self, event: Event, *, durable: bool = True) -> int:
        """Append one event and return its seq.

        ``durable=True`` returns once the event is committed with ``synchronous=FULL`` (on disk);
        ``durable=False`` returns once it is queued: it is committed with the next batch, and a
        later durable event makes it durable too. Raises JournalUnavailable when the journal
        cannot record it (fail closed), EventEncodeError for an event that cannot be encoded.
        Cancelled while waiting, the event is still committed.
        """
        self._check_usable()
        await self._slots.acquire()
        try:
            self._check_usable()
            item = _Pending(self._core.build(event), durable)
        except BaseException:
            self._slots.release()
            raise
        self._appended += 1
        self._send.send_nowait(item)
        if item.done is not None:
            await item.done.wait()
            if item.error is not None:
                raise JournalUnavailable(item.error.reason, item.error.detail) from item.error
        return int(item.row[0])

    async def flush(self) -> None:
        """Wait until every event appended so far is committed durably."""
        await self._barrier(checkpoint=False)

    async def checkpoint(self) -> Checkpoint:
        """Commit what is queued, sign and store a checkpoint of the head, and return it."""
        await self._barrier(checkpoint=True)
        assert self._core.last_checkpoint is not None
        return self._core.last_checkpoint

    async def recover(self) -> None:
        """Reopen the connection after a failure and accept appends again (raises if it cannot)."""
        if self._failed is None or self._closed:
            return
        await trio.to_thread.run_sync(self._core.reconnect, limiter=self._limiter)
        self._failed = None

    async def _barrier(self, *, checkpoint: bool) -> None:
        self._check_usable()
        barrier = _Barrier(checkpoint)
        self._send.send_nowait(barrier)
        assert barrier.done is not None
        await barrier.done.wait()
        if barrier.error is not None:
            raise JournalUnavailable(barrier.error.reason, barrier.error.detail) from barrier.error

    def _check_usable(self) -> None:
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        if self._failed is not None:
            failure = self._failed
            raise JournalUnavailable(failure.reason, f"an earlier write failed: {failure.detail}")

    async def _run(self) -> None:
        """The consumer: batch what is ready, commit it, wake the waiters; idle ticks checkpoint."""
        while True:
            batch: list[_Item] = []
            with trio.move_on_after(self._core.checkpoint_interval):
                try:
                    batch.append(await self._recv.receive())
                except trio.EndOfChannel:
                    return
            while batch and len(batch) < self._max_batch:
                try:
                    batch.append(self._recv.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            # Shielded: a batch taken from the queue is always committed (or failed), never lost.
            with trio.CancelScope(shield=True):
                await self._commit(batch)

    async def _commit(self, batch: list[_Item]) -> None:
        if self._failed is not None:
            self._settle(batch, self._failed)
            return
        rows = [item.row for item in batch if isinstance(item, _Pending)]
        durable = any(item.durable for item in batch)
        checkpoint = any(isinstance(item, _Barrier) and item.checkpoint for item in batch)
        try:
            signed = await trio.to_thread.run_sync(
                partial(self._core.commit, rows, durable=durable, checkpoint=checkpoint),
                limiter=self._limiter,
            )
        except JournalUnavailable as failure:
            self._failed = failure
            self._settle(batch, failure)
            self._settle(self._drain(), failure)
            return
        if rows or signed is not None:
            self._commits += 1
            self._durable_commits += durable or signed is not None
            self._committed += len(rows)
            self._checkpoints += signed is not None
            self._largest_batch = max(self._largest_batch, len(rows))
        self._settle(batch, None)

    def _settle(self, batch: Iterable[_Item], failure: JournalUnavailable | None) -> None:
        for item in batch:
            item.error = failure
            if item.done is not None:
                item.done.set()
            if isinstance(item, _Pending):
                self._slots.release()

    def _drain(self) -> list[_Item]:
        items: list[_Item] = []
        while True:
            try:
                items.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return items

    async def _shutdown(self) -> None:
        """Commit what is still queued, sign a final checkpoint, close (runs shielded)."""
        self._closed = True
        self._send.close()
        leftover = self._drain()
        if leftover:
            await self._commit(leftover)
        try:
            if self._failed is None:
                signed = await trio.to_thread.run_sync(
                    partial(self._core.commit, [], durable=True, checkpoint=True),
                    limiter=self._limiter,
                )
                self._checkpoints += signed is not None
        except JournalUnavailable as failure:
            self._failed = failure
        finally:
            await trio.to_thread.run_sync(self._core.close, limiter=self._limiter)


JournalWriter = AsyncWriter  # the name the bridge knows it by


@asynccontextmanager
async def open_writer(
    path: str | os.PathLike[str],
    *,
    key: bytes | Path | None = None,
    journal_id: str | None = None,
    secrets: Iterable[str] = (),
    max_bytes: int | None = None,
    queue_size: int = QUEUE_SIZE,
    max_batch: int = MAX_BATCH,
    checkpoint_every: int = CHECKPOINT_EVERY,
    checkpoint_interval: float = CHECKPOINT_INTERVAL_S,
    checkpoint_path: str | os.PathLike[str] | None = None,
    synchronous_full: bool = True,
    busy_timeout: float = BUSY_TIMEOUT_S,
) -> AsyncIterator[AsyncWriter]:
    """Open (creating and migrating if needed) a journal for writing from trio tasks.

    ``key``: the checkpoint HMAC key as bytes, a key file path, or None for the default key file.
    ``journal_id``: the id of a new journal (default a UUID4); for an existing one it must match.
    ``secrets``: values to redact from the start (more with ``add_secret``).
    ``max_bytes``: cap on the database size; beyond it appends fail with reason ``disk_full``.
    ``checkpoint_every`` events / ``checkpoint_interval`` seconds: when checkpoints are signed
    (also on close); ``checkpoint_path``: where the latest one is exported, outside the database.
    ``synchronous_full=False`` never fsyncs (``synchronous=NORMAL``): commits survive a process
    crash but not a power loss; ``durable=True`` then only means "committed". For tests and
    benchmarks, not for production. ``busy_timeout``: seconds to wait for SQLite's lock (held
    briefly by other tools) before an append fails with reason ``locked``.
    On exit, queued events are committed and a final checkpoint is signed, even when cancelled.
    """
    core = await trio.to_thread.run_sync(
        partial(
            open_core,
            path,
            key=key,
            journal_id=journal_id,
            max_bytes=max_bytes,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            checkpoint_path=checkpoint_path,
            secrets=secrets,
            synchronous_full=synchronous_full,
            busy_timeout=busy_timeout,
        )
    )
    writer = AsyncWriter(core, queue_size=queue_size, max_batch=max_batch)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer._run)
            try:
                yield writer
            finally:
                writer._closed = True
                writer._send.close()
    finally:
        with trio.CancelScope(shield=True):
            await writer._shutdown()
