"""The synchronous writer, for tools, tests and scripts: each append commits before it returns.

It drives the same core as the trio writer (:mod:`journal._core`), on the caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Unpack

from ._checkpoint import Checkpoint
from ._core import WriterOptions, _Core, open_core
from ._errors import JournalUnavailable
from ._events import Event

__all__ = ["SyncWriter", "open_sync_writer"]


class SyncWriter:
    """A blocking writer: each append commits before it returns. For tools, tests and scripts.

    Not for the trio event loop (use :func:`journal.open_writer` there).
    """

    def __init__(self, core: _Core) -> None:
        self._core = core
        self._closed = False

    @property
    def journal_id(self) -> str:
        return self._core.journal_id

    @property
    def path(self) -> Path:
        return self._core.path

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last committed event; (0, 64 zeros) when empty."""
        return self._core.committed_seq, self._core.committed_hash

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        return self._core.last_checkpoint

    def add_secret(self, value: str) -> None:
        """Register a secret to be replaced wherever it occurs in later events."""
        self._core.redactor.add_secret(value)

    def append(self, event: Event, *, durable: bool = True) -> int:
        """Commit one event; return its seq."""
        return self.append_many([event], durable=durable)[0]

    def append_many(self, events: Iterable[Event], *, durable: bool = True) -> list[int]:
        """Commit events in one transaction (all or none); return their seqs."""
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        core = self._core
        try:
            rows = [core.build(event) for event in events]
            core.commit(rows, durable=durable)
        except BaseException:
            core.rewind()
            raise
        self._roll_over_if_due()
        return [row.event.seq for row in rows]

    def _roll_over_if_due(self) -> None:
        """Roll over after a commit when due; a roll-over that fails leaves the events where
        they are (committed) and the live segment live."""
        core = self._core
        reason = core.rollover_due()
        if reason is None or not core.prepare_successor():
            return
        try:
            row, checkpoint = core.build_segment_started(reason)
            core.roll_over(row, checkpoint)
        except JournalUnavailable:
            core.discard_successor()
            try:
                core.reconnect()
            except JournalUnavailable:
                pass  # the events are committed; the next append reports the journal's state

    def checkpoint(self) -> Checkpoint:
        """Sign and store a checkpoint of the current head now (durable); return it."""
        if self._closed:
            raise JournalUnavailable("closed", "the writer is closed")
        self._core.commit([], durable=True, checkpoint=True)
        assert self._core.last_checkpoint is not None
        return self._core.last_checkpoint

    def close(self) -> None:
        """Write a final checkpoint (if events followed the last one) and close."""
        if self._closed:
            return
        self._closed = True
        try:
            self._core.commit([], durable=True, checkpoint=True)
        finally:
            self._core.close()

    def __enter__(self) -> SyncWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_sync_writer(path: str | os.PathLike[str], **options: Unpack[WriterOptions]) -> SyncWriter:
    """Open (creating and migrating if needed) a journal for blocking writes.

    The options are those of :func:`journal.open_writer` (:class:`WriterOptions`).
    """
    return SyncWriter(open_core(path, **options))
