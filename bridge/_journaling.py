"""The bridge's side of the journal: open the writer, register secrets, fail closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import journal
from journal import Event

from ._call import JournalFailed


class JournalOpenError(Exception):
    """The journal file cannot be created or opened; the message names the path and why."""


class JournalAdapter:
    """A JournalPort over `journal`'s writer: classified failures, health for fail-closed."""

    def __init__(self, writer: journal.JournalWriter) -> None:
        self._writer = writer

    @property
    def healthy(self) -> bool:
        return not self._writer.failed

    def add_secret(self, value: str) -> None:
        self._writer.add_secret(value)

    async def append(self, event: Event, *, durable: bool = False) -> None:
        try:
            await self._writer.append(event, durable=durable)
        except journal.JournalUnavailable as exc:
            raise JournalFailed(str(exc), exc.reason) from None


@asynccontextmanager
async def open_journal(
    path: Path, *, durable: bool = True, max_bytes: int | None = None
) -> AsyncIterator[JournalAdapter]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        writer_cm = journal.open_writer(
            path,
            max_bytes=max_bytes,
            synchronous_full=durable,
            checkpoint_path=checkpoint_path(path),
        )
        writer = await writer_cm.__aenter__()
    except (OSError, journal.JournalUnavailable) as exc:
        raise JournalOpenError(
            f"cannot open the journal {path}: {exc}; pass a writable --journal PATH "
            "or set AGENTTEAM_JOURNAL"
        ) from None
    try:
        yield JournalAdapter(writer)
    finally:
        await writer_cm.__aexit__(None, None, None)


def checkpoint_path(journal_path: Path) -> Path:
    """Where the latest signed checkpoint is exported, outside the database file."""
    return journal_path.with_name(journal_path.name + ".checkpoint.json")
