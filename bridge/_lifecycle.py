"""How a session ends: the signals clients send, the end of stdin, and the deadline over both.

Clients end a stdio server in different ways (issue 27, measured from outside): Claude Code sends
SIGINT and SIGTERM 100 ms later; the mcp SDK's client closes stdin and sends SIGTERM 2 s later;
a closed terminal sends SIGHUP. Each is one request to end the session, and the first one names
it (``session_ended.reason``: ``SIGINT``, ``SIGTERM``, ``SIGHUP`` or ``stdin closed``).

Invariants:

* from the entry of ``agentteam-bridge serve`` (``agentteam_task_bridge.cli.main``, before the
  bridge is imported; :func:`note_early_signals` continues what it held) until the process
  exits, SIGINT, SIGTERM and SIGHUP neither kill the process nor raise ``KeyboardInterrupt``:
  the first asks the session to end, later ones are logged and ignored (only the interpreter's
  own start, before any of our code runs, is left);
* every call whose outcome the journal holds is answered on the wire exactly as journaled while
  stdout is open, or else named by an ``answer_undelivered`` event (:class:`Unanswered`);
* the end is bounded from that first request, under the SDK client's 2 s: calls in flight may
  finish for ``DRAIN_S`` (stdin is no longer read), the answers of calls that finished may be
  written until ``WRITE_S``, and telemetry, flushed after the journal is closed, gets what is left
  until ``BUDGET_S``.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import AsyncIterator, Callable
from typing import Final

log = logging.getLogger("agentteam.bridge")

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DRAIN_S: Final = 1.0
WRITE_S: Final = 1.3
BUDGET_S: Final = 1.7
STDIN_CLOSED: Final = "stdin closed"


def request_key(rid: int | str) -> int | str:
    """A request id as the SDK correlates it: "7" and 7 are one id."""
    if isinstance(rid, str):
        try:
            return int(rid)
        except ValueError:
            return rid
    return rid


class Unanswered:
    """The calls whose outcome (result, error, rejection) the journal holds and whose answer is
    not on the wire yet, by request id: the call flow adds each, the stdio door removes it once
    its answer is written; what is left when the session ends is journaled as undelivered."""

    __slots__ = ("calls", "stdout_closed")

    def __init__(self) -> None:
        self.calls: dict[int | str, tuple[str, str]] = {}  # request key -> (call id, outcome)
        self.stdout_closed = False  # the client closed its end: nothing more reached it

    def journaled(self, rid: int | str, call_id: str, outcome: str) -> None:
        self.calls[request_key(rid)] = (call_id, outcome)

    def delivered(self, rid: int | str) -> None:
        if self.calls:
            self.calls.pop(request_key(rid), None)

    @property
    def reason(self) -> str:
        """Why what is left was not delivered: the client closed stdout, or the answer was not
        written (the client cancelled the request after its outcome, or the end cut it)."""
        return "stdout_closed" if self.stdout_closed else "not_written"


def ignore_stop_signals() -> None:
    """The session is over and the process only exits: from here a stop signal is ignored
    (the interpreter's exit would restore the default action of a handled one, and a SIGTERM
    in that window would still kill the process)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def note_early_signals() -> list[str]:
    """Hold the stop signals from now on: each one's name is appended to the list returned,
    until `serve`'s own receiver takes over (and again after it, until the process exits). A
    handler the command's entry point set before its imports (`agentteam_task_bridge.cli`)
    noted its signals in its own `received` list: that list is continued."""
    earlier = getattr(signal.getsignal(signal.SIGTERM), "received", None)
    received: list[str] = earlier if isinstance(earlier, list) else []

    def note(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)

    for signum in STOP_SIGNALS:
        signal.signal(signum, note)
    return received


class Shutdown:
    """The session's end: requested once (by a signal or stdin's end), with its deadlines.

    Parts that must act on the request (the stdio door stops reading and bounds its writes)
    register a hook with `on_request`; it runs at once if the end was already requested.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self.started = math.inf
        self._hooks: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask the session to end (the first reason wins)."""
        if self.reason is not None:
            return
        self.reason = reason
        self.started = _now()
        for hook in self._hooks:
            hook()

    def on_request(self, hook: Callable[[], None]) -> None:
        self._hooks.append(hook)
        if self.requested:
            hook()

    @property
    def drain_deadline(self) -> float:
        """Until when calls in flight may finish (inf while the session runs)."""
        return self.started + DRAIN_S

    @property
    def write_deadline(self) -> float:
        """Until when answers may be written (inf while the session runs)."""
        return self.started + WRITE_S

    @property
    def deadline(self) -> float:
        """When everything is done, telemetry included (from now if no end was requested: the
        session ended some other way)."""
        if not self.requested:
            return _now() + BUDGET_S
        return self.started + BUDGET_S

    async def watch(self, signals: AsyncIterator[int]) -> None:
        """Turn the stop signals (a `trio.open_signal_receiver`) into the request."""
        async for signum in signals:
            name = signal.Signals(signum).name
            if self.requested:
                log.info("%s while the session ends (%s): ignored", name, self.reason)
            else:
                self.request(name)


def _now() -> float:
    # trio is imported here, not at the top: `note_early_signals` runs before its import.
    import trio

    return trio.current_time()
