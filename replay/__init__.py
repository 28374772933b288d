"""Offline readers of journals: verify, debug and audit without the bridge running.

Every ``agentteam-replay`` subcommand is one function here that returns a typed result
(msgspec Structs, so ``msgspec.json.encode(result)`` is the ``--json`` output); the CLI only
parses and renders. Each takes one or many journal paths (merged by journal id and sequence),
streams the events with bounded state, and accepts ``progress(done, expected)``::

    replay.verify(paths, checkpoints=[cp], trusted=[vkey]) -> VerifyResult (.ok, .findings, ...)
    replay.signing_key()                               -> KeyInfo (vkey, fingerprint)
    replay.list_calls(paths, CallFilter(status="error"), limit=50)      -> CallList
    replay.stream_calls(paths, CallFilter(...))        -> CallStream (the same, as it is read)
    replay.show_call(paths, call_id)                   -> CallDetail
    replay.check_idempotency(paths)                    -> IdempotencyResult (.ok, .findings)
    replay.deprecations(paths, gate_days=30)           -> DeprecationReport (.ok: every gate met)
    replay.audit(paths)                                -> AuditReport
    replay.report(paths, ReportFilter(since=...))      -> Report (all of the above, for a page)
    replay.rerun(paths, against=None)                  -> RerunResult (.ok: nothing differs)
    replay.export_otlp(paths, file) / export_jsonl(paths, file) -> ExportResult
    replay.ship(paths, "postgresql://...")             -> ShipReport (.ok: nothing refused)
    replay.prune(paths, "postgresql://...", older_than_days=30)  -> PruneReport (.removed)
    replay.erase_from(url, journal_id, Selector(...), reason=...) -> EraseReport (store alone)
    replay.scrub_store(url)                            -> ScrubReport (.ok: erased bytes gone)

The fleet store (PostgreSQL, ``psycopg``; see docs/fleet.md): ``ship`` copies journals into it;
``contiguous_seq(url, journal_id)`` and ``witnessed_checkpoint(url, journal_id)`` say what it
holds of a journal; ``prune`` removes a journal's old segments once the store holds and has
witnessed them (``replay._prune``: the only deletion of journal data).

A finding (:class:`Finding`) names the journal, the sequence number and the rule broken; the rules
of each check are listed in its module (``replay._verify``, ``replay._idempotency``). Inputs a
person gets wrong (no such file, not a journal, a bad checkpoint or key file) raise
:class:`ReplayInputError`. ``verify`` loads nothing of the bridge; ``idempotency`` reads the
declared hints of ``bridge.TOOLS``; ``rerun`` drives ``bridge.Bridge`` (public names, resolved on
first use).
"""

from ._audit import AuditReport, BoardMutations, ErrorCount, Latency, SessionRow, ToolUsage, audit
from ._calls import (
    CallDetail,
    CallFilter,
    CallList,
    CallStream,
    Exchange,
    StoryEvent,
    list_calls,
    show_call,
    stream_calls,
)
from ._cosign import CosignerKey, WitnessKey
from ._deprecations import DeprecatedName, DeprecatedUser, DeprecationReport, Gate, deprecations
from ._diff import Difference, normalize
from ._erase import EraseReport, EraseResult, Selector, erase
from ._export import ExportResult, PushError, export_jsonl, export_otlp, push_otlp
from ._findings import Finding
from ._fleet_cosign import CosignReport, JournalCosigned, cosign_once
from ._fleet_erase import ScrubReport, erase_from, scrub_store
from ._fleet_follow import ship_follow
from ._fleet_ship import JournalShipped, ShipReport, ship
from ._fleet_store import StoreError, StoreFinding, contiguous_seq, witnessed_checkpoint
from ._fleet_store import findings as store_findings
from ._idempotency import HintCheck, IdempotencyResult, KeyGroup, check_idempotency
from ._invariants import InDoubtCall
from ._key import KeyInfo, signing_key
from ._prove import (
    CallProof,
    ConsistencyProof,
    EventProof,
    InclusionProof,
    ProofCheck,
    check_proof,
    prove_call,
    prove_consistency,
    prove_seq,
)
from ._prune import JournalPruned, PruneReport, prune
from ._report import Bucket, ErrorExample, Report, ReportFilter, report
from ._rerun import RerunCall, RerunResult, rerun, rerun_async
from ._source import Journals, ReplayInputError, journal_files, open_journals
from ._story import CallStory, CallSummary, SessionInfo, iter_stories
from ._verify import JournalReport, Key, VerifyResult, verify

__all__ = [
    "AuditReport",
    "BoardMutations",
    "Bucket",
    "CallDetail",
    "CallFilter",
    "CallList",
    "CallProof",
    "CallStory",
    "CallStream",
    "CallSummary",
    "ConsistencyProof",
    "CosignReport",
    "CosignerKey",
    "DeprecatedName",
    "DeprecatedUser",
    "DeprecationReport",
    "Difference",
    "EraseReport",
    "EraseResult",
    "ErrorCount",
    "ErrorExample",
    "EventProof",
    "Exchange",
    "ExportResult",
    "Finding",
    "Gate",
    "HintCheck",
    "IdempotencyResult",
    "InDoubtCall",
    "InclusionProof",
    "JournalCosigned",
    "JournalPruned",
    "JournalReport",
    "JournalShipped",
    "Journals",
    "Key",
    "KeyGroup",
    "KeyInfo",
    "Latency",
    "ProofCheck",
    "PruneReport",
    "PushError",
    "ReplayInputError",
    "Report",
    "ReportFilter",
    "RerunCall",
    "RerunResult",
    "ScrubReport",
    "Selector",
    "SessionInfo",
    "SessionRow",
    "ShipReport",
    "StoreError",
    "StoreFinding",
    "StoryEvent",
    "ToolUsage",
    "VerifyResult",
    "WitnessKey",
    "audit",
    "check_idempotency",
    "check_proof",
    "contiguous_seq",
    "cosign_once",
    "deprecations",
    "erase",
    "erase_from",
    "export_jsonl",
    "export_otlp",
    "iter_stories",
    "journal_files",
    "list_calls",
    "normalize",
    "open_journals",
    "prove_call",
    "prove_consistency",
    "prove_seq",
    "prune",
    "push_otlp",
    "report",
    "rerun",
    "rerun_async",
    "scrub_store",
    "ship",
    "ship_follow",
    "show_call",
    "signing_key",
    "store_findings",
    "stream_calls",
    "verify",
    "witnessed_checkpoint",
]
