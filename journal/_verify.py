"""Verification of a journal: the hash chain, the sequence, and signed checkpoints.

Findings name the seq and the rule broken:

=============================  ==============================================================
``sequence_gap``               the seq is not the previous seq + 1 (a deleted or missing row)
``chain_broken``               ``prev_hash`` is not the previous event's hash (reorder, deletion,
                               or a row rewritten with a fresh hash)
``hash_mismatch``              ``hash`` is not the hash of the row's canonical encoding (an edit)
``row_malformed``              a column has an impossible type (or ``ts_wall`` is no RFC 3339
                               time with an offset); the analyses cannot read the row
``journal_id_mismatch``        the row names another journal
``kind_unknown``               a kind or kind_version this code does not know
``payload_invalid``            the payload is not JSON of its kind's shape
``checkpoint_signature_invalid``  a checkpoint names a trusted key but its signature does not
                               verify under it (forged or altered)
``checkpoint_unverified``      no trusted key made the checkpoint's signature (an unknown
                               key: re-signed by someone else, or no trusted key was given)
``checkpoint_key_unexpected``  the checkpoint is signed by another key than the one the journal
                               names at its seq (``journal_meta.signing_key``, ``key_rotated``)
``checkpoint_journal_mismatch``   the checkpoint is another journal's
``checkpoint_hash_mismatch``   the event at the checkpoint's seq has another hash (history
                               rewritten up to there), or is missing
``truncated_before_checkpoint``  the journal ends before the seq a checkpoint names
``leaf_missing``               a v2 journal's event has no leaf (salt and payload digest)
``payload_digest_mismatch``    the payload is not the one its leaf commits to
``tree_hash_mismatch``         a stored Merkle hash is not the recomputed one (proofs fail)
``checkpoint_root_mismatch``   a checkpoint's signed root is not the tree hash at its size, or
                               it signs a tree root in a journal read as v1 (its ``merkle_log``
                               mark removed): its signature does not cover the head hash it names
``erasure_unrecorded``         an erased event no ``payload_erased`` event names (checked on
                               a whole journal's file; across segments by replay's verify)
=============================  ==============================================================

An erased event (:mod:`journal._erase`: its payload the erased marker, its leaf's salt empty)
in a v2 journal is not a ``hash_mismatch``: its hash, which covered the erased bytes, is taken
as stored, and its leaf, which commits to its envelope and payload digest, is checked by the
tree as any other; its seq is listed in ``VerifyReport.erased_seqs``. In a v1 journal (no
leaves) the marker is an edit like any other.

A v2 journal (:mod:`journal._tlog`) is also a Merkle log: its leaves, stored hashes and every
checkpoint's signed root are recomputed in the same pass (:class:`journal.TreeCheck`); a v1
journal is checked as a chain only (``VerifyReport.log_version``).

Signatures count only under a key the verifier trusts (:class:`journal.Trust`): a key named
inside the journal is trusted only when asked (``trust_recorded_keys``), since whoever rewrites
a journal records his own. ``accept_unverified`` turns ``checkpoint_unverified`` findings into a
count of unchecked signatures. A truncated tail shows only against a checkpoint newer than the
head: one stored in the journal (the ``checkpoints`` table is append-only), or one held
elsewhere (``checkpoint=``); a journal cut back below its last checkpoint, with the checkpoint rows
removed too, is indistinguishable from a shorter journal without such a witness.

A checkpoint *counts* when its signature is not forged (it verifies under a trusted key, or no
trusted key made it: ``checkpoint_unverified`` unless ``accept_unverified``) and the journal holds
its hash at its seq; ``signed_through`` is the highest seq a counted checkpoint covers (every event
up to it: each hash covers the one before). So a verdict without findings means it is covered by
trusted signatures (or by signatures accepted unchecked, when asked).
A key rotation is chain-signed: a ``key_rotated`` event (:meth:`CheckpointCheck.note_rotation`)
at or before a checkpoint that verified under a trusted key vouches for the key it names as
``previous``, for the checkpoints before the rotation.

Verification streams (constant memory) and is incremental: ``since=`` a trusted checkpoint starts
after it; :class:`ChainVerifier` can be fed rows one by one, and :class:`CheckpointCheck` beside it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, Literal, TypeAlias

import msgspec

from ._canonical import GENESIS_HASH, Row, canonical_bytes, row_problem
from ._checkpoint import (
    SEED_KEY_NAME,
    Checkpoint,
    HmacKey,
    SigningKey,
    Trust,
    Verdict,
    VerifierKey,
)
from ._events import ERASED_PAYLOAD, PAYLOAD_TYPES
from ._reader import Reader, decode_payload, open_reader
from ._tlog import Leaf, start_tree, tree_checkpoint

__all__ = ["ChainVerifier", "CheckpointCheck", "Finding", "Rule", "VerifyReport", "verify"]

Rule: TypeAlias = Literal[
    "sequence_gap",
    "chain_broken",
    "hash_mismatch",
    "row_malformed",
    "journal_id_mismatch",
    "kind_unknown",
    "payload_invalid",
    "checkpoint_signature_invalid",
    "checkpoint_unverified",
    "checkpoint_key_unexpected",
    "checkpoint_journal_mismatch",
    "checkpoint_hash_mismatch",
    "truncated_before_checkpoint",
    "leaf_missing",
    "payload_digest_mismatch",
    "tree_hash_mismatch",
    "checkpoint_root_mismatch",
    "erasure_unrecorded",
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
    signatures_unchecked: int = 0
    last_checkpoint_seq: int = 0
    recorded_keys: list[tuple[int, str]] = msgspec.field(default_factory=list)
    log_version: int = 1  # 2: a Merkle log with proofs; 1: chain only, no proofs
    leaf_store: str | None = None  # v2: "events" (the events row) or "event_leaves" (aside)
    erased_seqs: list[int] = msgspec.field(default_factory=list)  # payloads erased, proofs kept

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
        self.erased: list[int] = []  # seqs of erased events (rows with leaves only)
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

    def feed(self, row: Row, leaf: Leaf | None = None) -> None:
        """Check one row against the previous one and itself (``leaf``: its v2 leaf, if read)."""
        seq, stored_hash = row.seq, row.hash
        self.count += 1
        if seq != self.seq + 1:
            self.report(seq, "sequence_gap", f"expected seq {self.seq + 1}, found {seq}")
        if row.prev_hash != self.hash:
            self.report(seq, "chain_broken", "prev_hash is not the previous event's hash")
        if leaf is not None and leaf.salt == "" and row.payload == ERASED_PAYLOAD:
            self.erased.append(seq)  # its leaf vouches for it (TreeCheck); the hash stands
            computed = stored_hash
        else:
            computed = None
        problem = row_problem(row)
        if problem is not None:
            self.report(seq, "row_malformed", problem)
        try:
            computed = computed or _sha256(canonical_bytes(row)).hexdigest()
        except (TypeError, ValueError, AttributeError, msgspec.EncodeError) as exc:
            self.report(seq, "row_malformed", f"cannot encode the row: {exc}")
        else:
            if computed != stored_hash:
                self.report(seq, "hash_mismatch", "the row's content does not match its hash")
        if row.journal_id != self.journal_id:
            self.report(seq, "journal_id_mismatch", f"row names journal {row.journal_id!r}")
        if self._check_payloads:
            self._check_payload(row)
        # Continue from the stored hash, so one edited row yields one finding, at its seq.
        self.seq = seq if isinstance(seq, int) else self.seq + 1
        self.hash = stored_hash

    def _check_payload(self, row: Row) -> None:
        kind, version = row.kind, row.kind_version
        known = PAYLOAD_TYPES.get(kind)
        if known is None or known.kind_version != version:
            self.report(row.seq, "kind_unknown", f"kind {kind!r} version {version!r}")
        try:
            decode_payload(kind, version, row.payload)
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
            self.report(row.seq, "payload_invalid", str(exc))


class CheckpointCheck:
    """Checks checkpoints (stored and held) beside a :class:`ChainVerifier` fed the same rows.

    ``see(row)`` after each ``chain.feed(row)``; ``finish()`` at the end reports truncation and
    checks every signature against ``trust``. Findings go to the chain verifier's list.
    """

    def __init__(
        self,
        chain: ChainVerifier,
        checkpoints: list[tuple[str, Checkpoint]],
        trust: Trust,
        *,
        recorded_keys: Iterable[tuple[int, str]] = (),
        trust_recorded_keys: bool = False,
        accept_unverified: bool = False,
        start_seq: int = 0,
        start_hash: str | None = None,
        roots_checked: bool,
    ) -> None:
        self._chain = chain
        self._start_hash = start_hash
        self._matched: set[tuple[int, str]] = set()  # (seq, hash) of checkpoints the rows hold
        self._rotations: list[tuple[int, str]] = []  # (seq, previous verifier key)
        self.signed_through = 0
        self._trust = Trust(trust.verifiers.values(), trust.hmac_keys.values())  # a copy
        self._accept_unverified = accept_unverified
        self._start_seq = start_seq
        self.recorded_keys = sorted(recorded_keys)
        if trust_recorded_keys:
            for _, vkey in self.recorded_keys:
                try:
                    self._trust.add(VerifierKey.parse(vkey))
                except ValueError:
                    pass  # not a key: what it would have signed stays unverified
        self.checked = len(checkpoints)
        self.signatures_checked = 0
        self.signatures_unchecked = 0
        self.last_seq = 0
        self._signed: list[tuple[str, Checkpoint]] = []
        # seq -> [(head hash, label)]; checkpoints are few (one per thousands of events).
        self._expected: dict[int, list[tuple[str, str]]] = {}
        self._seen: set[int] = set()
        for label, cp in checkpoints:
            if cp.journal_id != chain.journal_id:
                detail = f"{label} is journal {cp.journal_id!r}"
                chain.report(cp.seq, "checkpoint_journal_mismatch", detail)
                continue
            if cp.root_hash is not None and not roots_checked:
                # Its signature covers the tree root only: the head hash it names is anyone's.
                detail = (
                    f"{label} signs a Merkle tree root, but the journal reads as v1 (chain only:"
                    " no merkle_log in journal_meta), so nothing checks what it signs"
                )
                chain.report(cp.seq, "checkpoint_root_mismatch", detail)
                continue
            self._signed.append((label, cp))
            self.last_seq = max(self.last_seq, cp.seq)
            if cp.seq == 0:
                if cp.head_hash != GENESIS_HASH:
                    chain.report(0, "checkpoint_hash_mismatch", f"{label}: genesis hash differs")
                continue
            self._expected.setdefault(cp.seq, []).append((cp.head_hash, label))

    def see(self, row: Row) -> None:
        """Compare the row with any checkpoint naming its seq."""
        seq = row.seq
        named = self._expected.get(seq)
        if named is None:
            return
        self._seen.add(seq)
        for head_hash, label in named:
            if row.hash != head_hash:
                self._chain.report(seq, "checkpoint_hash_mismatch", f"{label}: hash differs")
            else:
                self._matched.add((seq, head_hash))

    def note_rotation(self, seq: int, previous: str | None) -> None:
        """A ``key_rotated`` event at ``seq`` naming ``previous`` (a verifier key, or
        ``hmac:<id>`` / None, which vouch for nothing)."""
        if previous is not None and not previous.startswith("hmac:"):
            self._rotations.append((seq, previous))

    def finish(self) -> None:
        """Report checkpoints beyond the end or at a missing seq; check every signature."""
        chain = self._chain
        for seq, named in sorted(self._expected.items()):
            if seq <= self._start_seq or seq in self._seen:
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
        verdicts = [(label, cp, self._trust.check(cp)) for label, cp in self._signed]
        trusted_through = max(
            (cp.seq for _, cp, v in verdicts if v == "valid" and self._holds(cp)), default=0
        )
        for label, cp, verdict in verdicts:
            if verdict == "untrusted":
                verdict = self._vouched(cp, trusted_through)
            self._check_signature(label, cp, verdict)
            self._check_key_in_force(label, cp)
            # An untrusted signature is a finding of its own (checkpoint_unverified) unless
            # accepted: either way the checkpoint says what it covers.
            if verdict != "invalid" and self._holds(cp):
                self.signed_through = max(self.signed_through, cp.seq)

    def _holds(self, cp: Checkpoint) -> bool:
        """Whether the journal holds the checkpoint's hash at its seq (here, or as the link a
        later segment starts from)."""
        if (cp.seq, cp.head_hash) in self._matched:
            return True
        return cp.seq == self._start_seq and cp.head_hash == self._start_hash

    def _vouched(self, cp: Checkpoint, trusted_through: int) -> Verdict:
        """The verdict under a key a chain-signed rotation names as its predecessor, for a
        checkpoint before that rotation; ``untrusted`` when none does."""
        for seq, previous in self._rotations:
            if cp.seq < seq <= trusted_through:
                try:
                    key = VerifierKey.parse(previous)
                except ValueError:
                    continue
                if key.key_id == cp.key_id:
                    return "valid" if cp.check(key) else "invalid"
        return "untrusted"

    def _check_signature(self, label: str, cp: Checkpoint, verdict: Verdict) -> None:
        if verdict == "valid":
            self.signatures_checked += 1
        elif verdict == "invalid":
            detail = f"{label}: forged or altered (does not verify under the trusted {cp.key_id})"
            self._chain.report(cp.seq, "checkpoint_signature_invalid", detail)
        elif self._accept_unverified:
            self.signatures_unchecked += 1
        else:
            why = (
                f"signed by {_key_label(cp)}, which is not a trusted key"
                if self._trust
                else "no trusted key to check its signature"
            )
            self._chain.report(cp.seq, "checkpoint_unverified", f"{label}: {why}")

    def _check_key_in_force(self, label: str, cp: Checkpoint) -> None:
        in_force = None
        for seq, vkey in self.recorded_keys:
            if seq > cp.seq:
                break
            in_force = vkey
        if in_force is None:
            return  # no key named yet: an HMAC-era stretch of the journal
        named = "+".join(in_force.split("+", 2)[:2])  # <name>+<hex ID> of the verifier key
        if cp.key_id != named:
            detail = f"{label}: signed by {_key_label(cp)}; the journal names {named} at that seq"
            self._chain.report(cp.seq, "checkpoint_key_unexpected", detail)


def _key_label(cp: Checkpoint) -> str:
    return cp.key_id if cp.scheme == "ed25519" else f"HMAC key {cp.key_id}"


def trust_of(
    key: SigningKey | VerifierKey | HmacKey | bytes | None,
    trusted: Iterable[VerifierKey | HmacKey | SigningKey] = (),
) -> Trust:
    """A Trust from keys as callers hold them (bytes: a 32-byte Ed25519 seed, the writer's)."""
    keys: list[VerifierKey | HmacKey] = []
    for item in [*trusted, *([] if key is None else [key])]:
        if isinstance(item, bytes):
            item = SigningKey(SEED_KEY_NAME, item)
        keys.append(item.verifier if isinstance(item, SigningKey) else item)
    return Trust(
        [k for k in keys if isinstance(k, VerifierKey)], [k for k in keys if isinstance(k, HmacKey)]
    )


def verify(
    source: Reader | str | os.PathLike[str],
    *,
    checkpoint: Checkpoint | None = None,
    key: SigningKey | VerifierKey | HmacKey | bytes | None = None,
    trusted: Iterable[VerifierKey | HmacKey | SigningKey] = (),
    trust_recorded_keys: bool = False,
    accept_unverified: bool = False,
    since: Checkpoint | None = None,
    check_payloads: bool = True,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 10_000,
) -> VerifyReport:
    """Verify a journal's chain, sequence and checkpoints; stream, constant memory.

    ``checkpoint``: a checkpoint held outside the journal (e.g. exported by the writer, kept
    elsewhere); detects a truncated tail and a rewritten history. ``key`` and ``trusted``: the
    keys whose signatures count (a :class:`SigningKey` or 32-byte seed stands for its public
    half; :class:`HmacKey` for HMAC-era checkpoints). ``trust_recorded_keys``: also trust the
    keys the journal names (only for a journal whose file you trust). ``accept_unverified``:
    count signatures no trusted key made as unchecked instead of failing. ``since``: a trusted,
    already verified checkpoint; verification starts after it. ``progress(n)`` is called every
    ``progress_every`` events.
    """
    trust = trust_of(key, trusted)
    options = (checkpoint, trust, trust_recorded_keys, accept_unverified, since, check_payloads)
    if isinstance(source, Reader):
        return _verify(source, *options, progress, progress_every)
    with open_reader(Path(source)) as reader:
        return _verify(reader, *options, progress, progress_every)


def erasure_named(reader: Reader) -> set[int]:
    """The seqs the ``payload_erased`` events of a file name."""
    named: set[int] = set()
    for record in reader.events(kind="payload_erased"):
        payload = record.payload
        named.update(getattr(payload, "seqs", ()))
    return named


def _verify(
    reader: Reader,
    checkpoint: Checkpoint | None,
    trust: Trust,
    trust_recorded_keys: bool,
    accept_unverified: bool,
    since: Checkpoint | None,
    check_payloads: bool,
    progress: Callable[[int], None] | None,
    progress_every: int,
) -> VerifyReport:
    # A later segment of a journal rolled over into several files starts from its link (the
    # chain across the files is replay.verify's); any other file from genesis.
    link = (reader.segment.first_seq - 1, reader.segment.prev_hash or GENESIS_HASH)
    start_seq, start_hash = (since.seq, since.head_hash) if since else link
    chain = ChainVerifier(
        reader.journal_id, start_seq=start_seq, start_hash=start_hash, check_payloads=check_payloads
    )
    given = [("since checkpoint", since)] if since else []
    given += [("held checkpoint", checkpoint)] if checkpoint else []
    if reader.merkle:  # a bare note's root line is the tree hash
        given = [(label, tree_checkpoint(cp, reader.hash_at(cp.seq))) for label, cp in given]
    stored = [(f"stored checkpoint #{i + 1}", cp) for i, cp in enumerate(reader.checkpoints())]
    checks = CheckpointCheck(
        chain,
        given + stored,
        trust,
        recorded_keys=reader.recorded_keys(),
        trust_recorded_keys=trust_recorded_keys,
        accept_unverified=accept_unverified,
        start_seq=start_seq,
        roots_checked=reader.merkle,
    )
    if since is not None and reader.hash_at(since.seq) != since.head_hash:
        chain.report(since.seq, "checkpoint_hash_mismatch", "since checkpoint: hash differs")
    tree = None
    if reader.merkle:
        first = reader.segment.first_seq
        tree = start_tree(
            chain.report, first, start_seq, reader.stored_hash, given + stored, reader.journal_id
        )
    for row, leaf in reader.stored_rows(since_seq=start_seq, leaves=tree is not None):
        chain.feed(row, leaf)
        checks.see(row)
        if tree is not None:
            tree.feed(row, leaf)
        if progress is not None and chain.count % progress_every == 0:
            progress(chain.count)
    checks.finish()
    segment = reader.segment
    if chain.erased and segment.index == 1 and segment.next_file is None:
        named = erasure_named(reader)
        for seq in chain.erased:
            if seq not in named:
                chain.report(seq, "erasure_unrecorded", "erased; no payload_erased event names it")
    if progress is not None:
        progress(chain.count)
    return VerifyReport(
        journal_id=reader.journal_id,
        events=chain.count,
        head_seq=chain.seq,
        head_hash=chain.hash,
        checkpoints_checked=checks.checked,
        signatures_checked=checks.signatures_checked,
        signatures_unchecked=checks.signatures_unchecked,
        last_checkpoint_seq=checks.last_seq,
        recorded_keys=checks.recorded_keys,
        findings=chain.findings,
        findings_omitted=chain.findings_omitted,
        log_version=reader.log_version,
        leaf_store=reader.leaf_store,
        erased_seqs=chain.erased,
    )
