"""Verification of a journal: the hash chain, the sequence, and signed checkpoints.

Findings name the seq and the rule broken:

=============================  ==============================================================
``sequence_gap``               the seq is not the previous seq + 1 (a deleted or missing row)
``chain_broken``               ``prev_hash`` is not the previous event's hash (reorder, deletion,
                               or a row rewritten with a fresh hash)
``hash_mismatch``              ``hash`` is not the hash of the row's canonical encoding (an edit)
``row_malformed``              a column has an impossible type; the row cannot be encoded
``journal_id_mismatch``        the row names another journal
``kind_unknown``               a kind or kind_version this code does not know
``payload_invalid``            the payload is not JSON of its kind's shape
``checkpoint_signature_invalid``  a checkpoint's HMAC does not verify under the key
``checkpoint_journal_mismatch``   the checkpoint is another journal's
``checkpoint_hash_mismatch``   the event at the checkpoint's seq has another hash (history
                               rewritten up to there), or is missing
``truncated_before_checkpoint``  the journal ends before the seq a checkpoint names
=============================  ==============================================================

Verification streams (constant memory) and is incremental: ``since=`` a trusted checkpoint starts
after it; :class:`ChainVerifier` can be fed rows one by one.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal, TypeAlias

import msgspec

from ._canonical import GENESIS_HASH, Row, canonical_bytes
from ._checkpoint import Checkpoint, key_id
from ._events import PAYLOAD_TYPES
from ._reader import Reader, decode_payload, open_reader

__all__ = ["ChainVerifier", "Finding", "Rule", "VerifyReport", "verify"]

Rule: TypeAlias = Literal[
    "sequence_gap",
    "chain_broken",
    "hash_mismatch",
    "row_malformed",
    "journal_id_mismatch",
    "kind_unknown",
    "payload_invalid",
    "checkpoint_signature_invalid",
    "checkpoint_journal_mismatch",
    "checkpoint_hash_mismatch",
    "truncated_before_checkpoint",
]
MAX_FINDINGS: Final = 1000
_sha256: Final = hashlib.sha256


class Finding(msgspec.Struct, frozen=True):
    """One broken rule, at the seq where it shows (None when it concerns no single event)."""

    seq: int | None
    rule: Rule
    detail: str


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify`; ``ok`` when there are no findings."""

    journal_id: str | None
    events: int
    head_seq: int
    head_hash: str
    checkpoints_checked: int
    signatures_checked: int
    findings: list[Finding]
    findings_omitted: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


class ChainVerifier:
    """Checks rows fed in seq order, from a trusted starting point (genesis or a checkpoint)."""

    def __init__(
        self,
        journal_id: str | None,
        *,
        start_seq: int = 0,
        start_hash: str = GENESIS_HASH,
        check_payloads: bool = True,
        max_findings: int = MAX_FINDINGS,
    ) -> None:
        self.journal_id = journal_id
        self.seq = start_seq
        self.hash = start_hash
        self.count = 0
        self.findings: list[Finding] = []
        self.findings_omitted = 0
        self._check_payloads = check_payloads
        self._max_findings = max_findings

    def report(self, seq: int | None, rule: Rule, detail: str) -> None:
        if len(self.findings) < self._max_findings:
            self.findings.append(Finding(seq, rule, detail))
        else:
            self.findings_omitted += 1

    def feed(self, row: Row) -> None:
        """Check one row (a tuple in COLUMNS order) against the previous one and itself."""
        seq, stored_hash = row[0], row[16]
        self.count += 1
        if seq != self.seq + 1:
            self.report(seq, "sequence_gap", f"expected seq {self.seq + 1}, found {seq}")
        if row[15] != self.hash:
            self.report(seq, "chain_broken", "prev_hash is not the previous event's hash")
        try:
            computed = _sha256(canonical_bytes(row)).hexdigest()
        except (TypeError, ValueError, AttributeError, msgspec.EncodeError) as exc:
            self.report(seq, "row_malformed", f"cannot encode the row: {exc}")
        else:
            if computed != stored_hash:
                self.report(seq, "hash_mismatch", "the row's content does not match its hash")
        if row[1] != self.journal_id:
            self.report(seq, "journal_id_mismatch", f"row names journal {row[1]!r}")
        if self._check_payloads:
            self._check_payload(row)
        # Continue from the stored hash, so one edited row yields one finding, at its seq.
        self.seq = seq if isinstance(seq, int) else self.seq + 1
        self.hash = stored_hash

    def _check_payload(self, row: Row) -> None:
        kind, version = row[6], row[7]
        known = PAYLOAD_TYPES.get(kind)
        if known is None or known.kind_version != version:
            self.report(row[0], "kind_unknown", f"kind {kind!r} version {version!r}")
        try:
            decode_payload(kind, version, row[14])
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
            self.report(row[0], "payload_invalid", str(exc))


def verify(
    source: Reader | str | os.PathLike[str],
    *,
    checkpoint: Checkpoint | None = None,
    key: bytes | None = None,
    since: Checkpoint | None = None,
    check_payloads: bool = True,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 10_000,
) -> VerifyReport:
    """Verify a journal's chain, sequence and checkpoints; stream, constant memory.

    ``checkpoint``: a checkpoint held outside the journal (e.g. exported by the writer); detects
    a truncated tail and a rewritten history. ``key``: the HMAC key, to check signatures of that
    checkpoint and of those stored in the journal. ``since``: a trusted, already verified
    checkpoint; verification starts after it. ``progress(n)`` is called every
    ``progress_every`` events.
    """
    if isinstance(source, Reader):
        return _verify(source, checkpoint, key, since, check_payloads, progress, progress_every)
    with open_reader(Path(source)) as reader:
        return _verify(reader, checkpoint, key, since, check_payloads, progress, progress_every)


def _verify(
    reader: Reader,
    checkpoint: Checkpoint | None,
    key: bytes | None,
    since: Checkpoint | None,
    check_payloads: bool,
    progress: Callable[[int], None] | None,
    progress_every: int,
) -> VerifyReport:
    start_seq, start_hash = (since.seq, since.head_hash) if since else (0, GENESIS_HASH)
    chain = ChainVerifier(
        reader.journal_id, start_seq=start_seq, start_hash=start_hash, check_payloads=check_payloads
    )
    signatures = 0
    # seq -> (head hash, what names it); checkpoints are few (one per thousands of events).
    expected: dict[int, list[tuple[str, str]]] = {}
    external = [("held checkpoint", checkpoint)] if checkpoint else []
    stored = [(f"stored checkpoint #{i + 1}", cp) for i, cp in enumerate(reader.checkpoints())]
    trusted = [("since checkpoint", since)] if since else []
    for label, cp in trusted + external + stored:
        if cp.journal_id != reader.journal_id:
            detail = f"{label} is journal {cp.journal_id!r}"
            chain.report(cp.seq, "checkpoint_journal_mismatch", detail)
            continue
        if key is not None:
            signatures += 1
            if not cp.signature_valid(key):
                why = "forged or altered"
                if cp.key_id != key_id(key):
                    why = f"signed with key {cp.key_id}, verified with {key_id(key)}"
                chain.report(cp.seq, "checkpoint_signature_invalid", f"{label}: {why}")
        expected.setdefault(cp.seq, []).append((cp.head_hash, label))
    if since is not None and reader.hash_at(since.seq) != since.head_hash:
        chain.report(since.seq, "checkpoint_hash_mismatch", "since checkpoint: hash differs")
    expected.pop(0, None)
    seen: set[int] = set()
    for row in reader.rows(since_seq=start_seq):
        chain.feed(row)
        named = expected.get(row[0])
        if named is not None:
            seen.add(row[0])
            for head_hash, label in named:
                if row[16] != head_hash:
                    chain.report(row[0], "checkpoint_hash_mismatch", f"{label}: hash differs")
        if progress is not None and chain.count % progress_every == 0:
            progress(chain.count)
    for seq, named in sorted(expected.items()):
        if seq <= start_seq or seq in seen:
            continue
        for _, label in named:
            if seq > chain.seq:
                chain.report(
                    chain.seq + 1,
                    "truncated_before_checkpoint",
                    f"journal ends at seq {chain.seq}; {label} names seq {seq}",
                )
            else:
                chain.report(seq, "checkpoint_hash_mismatch", f"{label}: no event at seq {seq}")
    if progress is not None:
        progress(chain.count)
    return VerifyReport(
        journal_id=reader.journal_id,
        events=chain.count,
        head_seq=chain.seq,
        head_hash=chain.hash,
        checkpoints_checked=len(trusted) + len(external) + len(stored),
        signatures_checked=signatures,
        findings=chain.findings,
        findings_omitted=chain.findings_omitted,
    )
