"""``serve --retain-payloads DAYS``: erase event payloads older than DAYS, off the call path.

At start and then every :func:`retention_period` the session erases (``journal.erase_payloads``,
the mechanism of ``agentteam-replay erase --older-than``) the payloads of events older than DAYS
in its own journal and, for a pool, in every journal of the pool directory (a journal another
live session writes too: the erasure takes SQLite's write lock, and that writer sequences its
next events after it). Each erasure is a signed ``payload_erased`` event (``selector:
older_than``, ``actor: retention``); the envelope of every event (who, when, which tool, outcome,
latency) stays. It runs in a worker thread, never in a call's path; a failure is logged to
stderr and retried at the next period (a journal its writer rolled over to a new segment under
the run's plan is planned again at once), and never ends the session. Nor does it hold the
session's end: when the session ends (the task is cancelled) the thread is let go at once and
told to stop (`journal.erase_payloads`' ``stop``: SQLite rolls back the erasure under way within
a few thousand steps, as a crash would; the next session's run does it again), so an erasure of
a large journal or pool never keeps the process past the end's deadline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

from agentteam_task_bridge import journal

__all__ = ["RETENTION_ACTOR", "retain_payloads", "retention_period", "retention_targets"]

RETENTION_ACTOR: Final = "retention"
_log = logging.getLogger("agentteam_task_bridge.retention")


def retention_period(days: float) -> float:
    """Seconds between two runs: a tenth of the retention, at least a minute, at most an hour."""
    return min(3600.0, max(60.0, days * 86400.0 / 10))


def retention_targets(setting: Path, own: Path) -> list[Path]:
    """The journals to keep trimmed: the session's own, and each journal of a pool directory
    (their first segment's names, each once)."""
    found = [journal.base_path(own)]
    if setting.is_dir():
        for candidate in sorted(setting.glob("*.db")):
            if candidate.is_file():
                found.append(journal.base_path(candidate))
    return list(dict.fromkeys(found))


def _run_once(
    targets: list[Path], days: float, key_path: Path | None, stop: Callable[[], bool]
) -> int:
    key = journal.load_key(key_path, create=False, announce=False)
    erased = 0
    for target in targets:
        for attempt in (1, 2):
            if stop():
                return erased
            try:
                result = journal.erase_payloads(
                    target,
                    journal.EraseSelector(older_than_days=days),
                    reason=f"retention: payloads older than {days:g} days",
                    actor=RETENTION_ACTOR,
                    key=key,
                    stop=stop,
                )
            except journal.JournalUnavailable as exc:
                # The journal moved under the plan (its writer rolled over to a new segment
                # while this run read the old one): planned again at once, not in a period.
                if attempt == 1 and exc.reason == "chain_conflict":
                    continue
                _not_trimmed(target, exc, stop)
            except (journal.JournalError, OSError) as exc:
                _not_trimmed(target, exc, stop)
            else:
                erased += len(result.seqs)
            break
    return erased


def _not_trimmed(target: Path, exc: BaseException, stop: Callable[[], bool]) -> None:
    if not stop():  # stopped by the session's end: nothing to report
        _log.warning("retention: %s was not trimmed (%s)", target.name, _short(exc))


def _short(exc: BaseException) -> str:
    return type(exc).__name__ if not str(exc) else str(exc).splitlines()[0][:200]


async def retain_payloads(
    setting: Path,
    own: Callable[[], Path],
    days: float,
    key_path: Path | None,
    *,
    period: float | None = None,
) -> None:
    """Erase old payloads now and every ``period`` seconds until cancelled."""
    wait = retention_period(days) if period is None else period
    stopping = threading.Event()
    try:
        while True:
            targets = retention_targets(setting, own())
            try:
                erased = await trio.to_thread.run_sync(
                    _run_once, targets, days, key_path, stopping.is_set, abandon_on_cancel=True
                )
            except (OSError, ValueError) as exc:  # the key file went away or is not a key
                _log.warning("retention: no payload erased (%s)", _short(exc))
            else:
                if erased:
                    _log.info("retention: erased the payloads of %d events", erased)
            await trio.sleep(wait)
    finally:
        stopping.set()  # a thread let go by the cancellation stops at SQLite's next look
