"""One call's journal record: its identity, and its place in the call grammar.

A call's events follow ``journal._contract``'s grammar (``call_received``, then a rejection or a
cancellation, or ``context_injected``, the upstream exchange and one outcome). The
:class:`CallRecord` holds the call's state as its position in that grammar and steps through the
same table the journal's readers use on every event it records, so the state is never a set of
flags to keep in step.

Invariants:

* ``record`` steps the grammar before it writes: an event out of order raises
  :class:`OutOfOrder` at once (a bug in the call flow, never written), so no journal the bridge
  writes holds a call the auditor would refuse; a second outcome is refused quietly (a
  cancellation that lands after the outcome was journaled changes nothing);
* the outcome's kind is the stage's: before ``context_injected`` a refusal is ``call_rejected``
  (nothing was prepared for the upstream), after it ``call_error``;
* ``record`` never raises for the journal: it reports whether the event landed. Once one event is
  lost, the call writes nothing more (the journal refuses the rest of a call that lost an event,
  so its story stays a clean prefix) and ``journal_note`` says so, with ``in_doubt`` once a
  mutation's request was journaled (its effect may have happened);
* the outcome is written shielded, after the call's ``call_received`` (a call cancelled before its
  first event landed still opens with the request as received).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio

from agentteam_task_bridge.journal import (
    LASTING_UNAVAILABLE,
    OUTCOMES,
    CallCancelled,
    CallReceived,
    Event,
    Grammar,
    Payload,
)

from ._errors import ToolError
from ._exceptions import BridgeError, JournalFailed

if TYPE_CHECKING:
    from ._lifecycle import Unanswered
    from ._metrics import Metrics

log = logging.getLogger("agentteam.bridge")


class JournalPort(Protocol):
    """What the call flow needs of the journal writer."""

    @property
    def healthy(self) -> bool: ...

    @property
    def failure_reason(self) -> str | None:
        """Why the journal refuses appends (a JournalUnavailableReason), None while healthy."""
        ...

    async def append(self, event: Event, *, durable: bool = False) -> None: ...


class OutOfOrder(BridgeError):
    """An event the call grammar does not allow where the call is (a bug in the call flow)."""


class Recorder(Protocol):
    async def record(self, payload: Payload, *, durable: bool = False) -> bool: ...

    def rename(self, tool: str) -> None: ...


def journal_unavailable(reason: str | None) -> ToolError:
    """A mutation refused as the journal cannot take it: retryable unless the journal's
    failure is one it never recovers from by itself (``journal.LASTING_UNAVAILABLE``: its file
    replaced under the writer), which a retry in this session would only meet again."""
    return ToolError("journal_unavailable", retryable=reason not in LASTING_UNAVAILABLE)


class Unjournaled:
    """A recorder that records nothing (a dry run of resolution)."""

    async def record(self, payload: Payload, *, durable: bool = False) -> bool:
        return True

    def rename(self, tool: str) -> None:
        pass


class CallRecord:
    """One call's journal identity and its position in the call grammar (see module)."""

    __slots__ = (
        "_grammar",
        "call_id",
        "journal",
        "lost",
        "metrics",
        "mutation",
        "received",
        "request_id",
        "sent",
        "session_id",
        "started",
        "tool",
        "trace_headers",
        "unanswered",
    )

    def __init__(
        self,
        journal: JournalPort,
        session_id: str,
        call_id: str,
        tool: str,
        request_id: str | int | None,
        unanswered: Unanswered | None = None,
        metrics: Metrics | None = None,
        started: float = 0.0,
    ) -> None:
        self.journal = journal
        self.session_id = session_id
        self.call_id = call_id
        self.tool = tool
        self.request_id = request_id
        # With a door that writes the answers: told of each journaled outcome.
        self.unanswered = unanswered
        self.metrics = metrics  # told the call's one outcome, journaled or not
        self.started = started  # time.perf_counter() at arrival (the call's duration)
        self.trace_headers: list[tuple[bytes, bytes]] = []  # the client's, when tracing is off
        self.received: CallReceived | None = None  # written first, whenever the call ends
        self.mutation = False
        self.sent = False  # a mutation's request is journaled: its effect may happen
        self.lost: str | None = None  # why an event of this call could not be recorded
        self._grammar = Grammar()

    @property
    def position(self) -> str:
        """Where the call is in the grammar (``start``, ``received``, ``injected``, ...)."""
        return self._grammar.state

    @property
    def admitting(self) -> bool:
        """Before ``context_injected``: a refusal now is a rejection, not an error."""
        return self._grammar.state in ("start", "received")

    def rename(self, tool: str) -> None:
        self.tool = tool

    def _step(self, kind: str) -> None:
        problem = self._grammar.step(kind)
        if problem is not None:
            raise OutOfOrder(f"call {self.call_id}: {problem}")

    async def record(self, payload: Payload, *, durable: bool = False) -> bool:
        kind = payload.kind
        if kind in OUTCOMES:
            return await self._record_outcome(payload, durable)
        self._step(kind)
        if self.lost is not None:
            return False
        ok = await self._append(payload, durable=durable)
        if ok and kind == "upstream_request" and self.mutation:
            self.sent = True
        return ok

    async def _record_outcome(self, payload: Payload, durable: bool) -> bool:
        """The call's one outcome. Shielded: once it is journaled, the answer that says the same
        is returned, so a shutdown can never answer a journaled result as cut short."""
        if self._grammar.complete:
            return False  # the call has its outcome (a cancellation after it changes nothing)
        opening = None
        position = self._grammar.state
        if position == "start":
            # Refused before its first event landed (cancelled in the queue's wait, a bug while
            # reading it): the call still opens with the request as received.
            opening = self.received or CallReceived(
                arguments={}, jsonrpc_request_id=self.request_id
            )
            self._step(opening.kind)
        try:
            self._step(payload.kind)  # before the await: a cancellation must not add another
        except OutOfOrder:
            self._grammar.state = position  # nothing was written
            raise
        if self.metrics is not None:
            code = getattr(payload, "error_code", None)
            self.metrics.call(self.tool, payload.kind, code, self.started)
        if self.lost is not None:
            return False
        with trio.CancelScope(shield=True):
            if opening is not None and not await self._append(opening, durable=False):
                return False
            ok = await self._append(payload, durable=durable)
        unanswered = self.unanswered
        if ok and unanswered is not None and self.request_id is not None:
            if payload.kind != "call_cancelled":  # a cut call is answered as closed, or not
                unanswered.journaled(self.request_id, self.call_id, payload.kind)
        return ok

    async def _append(self, payload: Payload, *, durable: bool) -> bool:
        event = Event(
            session_id=self.session_id,
            call_id=self.call_id,
            mcp_method_name="tools/call",
            gen_ai_tool_name=self.tool[:128],
            jsonrpc_request_id=self.request_id,
            payload=payload,
        )
        try:
            await self.journal.append(event, durable=durable)
        except JournalFailed as exc:
            log.error("journal write failed (%s): %s", payload.kind, exc.reason)
            self.lost = exc.reason
            return False
        except Exception as exc:  # an event the journal cannot take (a bug): never the text
            log.error("journal write failed (%s): %s", payload.kind, type(exc).__name__)
            self.lost = "io_error"
            return False
        return True

    async def cancelled(self) -> None:
        """Journal the cancellation (shielded: the call's scope is already cancelled)."""
        with trio.CancelScope(shield=True):
            await self.record(CallCancelled(reason="cancelled by the client or shutdown"))

    def journal_note(self) -> dict[str, Any] | None:
        """`meta.journal` for an answer whose outcome the journal lacks, else None."""
        if self.lost is None:
            return None
        note: dict[str, Any] = {"recorded": False, "reason": self.lost}
        if self.sent:
            note["in_doubt"] = True
        return note
