"""Timestamps of the reference runtime: RFC3339 UTC with microseconds, strictly increasing."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

_RFC3339_UTC = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")


class Clock:
    """Hands out RFC3339 UTC instants that never repeat within one process.

    Strictly increasing instants make `expectedUpdatedAt` a sound revision token: two updates
    of one task can never share an `updatedAt`, even within one microsecond.
    """

    def __init__(self) -> None:
        self._last_us = 0

    def now_us(self, after_us: int = 0) -> int:
        now = time.time_ns() // 1000
        self._last_us = max(now, self._last_us + 1, after_us + 1)
        return self._last_us

    def now(self, after: str | None = None) -> str:
        """A new instant, later than ``after`` (an instant another process may have handed out:
        several processes can share one database, and within one board instants must still
        strictly increase)."""
        return format_us(self.now_us(parse_us(after) if after else 0))


def parse_us(instant: str) -> int:
    """The microseconds since the epoch of an instant made by :func:`format_us`."""
    moment = datetime.strptime(instant, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def format_us(us: int) -> str:
    seconds, micros = divmod(us, 1_000_000)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{micros:06d}Z"


def instant_ns(text: str) -> int | None:
    """The nanoseconds since the epoch of an RFC3339 UTC instant (`Z`, 0-9 fraction digits), or
    None when it is malformed or impossible (Feb 30, hour 99): revisions compare as instants,
    so `...:00.5Z` and `...:00.500000Z` are one revision."""
    found = _RFC3339_UTC.fullmatch(text)
    if found is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(part) for part in found.groups()[:6])
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    fraction = (found[7] or "").ljust(9, "0")
    return int(moment.timestamp()) * 1_000_000_000 + int(fraction)
