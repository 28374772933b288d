"""What the trio writer's event loop hands its worker thread, and the gap a failure opens.

The event loop queues items (:class:`_Append` rows, in seq order, and control items: a
:class:`_Barrier`, a :class:`_Recover`, a :class:`_Rollover`, the final ``_STOP``); the worker
commits them and settles each one (``done`` set, ``error`` given) back in the event loop. A
:class:`_Gap` gathers, in the event loop, what a failed journal lost until its ``journal_gap``
row (a :class:`_GapAppend`) is committed. See :mod:`journal._async_writer`.
"""

from __future__ import annotations

from typing import Final

import trio

from ._canonical import wall_now
from ._checkpoint import Checkpoint
from ._errors import JournalUnavailable
from ._events import Event, JournalGap
from ._tlog import Stored

__all__ = ["MAX_GAP_CALLS"]

MAX_GAP_CALLS: Final = 1000  # call ids listed in one journal_gap event (the rest are counted)


class _Item:
    """A queued unit of work; ``done`` is set in the event loop once it is settled."""

    __slots__ = ("done", "error")

    def __init__(self, wait: bool) -> None:
        self.done: trio.Event | None = trio.Event() if wait else None
        self.error: JournalUnavailable | None = None

    async def outcome(self) -> None:
        assert self.done is not None
        await self.done.wait()
        if self.error is not None:
            raise JournalUnavailable(self.error.reason, self.error.detail) from self.error


class _Append(_Item):
    __slots__ = ("durable", "row")

    def __init__(self, row: Stored, durable: bool) -> None:
        super().__init__(wait=durable)
        self.row = row
        self.durable = durable


class _Barrier(_Item):
    """Commit everything queued before it durably (and sign a checkpoint if asked)."""

    __slots__ = ("checkpoint",)

    def __init__(self, checkpoint: bool) -> None:
        super().__init__(wait=True)
        self.checkpoint = checkpoint


class _Recover(_Item):
    """Reopen the connection and reload the committed head."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(wait=True)


class _Rollover(_Item):
    """Go on in the prepared next segment, whose first row this is (None: drop it)."""

    __slots__ = ("checkpoint", "row")

    def __init__(self, row: Stored | None, checkpoint: Checkpoint | None) -> None:
        super().__init__(wait=False)
        self.row = row
        self.checkpoint = checkpoint


class _GapAppend(_Append):
    """The journal_gap row written first after a recovery."""

    __slots__ = ("gap",)

    def __init__(self, row: Stored, gap: _Gap) -> None:
        super().__init__(row, durable=True)
        self.gap = gap


class _Gap:
    """What a failed journal lost, gathered in the event loop until it is written down."""

    __slots__ = (
        "calls",
        "calls_omitted",
        "detail",
        "lost",
        "probes",
        "reason",
        "refused",
        "session_id",
        "since_mono",
        "since_wall",
    )

    def __init__(self, failure: JournalUnavailable) -> None:
        self.reason: str = failure.reason
        self.detail = failure.detail[:200]
        self.since_wall = wall_now()
        self.since_mono = trio.current_time()
        self.lost = self.refused = self.probes = self.calls_omitted = 0
        self.calls: dict[str, None] = {}  # insertion-ordered set
        self.session_id: str | None = None

    def add_call(self, call_id: str | None) -> None:
        if call_id is None or call_id in self.calls:
            return
        if len(self.calls) < MAX_GAP_CALLS:
            self.calls[call_id] = None
        else:
            self.calls_omitted += 1

    def event(self) -> Event:
        return Event(
            session_id=self.session_id or "journal",
            payload=JournalGap(
                reason=self.reason,
                detail=self.detail,
                since=self.since_wall,
                seconds=round(trio.current_time() - self.since_mono, 3),
                probes=self.probes,
                events_lost=self.lost,
                events_refused=self.refused,
                calls=list(self.calls),
                calls_omitted=self.calls_omitted,
            ),
        )


_STOP: Final = object()
