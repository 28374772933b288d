"""Timestamps of the reference runtime: RFC3339 UTC with microseconds, strictly increasing."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class Clock:
    """Hands out RFC3339 UTC instants that never repeat within one process.

    Strictly increasing instants make `expectedUpdatedAt` a sound revision token: two updates
    of one task can never share an `updatedAt`, even within one microsecond.
    """

    def __init__(self) -> None:
        self._last_us = 0

    def now_us(self) -> int:
        now = time.time_ns() // 1000
        self._last_us = max(now, self._last_us + 1)
        return self._last_us

    def now(self) -> str:
        return format_us(self.now_us())


def format_us(us: int) -> str:
    seconds, micros = divmod(us, 1_000_000)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{micros:06d}Z"
