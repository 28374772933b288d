"""The append-only, hash-chained SQLite event log; knows nothing of MCP.

A journal is one SQLite file holding one ordered stream of immutable events. It imports nothing of
``bridge``, ``replay`` or ``runtime``; they import it.

Writing, from trio (the bridge)::

    async with journal.open_writer(path, key=signing_key_or_path) as w:
        w.add_secret(token)                       # redacted wherever it occurs, from now on
        seq = await w.append(journal.Event(
            session_id=sid, call_id=cid, mcp_method_name="tools/call",
            gen_ai_tool_name="task_create", jsonrpc_request_id=7,
            payload=journal.UpstreamRequest(method="POST", route="/tasks", body=body),
        ))                                        # returns once on disk (durable=True)
        await w.append(event, durable=False)      # returns once queued; group-committed

``open_writer`` yields an :class:`AsyncWriter` (alias ``JournalWriter``). ``append`` raises
:class:`JournalUnavailable` (``.reason``: disk_full, read_only, locked, io_error,
cannot_open, corrupt, chain_conflict, closed) when the event cannot be recorded; the writer then
stays failed (``w.failed``) until it recovers: it re-probes by itself with a bounded backoff
(``await w.recover()`` probes at once) and first appends a ``journal_gap`` event naming what was
lost; the calls that lost an event are closed (their later events are refused). Concurrent
appends are committed together, one transaction per ready batch, by one worker thread owned by
the writer's nursery; the event loop never blocks on the disk, and a bounded queue
(``queue_size``) gives back-pressure.
With ``segment_bytes`` / ``segment_age`` the journal rolls over into segment files chained
to one another (``journal-3.db``, ``journal-3.seg0002.db``...; same journal id, seq goes on; see
:mod:`journal._segments`): ``path`` names the journal and the writer appends to its live segment.
``w.flush()`` makes everything appended durable; ``w.checkpoint()`` signs one now. Checkpoints are
Ed25519 signed notes (C2SP signed-note / tlog-checkpoint), signed every ``checkpoint_every``
events / ``checkpoint_interval`` seconds and on close, stored in the ``checkpoints`` table, and
exported to ``checkpoint_path`` when given. The signing key is named in the journal
(``journal_meta.signing_key``; a ``key_rotated`` event when it changes). ``open_sync_writer``
is the blocking twin for tools and tests.

Reading and verifying (replay, audits)::

    with journal.open_reader(path) as r:          # read-only, never locks the writer out
        for record in r.events(call_id=cid):      # also session_id=, kind=, tool=, since_seq=
            ...
        report = journal.verify(r, checkpoint=journal.load_checkpoint(cp_path), trusted=[vkey])
        report.ok, report.findings                # Finding(seq, rule, detail)

Schema (``SCHEMA_VERSION``; migrations additive only): table ``events`` (columns in
``COLUMNS``: seq, journal_id, session_id, call_id, ts_mono_ns, ts_wall, kind, kind_version,
mcp_method_name, gen_ai_tool_name, jsonrpc_request_id, http_response_status_code, error_type,
duration_ms, payload, prev_hash, hash; a fetched row is a ``Row``, read by name, never by
position; a v2 file made since schema 10 also holds each event's Merkle leaf columns there,
``salt``, ``payload_sha256``, ``tree_hashes``, an older one in ``event_leaves``: see
:mod:`journal._tlog`), ``checkpoints``, ``event_kinds``, ``journal_meta``; views
``calls``, ``errors``, ``deprecated_usages``, ``injected_context``, ``sessions``. Triggers refuse
UPDATE, DELETE and REPLACE on every table (but an erasure: :mod:`journal._erase`), and an insert
that breaks the sequence or the chain.
``journal/datasette-metadata.json`` gives Datasette facets and canned queries.

Canonical encoding and hash: see :mod:`journal._canonical` (sorted-key compact JSON of every
column of ``COLUMNS`` but ``hash``, the payload text inserted verbatim; ``hash`` = sha256 hex
of it; seq 1's ``prev_hash`` is 64 zeros). Redaction rules: :mod:`journal._redact`. Checkpoint
signatures and the key file: :mod:`journal._checkpoint`. What the bridge and replay must agree
on (hidden-context names, ``_meta`` keys, the Task routes, the call grammar):
:mod:`journal._contract`.

Errors::

    JournalError
     ├── JournalUnavailable   cannot record now (reason); fail closed
     ├── JournalFormatError   not a journal / newer schema / another journal's id / bad row
     └── EventEncodeError     the event cannot be encoded (also a ValueError)
"""

from typing import TYPE_CHECKING, Any, Final

from ._call_view import calls_view
from ._canonical import COLUMNS, GENESIS_HASH, Row, canonical_bytes, row_hash, row_problem
from ._checkpoint import (
    ORIGIN_FORBIDDEN,
    ORIGIN_PREFIX,
    Checkpoint,
    HmacKey,
    SigningKey,
    Trust,
    VerifierKey,
    announce_key,
    default_key_path,
    export_checkpoint,
    legacy_key_path,
    load_checkpoint,
    load_key,
    load_legacy_key,
    note_key_text,
    origin_line,
    read_key_text,
    sign_checkpoint,
)
from ._contract import (
    HIDDEN_NAMES,
    META_CALLBACK,
    META_RUN,
    OUTCOMES,
    TASKS_ROUTE_TEMPLATE,
    Grammar,
    accepts,
    is_hidden_name,
    tasks_route,
)
from ._core import CHECKPOINT_EVERY, WriterOptions
from ._erase import PROTECTED_KINDS as ERASE_PROTECTED_KINDS
from ._erase import EraseResult, is_erased
from ._erase import Selector as EraseSelector
from ._erase import erase as erase_payloads
from ._errors import (
    LASTING_UNAVAILABLE,
    EventEncodeError,
    JournalError,
    JournalFormatError,
    JournalUnavailable,
    JournalUnavailableReason,
    sqlite_reason,
)
from ._events import (
    ERASED_PAYLOAD,
    KIND_SET_VERSION,
    KINDS,
    PAYLOAD_TYPES,
    AnswerUndelivered,
    CallCancelled,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Event,
    InjectedField,
    JournalGap,
    KeyRotated,
    Kind,
    Payload,
    PayloadErased,
    PrunedSegment,
    Record,
    SegmentsPruned,
    SegmentStarted,
    SessionEnded,
    SessionFields,
    SessionHandshake,
    SessionStarted,
    TokenRefreshed,
    UpstreamRequest,
    UpstreamResponse,
)
from ._files import make_private_dir, open_private, private_opener, read_small
from ._integrity import IntegrityPass
from ._merkle import (
    EMPTY_ROOT,
    Frontier,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from ._reader import TOO_DEEP, Reader, open_reader, record_from_row
from ._redact import REDACTED, Redactor, cut_point
from ._redact import warm_up as warm_up_redaction
from ._rollover import held_by_a_writer
from ._schema import SCHEMA_VERSION
from ._segments import SegmentInfo, base_path, segment_files, segment_index, segment_path
from ._tlog import (
    MERKLE_LOG,
    TreeCheck,
    files_reader,
    leaf_bytes,
    payload_digest,
    record_of_index,
    start_tree,
    stored_index_of,
    tree_checkpoint,
)
from ._verify import ChainVerifier, CheckpointCheck, Finding, Rule, VerifyReport, trust_of, verify
from ._views import VIEWS
from ._writer import SyncWriter, open_sync_writer

__all__ = [
    "CHECKPOINT_EVERY",
    "COLUMNS",
    "EMPTY_ROOT",
    "ERASED_PAYLOAD",
    "ERASE_PROTECTED_KINDS",
    "GENESIS_HASH",
    "HIDDEN_NAMES",
    "KINDS",
    "KIND_SET_VERSION",
    "LASTING_UNAVAILABLE",
    "MERKLE_LOG",
    "META_CALLBACK",
    "META_RUN",
    "ORIGIN_FORBIDDEN",
    "ORIGIN_PREFIX",
    "OUTCOMES",
    "PAYLOAD_TYPES",
    "REDACTED",
    "SCHEMA_VERSION",
    "TASKS_ROUTE_TEMPLATE",
    "TOO_DEEP",
    "VIEWS",
    "AnswerUndelivered",
    "AsyncWriter",
    "CallCancelled",
    "CallError",
    "CallReceived",
    "CallRejected",
    "CallResult",
    "ChainVerifier",
    "Checkpoint",
    "CheckpointCheck",
    "ContextInjected",
    "DeprecatedUsage",
    "EraseResult",
    "EraseSelector",
    "Event",
    "EventEncodeError",
    "Finding",
    "Frontier",
    "Grammar",
    "HmacKey",
    "InjectedField",
    "IntegrityPass",
    "JournalError",
    "JournalFormatError",
    "JournalGap",
    "JournalUnavailable",
    "JournalUnavailableReason",
    "JournalWriter",
    "KeyRotated",
    "Kind",
    "Payload",
    "PayloadErased",
    "ProofError",
    "PrunedSegment",
    "Reader",
    "Record",
    "Redactor",
    "Row",
    "Rule",
    "SegmentInfo",
    "SegmentStarted",
    "SegmentsPruned",
    "SessionEnded",
    "SessionFields",
    "SessionHandshake",
    "SessionStarted",
    "SigningKey",
    "SyncWriter",
    "TokenRefreshed",
    "TreeCheck",
    "Trust",
    "UpstreamRequest",
    "UpstreamResponse",
    "VerifierKey",
    "VerifyReport",
    "WriterOptions",
    "WriterStats",
    "accepts",
    "announce_key",
    "base_path",
    "calls_view",
    "canonical_bytes",
    "consistency_proof",
    "cut_point",
    "default_key_path",
    "erase_payloads",
    "export_checkpoint",
    "files_reader",
    "held_by_a_writer",
    "inclusion_proof",
    "is_erased",
    "is_hidden_name",
    "leaf_bytes",
    "leaf_hash",
    "legacy_key_path",
    "load_checkpoint",
    "load_key",
    "load_legacy_key",
    "make_private_dir",
    "node_hash",
    "note_key_text",
    "open_private",
    "open_reader",
    "open_sync_writer",
    "open_writer",
    "origin_line",
    "payload_digest",
    "private_opener",
    "read_key_text",
    "read_small",
    "record_from_row",
    "record_of_index",
    "row_hash",
    "row_problem",
    "segment_files",
    "segment_index",
    "segment_path",
    "sign_checkpoint",
    "sqlite_reason",
    "start_tree",
    "stored_index_of",
    "tasks_route",
    "tree_checkpoint",
    "tree_hash",
    "trust_of",
    "verify",
    "verify_consistency",
    "verify_inclusion",
    "warm_up_redaction",
]

if TYPE_CHECKING:
    from ._async_writer import AsyncWriter, JournalWriter, WriterStats, open_writer

# The trio writer, imported when first named: it pulls in trio (about 80 ms), which the
# offline tools, readers of journals only, never need.
_ASYNC_WRITER: Final = frozenset({"AsyncWriter", "JournalWriter", "WriterStats", "open_writer"})


def __getattr__(name: str) -> Any:
    if name in _ASYNC_WRITER:
        from . import _async_writer

        value = getattr(_async_writer, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
