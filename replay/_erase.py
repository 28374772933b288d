"""``erase``: remove the payloads of chosen events from journals, every proof intact.

One :func:`journal._erase.erase` per journal (a journal rolled over into segments is one
journal: every segment file is erased, the ``payload_erased`` event goes to the live one).
Events are chosen by call id, session id, task (``CHANNEL#NUMBER``: the calls whose arguments
name it), text their payload holds, or age (``--older-than DAYS``, the same mechanism as the
bridge's ``serve --retain-payloads``). Their envelope (who, when, which tool, outcome, latency)
stays, and so does every leaf, signed root and proof; see docs/privacy.md.

A journal a live bridge holds is erased under SQLite's write lock (the bridge's transactions
are short); the bridge sequences its next events after the ``payload_erased`` event.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import EraseResult
from agentteam_task_bridge.journal import EraseSelector as Selector
from agentteam_task_bridge.journal import erase_payloads as erase_journal

from ._source import ReplayInputError, journal_files

__all__ = ["EraseReport", "EraseResult", "Selector", "erase", "parse_task"]


class EraseReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``erase`` did to each journal (``dry_run``: would do)."""

    selector: str
    reason: str
    dry_run: bool
    journals: list[EraseResult]

    @property
    def ok(self) -> bool:
        """Every erasure that ran was scrubbed from the files' WAL too."""
        return all(j.dry_run or j.scrubbed for j in self.journals)

    @property
    def erased(self) -> int:
        return sum(len(j.seqs) for j in self.journals)


def parse_task(text: str) -> tuple[str, int]:
    """``CHANNEL#NUMBER`` as (channel, number); ValueError otherwise."""
    channel, sep, number = text.rpartition("#")
    if not sep or not channel or not number.isdigit():
        raise ValueError(f"{text!r} is not CHANNEL#NUMBER")
    return channel, int(number)


def erase(
    paths: Sequence[str | os.PathLike[str]],
    selector: Selector,
    *,
    reason: str,
    dry_run: bool = False,
    key_file: Path | None = None,
    actor: str | None = None,
) -> EraseReport:
    """Erase what ``selector`` chooses in every journal of ``paths``."""
    if not reason.strip():
        raise ReplayInputError("--reason must say why (it is journaled)")
    key: journal.SigningKey | None = None
    if not dry_run:
        try:
            key = journal.load_key(key_file, create=False)
        except (FileNotFoundError, ValueError) as exc:
            raise ReplayInputError(f"no signing key to sign the erasure with: {exc}") from None
    bases = list(dict.fromkeys(journal.base_path(p) for p in journal_files(paths)))
    results: list[EraseResult] = []
    for base in bases:
        try:
            results.append(
                erase_journal(base, selector, reason=reason, key=key, actor=actor, dry_run=dry_run)
            )
        except journal.JournalFormatError as exc:
            raise ReplayInputError(str(exc)) from None
        except journal.JournalUnavailable as exc:
            raise ReplayInputError(f"cannot erase in {base}: {exc}") from None
    return EraseReport(selector=selector.name, reason=reason, dry_run=dry_run, journals=results)
