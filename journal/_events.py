"""The closed, versioned set of event kinds, their typed payloads, and the stored record type.

A writer is given an :class:`Event` (the envelope the caller knows: session, call, the OpenTelemetry
filter attributes, and one payload); it stamps sequence, journal id, timestamps and hashes and
stores a row. A reader yields :class:`Record`, the stored row with its payload decoded.

Adding a kind or a field is additive: a new payload field must have a default, a new kind gets a
new name (and a row in the ``event_kinds`` table through a migration), and ``KIND_SET_VERSION``
goes up. A changed meaning gets a new ``kind_version``, never a silent edit.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal, TypeAlias

import msgspec

from ._checkpoint import Checkpoint

__all__ = [
    "ERASED_PAYLOAD",
    "KINDS",
    "KIND_SET_VERSION",
    "PAYLOAD_TYPES",
    "WRITER_SESSION",
    "AnswerUndelivered",
    "CallCancelled",
    "CallError",
    "CallReceived",
    "CallRejected",
    "CallResult",
    "ContextInjected",
    "DeprecatedUsage",
    "Event",
    "InjectedField",
    "JournalGap",
    "KeyRotated",
    "Kind",
    "Payload",
    "PayloadErased",
    "PrunedSegment",
    "Record",
    "SegmentStarted",
    "SegmentsPruned",
    "SessionEnded",
    "SessionFields",
    "SessionHandshake",
    "SessionStarted",
    "TokenRefreshed",
    "UpstreamRequest",
    "UpstreamResponse",
]

KIND_SET_VERSION: Final = 8
# What an erased event's payload column holds (its leaf's salt is then empty): see
# journal._erase. Never a payload of a typed kind (none is this object alone).
ERASED_PAYLOAD: Final = '{"erased":true}'

# The session id of the events the writer itself appends (a key rotation, a segment start).
WRITER_SESSION: Final = "journal-writer"

Kind: TypeAlias = Literal[
    "session_started",
    "session_ended",
    "call_received",
    "call_rejected",
    "context_injected",
    "upstream_request",
    "upstream_response",
    "token_refreshed",
    "deprecated_usage",
    "call_result",
    "call_error",
    "call_cancelled",
    "journal_gap",
    "key_rotated",
    "segment_started",
    "segments_pruned",
    "answer_undelivered",
    "session_handshake",
    "payload_erased",
]


class _Payload(msgspec.Struct, frozen=True, kw_only=True):
    kind: ClassVar[Kind]
    kind_version: ClassVar[int] = 1
    description: ClassVar[str]


class SessionFields(msgspec.Struct, kw_only=True):
    """What a ``session_started`` says of its session, declared once: the event derives from it
    (bridge version and policy required there), and so does replay's ``SessionInfo`` (the
    session as read back, every field optional), which copies these fields by name. A field
    added here is journaled and read back with no second declaration."""

    bridge_version: str | None = None
    compat_policy: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    protocol_version: str | None = None
    workspace_id: str | None = None
    agent_id: str | None = None
    api_url: str | None = None


# mypy refuses a frozen dataclass over a mutable base; msgspec allows it and the event is
# frozen (hashable, immutable) all the same, while SessionInfo, over the same base, is mutable.
class SessionStarted(_Payload, SessionFields, frozen=True, kw_only=True):  # type: ignore[misc]
    kind: ClassVar[Kind] = "session_started"
    description: ClassVar[str] = "an MCP session began: client, protocol, bridge and policy"
    bridge_version: str
    compat_policy: str


class SessionHandshake(_Payload, frozen=True, kw_only=True):
    """Who the client is, when its ``initialize`` is answered (kind set 7).

    A session event, after the session's ``session_started`` (journaled at process start, whose
    own client fields stay null from kind set 7 on) and before any call of the session: the
    client's name and version as its ``clientInfo`` said (each cut to 256 characters) and the
    protocol version the bridge answered. Readers take the client from here, else (journals
    written before it existed) from ``session_started``.
    """

    kind: ClassVar[Kind] = "session_handshake"
    description: ClassVar[str] = "the client said who it is; the protocol version answered"
    client_name: str | None = None
    client_version: str | None = None
    protocol_version: str | None = None


class SessionEnded(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "session_ended"
    description: ClassVar[str] = "the MCP session ended"
    reason: str
    calls: int = 0


class CallReceived(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "call_received"
    description: ClassVar[str] = "a request as the model sent it"
    arguments: dict[str, Any] = {}
    meta_keys: list[str] = []
    jsonrpc_request_id: str | int | None = None
    # W3C trace context of the call (hex): the live SERVER span's, or the client's traceparent.
    trace_id: str | None = None
    span_id: str | None = None
    # Why the client's trace context was dropped, when it was (a control character in it).
    trace_context_dropped: str | None = None


class CallRejected(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "call_rejected"
    description: ClassVar[str] = "a request refused before any upstream effect"
    error_code: str
    message: str
    field_errors: dict[str, str] = {}
    suggested_action: dict[str, Any] | None = None
    # The rest of the error the model saw (absent from journals written before they existed).
    retryable: bool | None = None
    candidates: list[dict[str, Any]] | None = None


class InjectedField(msgspec.Struct, frozen=True, kw_only=True):
    """One hidden-context value the bridge supplied: what, from where, and its (redacted) value."""

    name: str
    source: str
    value: Any = None


class ContextInjected(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "context_injected"
    description: ClassVar[str] = "hidden context injected by the bridge (secrets never)"
    fields: list[InjectedField] = []


class UpstreamRequest(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "upstream_request"
    description: ClassVar[str] = "a request about to be sent to the Agent Runtime API"
    method: str
    route: str
    body: Any = None
    headers: dict[str, str] = {}
    attempt: int = 1


class UpstreamResponse(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "upstream_response"
    description: ClassVar[str] = "the Agent Runtime API's answer"
    status: int
    body: Any = None
    headers: dict[str, str] = {}
    duration_ms: float | None = None
    attempt: int = 1


class TokenRefreshed(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "token_refreshed"
    description: ClassVar[str] = "the bearer token was refreshed (never the token itself)"
    source: str
    reason: str


class DeprecatedUsage(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "deprecated_usage"
    description: ClassVar[str] = "a deprecated tool name, argument or upstream route was used"
    use_kind: Literal["tool_name", "argument", "upstream_route"]
    old_name: str
    replacement: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    agent_id: str | None = None


class CallResult(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "call_result"
    description: ClassVar[str] = "the successful result as the model will see it"
    result: Any = None
    truncated: bool = False
    duration_ms: float | None = None


class CallError(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "call_error"
    description: ClassVar[str] = "the error result as the model will see it"
    error_code: str
    retryable: bool
    message: str
    duration_ms: float | None = None
    field_errors: dict[str, str] = {}
    suggested_action: dict[str, Any] | None = None
    # The rest of the error the model saw (absent from journals written before they existed).
    candidates: list[dict[str, Any]] | None = None
    retry_after_seconds: float | None = None
    # Why no upstream answer came, for operators (never shown to the model): e.g.
    # "TLS certificate verify failed: unable to get local issuer certificate".
    reason: str | None = None


class CallCancelled(_Payload, frozen=True, kw_only=True):
    kind: ClassVar[Kind] = "call_cancelled"
    description: ClassVar[str] = "the call was cancelled before an outcome"
    reason: str


class JournalGap(_Payload, frozen=True, kw_only=True):
    """Written first once a failed journal takes writes again (kind set 2).

    Canonical form, like every payload: sorted-key compact JSON of the fields below.
    ``calls`` are the ids of calls with an event lost or refused during the gap (at most
    ``MAX_GAP_CALLS``; ``calls_omitted`` counts the rest): the journal holds a prefix of their
    story and nothing after it, so a reader closes them here (a mutation sent is in doubt).
    """

    kind: ClassVar[Kind] = "journal_gap"
    description: ClassVar[str] = "the journal could not be written for a while; what was lost"
    reason: str  # a JournalUnavailableReason: disk_full, read_only, locked, io_error, ...
    detail: str = ""
    since: str  # ts_wall of the first failure (RFC 3339, UTC)
    seconds: float  # how long appends were refused
    probes: int = 0  # reconnection attempts, the last one successful
    events_lost: int = 0  # appended (non-durable, or durable and refused) in a failed commit
    events_refused: int = 0  # refused at append while the journal was failed
    calls: list[str] = []
    calls_omitted: int = 0


class KeyRotated(_Payload, frozen=True, kw_only=True):
    """Written when the writer signs with another key than the journal last named (kind set 3).

    Checkpoints before this event are signed with ``previous``, those after it with ``vkey``.
    ``previous`` is a verifier key, ``hmac:<key id>`` for an HMAC-era key, or None if unknown.
    """

    kind: ClassVar[Kind] = "key_rotated"
    description: ClassVar[str] = "checkpoints are signed with another key from here on"
    vkey: str
    fingerprint: str
    previous: str | None = None


class SegmentStarted(_Payload, frozen=True, kw_only=True):
    """The first event of every segment after the first (kind set 4): the journal goes on here.

    The journal rolled over (``reason``: ``size`` or ``age``) from ``previous_file`` (a name in
    the same directory), whose last event is ``previous_seq`` with hash ``previous_hash`` (this
    row's ``prev_hash``), and whose last signed checkpoint, ``previous_checkpoint``, names that
    event. The journal id stays the same and seq goes on; ``segment`` numbers the files from 1.
    """

    kind: ClassVar[Kind] = "segment_started"
    description: ClassVar[str] = "the journal goes on in a new segment file chained to the last"
    segment: int
    reason: str
    previous_file: str
    previous_seq: int
    previous_hash: str
    previous_checkpoint: Checkpoint | None = None


class PrunedSegment(msgspec.Struct, frozen=True, kw_only=True):
    """One segment file a prune removed: its name, seq range and last event's hash."""

    file: str
    first_seq: int
    last_seq: int
    last_hash: str


class SegmentsPruned(_Payload, frozen=True, kw_only=True):
    """Written in the live segment before a prune removes closed segments (kind set 5).

    Every event of ``segments`` was held by the fleet store ``store`` (password and query
    removed) up to ``held_seq``, and the store had witnessed a checkpoint at ``witnessed_seq``
    (hash ``witnessed_hash``, equal to this journal's at that seq) at or after their end; each
    was older than ``older_than_days``. A verifier accepts a journal that starts just after the
    last of them.
    """

    kind: ClassVar[Kind] = "segments_pruned"
    description: ClassVar[str] = (
        "closed segments removed once a fleet store held and witnessed them"
    )
    segments: list[PrunedSegment]
    store: str
    held_seq: int
    witnessed_seq: int
    witnessed_hash: str
    older_than_days: float


class AnswerUndelivered(_Payload, frozen=True, kw_only=True):
    """A call's journaled outcome that never reached the client (kind set 6).

    A session event (no ``call_id`` column: the call's own events end at its outcome), written
    at the session's end for each call whose result, error or rejection is journaled but whose
    answer was not written: ``reason`` is ``stdout_closed`` (the client closed its end) or
    ``not_written`` (the client cancelled the request after its outcome, or the session ended
    before the answer could be written). ``jsonrpc_request_id`` is the request's id.
    """

    kind: ClassVar[Kind] = "answer_undelivered"
    description: ClassVar[str] = "a call's journaled outcome was never answered on the wire"
    call_id: str
    outcome: str  # call_result, call_error or call_rejected
    reason: str


class PayloadErased(_Payload, frozen=True, kw_only=True):
    """Payloads removed from the journal, written before they are removed (kind set 8).

    ``seqs`` are the events whose payload text and leaf salt were erased (the stored payload
    becomes :data:`journal.ERASED_PAYLOAD`, the salt empty); their envelope columns, hashes and
    leaves stay, so the chain, the Merkle tree and every proof still verify. ``selector`` says
    how they were chosen (``call``, ``session``, ``task``, ``matching``, ``older_than``; never
    the matched text), ``reason`` why, ``actor`` who ran it (user@host, or ``retention``).
    """

    kind: ClassVar[Kind] = "payload_erased"
    description: ClassVar[str] = (
        "the payloads of named events were erased; envelopes and proofs stay"
    )
    seqs: list[int]
    selector: str
    reason: str
    actor: str
    older_than_days: float | None = None


Payload: TypeAlias = (
    SessionStarted
    | SessionEnded
    | CallReceived
    | CallRejected
    | ContextInjected
    | UpstreamRequest
    | UpstreamResponse
    | TokenRefreshed
    | DeprecatedUsage
    | CallResult
    | CallError
    | CallCancelled
    | JournalGap
    | KeyRotated
    | SegmentStarted
    | SegmentsPruned
    | AnswerUndelivered
    | SessionHandshake
    | PayloadErased
)

PAYLOAD_TYPES: Final[dict[str, type[Payload]]] = {
    t.kind: t
    for t in (
        SessionStarted,
        SessionEnded,
        CallReceived,
        CallRejected,
        ContextInjected,
        UpstreamRequest,
        UpstreamResponse,
        TokenRefreshed,
        DeprecatedUsage,
        CallResult,
        CallError,
        CallCancelled,
        JournalGap,
        KeyRotated,
        SegmentStarted,
        SegmentsPruned,
        AnswerUndelivered,
        SessionHandshake,
        PayloadErased,
    )
}
KINDS: Final[tuple[str, ...]] = tuple(PAYLOAD_TYPES)


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """What a caller appends: the envelope and one payload.

    The filter attributes follow the OpenTelemetry MCP/GenAI conventions (``mcp.method.name``,
    ``gen_ai.tool.name``, ``jsonrpc.request.id``). ``http_response_status_code``, ``error_type``
    and ``duration_ms`` are derived from the payload, so they are never written twice.
    """

    session_id: str
    payload: Payload
    call_id: str | None = None
    mcp_method_name: str | None = None
    gen_ai_tool_name: str | None = None
    jsonrpc_request_id: str | int | None = None

    @property
    def kind(self) -> Kind:
        return self.payload.kind


class Record(msgspec.Struct, frozen=True):
    """One stored event as a reader yields it (every column, the payload decoded).

    ``payload`` is the typed payload for a known kind and version, else the decoded JSON object;
    ``payload_json`` is the stored canonical text. The fields are the columns' order, the
    decoded payload before its text, so a reader builds one from a row by position (a tenth
    of the time of keywords, for every event a replay command reads).
    """

    seq: int
    journal_id: str
    session_id: str
    call_id: str | None
    ts_mono_ns: int
    ts_wall: str
    kind: str
    kind_version: int
    mcp_method_name: str | None
    gen_ai_tool_name: str | None
    jsonrpc_request_id: str | None
    http_response_status_code: int | None
    error_type: str | None
    duration_ms: float | None
    payload: Payload | dict[str, Any]
    payload_json: str
    prev_hash: str
    hash: str


def derived_columns(payload: Payload) -> tuple[int | None, str | None, float | None]:
    """The (http_response_status_code, error_type, duration_ms) columns a payload implies.

    ``error.type`` follows OpenTelemetry: the error code of a failed call, and the status code as a
    string for an HTTP response of 400 or more.
    """
    match payload:
        case UpstreamResponse(status=status, duration_ms=duration):
            return status, (str(status) if status >= 400 else None), duration
        case CallError(error_code=code, duration_ms=duration):
            return None, code, duration
        case CallRejected(error_code=code):
            return None, code, None
        case CallResult(duration_ms=duration):
            return None, None, duration
        case _:
            return None, None, None
