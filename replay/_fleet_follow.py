"""``ship --follow``: ship again and again, as a service that waits out what is not there yet.

It starts on a pool that is empty or absent and waits for journals; a file not readable as a
journal yet (being created) waits for the next round; a store that cannot be reached, or drops
the connection mid-batch (whose transaction then rolls back: the next round resumes from the
store's head), is retried with a backoff doubling from the interval up to ``MAX_BACKOFF``, said
once when the outage starts and once when it ends. Anything else (a refused schema, a file
that is not a journal) raises, as a one-shot ship does.

It stops when ``stop`` is set (the CLI sets it on SIGTERM or SIGINT): between rounds at once,
in a round after the batch in flight commits, never by an exception raised inside the
driver. An interrupt raised mid-query could leave the connection busy, so that its rollback
failed as "another command is already in progress", an ``OperationalError`` taken for an
outage: the service went on shipping and ignored the signal. Whatever a round raises once
``stop`` is set ends the service instead of a retry.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ._fleet_ship import BATCH_SIZE, ShipReport, ship
from ._fleet_store import StoreUnreachable, psycopg_module, redact_store_url
from ._source import ReplayInputError, journal_files

__all__ = ["MAX_BACKOFF", "ship_follow"]

MAX_BACKOFF: Final = 30.0  # seconds between tries while the store is down, at most


def ship_follow(
    paths: Sequence[str | os.PathLike[str]],
    store_url: str,
    *,
    interval: float = 1.0,
    batch_size: int = BATCH_SIZE,
    rounds: int | None = None,
    on_round: Callable[[ShipReport], None] | None = None,
    on_outage: Callable[[str], None] | None = None,
    max_backoff: float = MAX_BACKOFF,
    stop: threading.Event | None = None,
) -> ShipReport:
    """Ship, then again every ``interval`` seconds (new files in a directory included), until
    interrupted or ``rounds`` are done: a live journal lags the store by about one interval and
    one batch. Returns the last round's report.

    A service: paths not there yet (a pool before its first session) are waited for; a store
    that cannot be reached, or drops the connection, is retried with a backoff doubling from
    ``interval`` up to ``max_backoff`` seconds, and ``on_outage`` hears one line when an outage
    starts and one when it ends. Other failures (a refused schema, a broken journal) raise.
    Once ``stop`` is set it returns: at once between rounds, after the batch in flight within
    one (whatever that round then raises).
    """
    stop = stop or threading.Event()

    def stop_point(shipped: int, total: int | None = None) -> None:
        if stop.is_set():
            raise _StopRequested  # after a batch committed: the connection is idle

    done = 0
    report = ShipReport(store=redact_store_url(store_url), journals=[], shipped=0, refused=0)
    down_since: float | None = None
    wait = interval
    while not stop.is_set():
        started = time.monotonic()
        try:
            report = ship(
                _present(paths),
                store_url,
                batch_size=batch_size,
                wait_unreadable=True,
                progress=stop_point,
            )
        except _StopRequested:
            return report
        except _outages() as exc:
            if stop.is_set():
                return report  # what an interrupt mid-query became, not an outage
            if down_since is None:
                down_since = started
                _say(on_outage, f"the store is unreachable, retrying: {_reason(exc)}")
            wait = min(max_backoff, max(wait * 2, interval))
        else:
            if down_since is not None:
                outage = time.monotonic() - down_since
                _say(on_outage, f"the store is back after {outage:.0f} s; shipping again")
                down_since = None
            wait = interval
            if on_round is not None:
                on_round(report)
        done += 1
        if rounds is not None and done >= rounds:
            return report
        stop.wait(max(0.0, wait - (time.monotonic() - started)))
    return report


class _StopRequested(Exception):
    """Raised at a stop point of a round (after a batch) once the service is asked to stop."""


def _present(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The journal files of the paths that exist now (a pool may hold none yet, or be absent)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        try:
            found = journal_files([path])
        except ReplayInputError:
            if path.exists() and not path.is_dir():
                raise
            continue  # a directory without a journal yet
        files += [f for f in found if f.exists()]
    return files


def _outages() -> tuple[type[BaseException], ...]:
    """What a store that is down (or drops the connection mid-ship) raises."""
    driver = psycopg_module()
    return (StoreUnreachable, driver.OperationalError, driver.InterfaceError)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _say(on_outage: Callable[[str], None] | None, line: str) -> None:
    if on_outage is not None:
        on_outage(line)
