"""``verify``: integrity, the call grammar and the bridge's invariants, in one streaming pass.

Each journal is checked on its own, row by row: a journal rolled over into segments as one
chain across its files in seq order (each later file's first event must follow the previous
file's last), any other file alone (a copy must verify as well as the original). With the
journal's public :class:`journal.ChainVerifier` for the hash chain and the sequence. Rules,
besides those of :mod:`journal` (``sequence_gap``, ``chain_broken``, ``hash_mismatch``,
``row_malformed``, ``journal_id_mismatch``, ``kind_unknown``, ``payload_invalid``, and the
checkpoint rules of :class:`journal.CheckpointCheck`: ``checkpoint_signature_invalid``,
``checkpoint_unverified``, ``checkpoint_key_unexpected``, ``checkpoint_journal_mismatch``,
``checkpoint_hash_mismatch``, ``truncated_before_checkpoint``):

===============================  =============================================================
``call_grammar``                 an event out of place in its call (see :mod:`journal._contract`)
``call_incomplete``              a call with no outcome in a session that ended normally
``refresh_replay_exceeded``      more than one token refresh or replay in one call
``replay_differs``               the replay after a refresh is not the same operation
``hidden_context_in_arguments``  a model argument naming hidden context went on past rejection,
                                 or the upstream body carries hidden context not injected
``context_mismatch``             injected workspace/agent (or the route's) differ from the
                                 session's
``secret_in_payload``            a bearer credential, token or JWT in a stored event, in any
                                 text column (a runtime token in any case, or a prefix of it)
``segment_missing``              a segment is not here: seqs missing between two files, a
                                 closed last file whose successor is absent, or a journal that
                                 starts after seq 1 where no ``segments_pruned`` event names
                                 the segment before its first file (a pruned start is accepted)
``segment_link_broken``          a segment's first event does not follow the previous file's
                                 last (a segment replaced by another history, or rewritten)
``fork``                         two files of one journal id hold different events at a seq
                                 both hold: two histories (see :mod:`replay._forks`)
``unsigned_history``             no checkpoint signed by a trusted key covers the history
``unsigned_tail``                more unsigned events after the last one than a writer leaves
``excuse_unsigned``              a ``segments_pruned`` / ``journal_gap`` no trusted checkpoint
                                 covers
``key_file_replaced``            this machine's key took over from a key it does not hold
``erasure_unrecorded``           an erased payload no ``payload_erased`` event names
===============================  =============================================================

Erased events (see :mod:`journal._erase`) are no fault: ``erased_seqs`` lists them, and a
``payload_erased`` event counts as an excuse (``excuse_unsigned`` when no trusted checkpoint
covers it).

The last four are the trust policy of :mod:`replay._trust`: what a signature covers, and no more.

In-doubt calls (a mutation sent upstream whose effect is unknown) are listed apart, for
reconciliation: they are no fault of the journal. A ``journal_gap`` event (written by a writer
that recovered) closes the calls it names: their stories end where the journal lost an event;
a mutation among them that was sent is in doubt with reason ``journal_gap``.

This module walks each journal's files and checks the chain, the checkpoints and the segment
links; the call and session rules (``call_grammar`` to ``secret_in_payload``) and the in-doubt
calls are checked in :mod:`replay._invariants`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Checkpoint, Reader

from ._findings import Finding
from ._forks import find_forks
from ._invariants import EventChecks, InDoubtCall
from ._source import (
    PROGRESS_EVERY,
    Progress,
    ReplayInputError,
    decode_payload,
    journal_files,
    open_reader,
)
from ._trust import (
    EXCUSES,
    excuse_findings,
    key_file_findings,
    local_key_ids,
    signed_history_findings,
)

__all__ = [
    "JournalReport",
    "Key",
    "VerifyResult",
    "load_checkpoint_file",
    "load_key_file",
    "load_trusted_key",
    "verify",
]

MAX_FINDINGS: Final = 1000
_NOTED: Final = EXCUSES | {"key_rotated", "payload_erased"}


class JournalReport(msgspec.Struct, frozen=True, kw_only=True):
    """What was checked in one file."""

    path: str
    journal_id: str | None
    events: int
    head_seq: int
    head_hash: str
    calls: int
    checkpoints_checked: int
    signatures_checked: int
    signatures_unchecked: int
    held_checkpoint: str | None
    held_checkpoint_seq: int | None = None
    # The held checkpoint is the one exported beside the journal: on the same machine, so it
    # cannot witness a journal cut back below it (whoever cuts can re-export).
    held_checkpoint_beside: bool = False
    last_checkpoint_seq: int = 0
    recorded_keys: list[str] = msgspec.field(default_factory=list)
    # A journal rolled over into several files: its segments in seq order ([] for one file).
    segments: list[str] = msgspec.field(default_factory=list)
    first_seq: int = 1
    # Segments before first_seq were removed by `prune`, as a segments_pruned event says.
    pruned_through: int = 0
    # 2: an RFC 6962 Merkle log, its roots checked and proofs possible (`prove`); 1: a journal
    # written before it, a hash chain only, no proofs.
    log_version: int = 1
    # Where a v2 journal's files keep their leaf columns: "events" (in the events row, files
    # made since schema 10), "event_leaves" (the side table, files made before), "mixed" (a
    # pool begun before and rolled over since); None for v1.
    leaf_store: str | None = None
    # The highest seq a checkpoint signed by a trusted key covers (0: none), the events after
    # it that no signature covers, and whether a writer holds the journal now (a live session).
    signed_through: int = 0
    unsigned_tail: int = 0
    live: bool = False
    # Events whose payloads were erased (`erase`): their envelopes, leaves and proofs stay.
    erased_seqs: list[int] = msgspec.field(default_factory=list)
    # With `--witness URL`: the journal's payload_erased events the store holds but has not
    # applied: pending (no witness cosignature covers them yet), or held (a key rotated since
    # the store registered the journal: its owner's `erase --from` erases them). Until then
    # the store still holds those payloads.
    erasures_pending: list[int] = msgspec.field(default_factory=list)
    erasures_held: list[int] = msgspec.field(default_factory=list)


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify`: ``ok`` when no rule is broken."""

    journals: list[JournalReport]
    findings: list[Finding]
    in_doubt: list[InDoubtCall]
    findings_omitted: int = 0
    trusted_keys: list[str] = msgspec.field(default_factory=list)
    # The trust is this machine's key file(s), as no key was given (`key_file_replaced` applies).
    trusted_local_key_file: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings and not self.findings_omitted

    @property
    def events(self) -> int:
        return sum(j.events for j in self.journals)


Key = journal.SigningKey | journal.VerifierKey | journal.HmacKey


def load_key_file(path: Path) -> Key:
    """A key file as a trust anchor: a signing key (its public half), a verifier key, or an
    HMAC-era key (hex), told apart by their text."""
    try:
        text = journal.read_key_text(path).strip()
    except FileNotFoundError:
        raise ReplayInputError(f"no key file at {path}") from None
    except OSError as exc:
        raise ReplayInputError(f"cannot read the key file {path}: {exc.strerror}") from None
    except ValueError as exc:  # a FIFO, a device, a directory, or far too long
        raise ReplayInputError(f"cannot use the key file {path}: {exc}") from None
    try:
        if text.startswith("PRIVATE+KEY+"):
            return journal.SigningKey.parse(text).verifier
        if "+" in text:
            return journal.VerifierKey.find(text)
        return journal.load_legacy_key(path)
    except ValueError as exc:
        raise ReplayInputError(f"cannot use the key file {path}: {exc}") from None


def load_trusted_key(value: str) -> Key:
    """``--trusted-key``: a verifier key (``<name>+<hex ID>+<base64>``), a line that holds one
    (what ``agentteam-replay key`` prints), or a file holding either."""
    if "\0" not in value and Path(value).exists():
        return load_key_file(Path(value))
    try:
        return journal.VerifierKey.find(value)
    except ValueError as exc:
        raise ReplayInputError(f"--trusted-key {value}: no such file, and {exc}") from None


def load_checkpoint_file(path: Path) -> Checkpoint:
    try:
        return journal.load_checkpoint(path)
    except FileNotFoundError:
        raise ReplayInputError(f"no checkpoint file at {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, msgspec.DecodeError) as exc:
        raise ReplayInputError(f"{path} is not a checkpoint ({exc})") from None


def verify(
    paths: Sequence[str | Path],
    *,
    checkpoints: Sequence[str | Path] = (),
    key: Key | bytes | None = None,
    trusted: Sequence[Key] = (),
    trust_recorded_keys: bool = False,
    accept_unverified: bool = False,
    auto_checkpoint: bool = True,
    local_key_file: bool = False,
    decode_unread: bool = True,
    screen: bool = True,
    progress: Progress | None = None,
) -> VerifyResult:
    """Verify journal files: chain, sequence, checkpoints, call grammar, invariants.

    ``checkpoints``: checkpoint files held outside the journals (a truncated tail shows only
    against one); each applies to the journal it names (to the only journal, if one is given).
    With ``auto_checkpoint``, a journal without one uses ``<journal>.checkpoint.json`` if present
    (what the bridge exports: on the same machine, so no witness). ``key`` and ``trusted``: the
    keys whose signatures count (a signing key stands for its public half; an HMAC key for
    HMAC-era checkpoints). ``trust_recorded_keys``: also trust the keys each journal names.
    ``accept_unverified``: count signatures no trusted key made as unchecked instead of failing.
    ``local_key_file``: the trusted keys are this machine's key files, taken for want of a key
    given (``key_file_replaced`` applies; see :mod:`replay._trust`). Without ``decode_unread``,
    a call's payload that no check reads (a response's, a result's: ``UNREAD`` kinds) is not
    decoded, so its ``payload_invalid`` is not found; without ``screen``, no row is screened for
    secrets (``secret_in_payload``, :mod:`replay._secrets`): both for a caller that decodes and
    screens every row itself and verifies again where one fails (``report``).
    Raises ReplayInputError for a file that cannot be used.
    """
    if not paths:
        raise ReplayInputError("no journal given")
    trust = journal.trust_of(key, trusted)
    held = [(str(p), load_checkpoint_file(Path(p))) for p in checkpoints]
    readers = [open_reader(p) for p in journal_files(paths)]
    try:
        findings: list[Finding] = [
            Finding(journal_id=f.journal_id, seq=f.seq, rule="fork", detail=f.detail)
            for f in find_forks(readers)
        ]
        chains = segment_chains(readers)
        assigned: dict[int, list[tuple[str, Checkpoint]]] = {i: [] for i in range(len(chains))}
        for label, cp in held:
            matches = [i for i, c in enumerate(chains) if c[0].journal_id == cp.journal_id]
            if not matches and len(chains) == 1:
                matches = [0]  # reported as another journal's checkpoint against the only one
            if not matches:
                findings.append(
                    Finding(
                        journal_id=cp.journal_id,
                        seq=None,
                        rule="checkpoint_journal_mismatch",
                        detail=f"{label} names journal {cp.journal_id}, not given",
                    )
                )
            for i in matches:
                assigned[i].append((label, cp))
        beside: set[int] = set()
        if auto_checkpoint:
            for i, chain in enumerate(chains):
                exported = _exported_checkpoint(chain)
                if not assigned[i] and exported is not None:
                    assigned[i].append(exported)
                    beside.add(i)
        total = sum(r.head()[0] - r.segment.first_seq + 1 for r in readers)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        reports: list[JournalReport] = []
        in_doubt: dict[tuple[str, str], InDoubtCall] = {}
        omitted = 0
        for i, chain in enumerate(chains):
            check = _FileCheck(
                chain,
                assigned[i],
                trust,
                trust_recorded_keys=trust_recorded_keys,
                accept_unverified=accept_unverified,
                held_beside=i in beside,
                local_keys=local_key_ids([key, *trusted]) if local_key_file else None,
                decode_unread=decode_unread,
                screen=screen,
            )
            report = check.run(tick if progress is not None else None)
            reports.append(report)
            findings += check.findings
            omitted += check.omitted
            for call in check.events.in_doubt:
                in_doubt.setdefault((call.journal_id, call.call_id), call)
        unique = list(dict.fromkeys(findings))
        if len(unique) > MAX_FINDINGS:
            omitted += len(unique) - MAX_FINDINGS
            unique = unique[:MAX_FINDINGS]
        return VerifyResult(
            journals=reports,
            findings=unique,
            in_doubt=sorted(in_doubt.values(), key=lambda c: (c.journal_id, c.seq)),
            findings_omitted=omitted,
            trusted_keys=trust.describe(),
            trusted_local_key_file=local_key_file,
        )
    finally:
        for reader in readers:
            reader.close()


def segment_chains(readers: Sequence[Reader]) -> list[list[Reader]]:
    """The files grouped into chains to verify: the segments of one journal in seq order make
    one chain (a missing one shows at the link); a second file starting at the same seq (a copy
    of a file) makes a chain of its own, as every copy must verify on its own."""
    by_journal: dict[str | None, list[Reader]] = {}
    for reader in readers:
        by_journal.setdefault(reader.journal_id, []).append(reader)
    chains: list[list[Reader]] = []
    for group in by_journal.values():
        group.sort(key=lambda r: (r.segment.first_seq, r.segment.index, str(r.path)))
        main: list[Reader] = []
        starts: set[int] = set()
        for reader in group:
            if reader.segment.first_seq in starts:
                chains.append([reader])
            else:
                starts.add(reader.segment.first_seq)
                main.append(reader)
        chains.append(main)
    order = {id(reader): i for i, reader in enumerate(readers)}
    chains.sort(key=lambda c: min(order[id(r)] for r in c))  # in the order given
    return chains


def _link_checkpoint(reader: Reader) -> Checkpoint | None:
    """The previous segment's closing checkpoint, as a later segment's first event names it."""
    if reader.segment.index == 1:
        return None
    row = reader.first_row()
    if row is None or row[6] != "segment_started":
        return None
    payload, problem = decode_payload(row[6], row[7], row[14])
    if problem or not isinstance(payload, journal.SegmentStarted):
        return None
    return payload.previous_checkpoint


def _exported_checkpoint(chain: Sequence[Reader]) -> tuple[str, Checkpoint] | None:
    """The checkpoint the bridge exports beside the journal (``<journal>.checkpoint.json``, one
    per journal, named after its first segment), or beside a file given alone."""
    candidates = dict.fromkeys(
        [Path(f"{journal.base_path(r.path)}.checkpoint.json") for r in chain]
        + [Path(f"{r.path}.checkpoint.json") for r in chain]
    )
    found = [(str(p), load_checkpoint_file(p)) for p in candidates if p.exists()]
    return max(found, key=lambda item: item[1].seq) if found else None


class _FileCheck:
    """One journal's pass over its files (its segments, in seq order, or one file): feed every
    row to the chain verifier and to the call checks, and check each segment's link."""

    def __init__(
        self,
        segments: list[Reader],
        held: list[tuple[str, Checkpoint]],
        trust: journal.Trust,
        *,
        trust_recorded_keys: bool,
        accept_unverified: bool,
        held_beside: bool,
        local_keys: set[str] | None = None,
        decode_unread: bool = True,
        screen: bool = True,
    ):
        self.segments = segments
        self.local_keys = local_keys
        self._excuses: list[tuple[int, str]] = []  # (seq, kind) of events excusing missing data
        self._prunes: list[tuple[int, list[tuple[int, str]]]] = []  # (seq, pruned ends)
        self._erasure_named: set[int] = set()  # seqs payload_erased events name
        self.journal_id = segments[0].journal_id
        self.held = held
        self.trust = trust
        self.trust_recorded_keys = trust_recorded_keys
        self.accept_unverified = accept_unverified
        self.held_beside = held_beside
        self.findings: list[Finding] = []
        self.omitted = 0
        # The first file here starts after seq 1 (a pruned start, or segment_missing).
        self.events = EventChecks(
            self.journal_id,
            self.report,
            starts_late=segments[0].segment.first_seq > 1,
            decode_unread=decode_unread,
            screen=screen,
        )

    def report(self, seq: int | None, rule: str, detail: str, call_id: str | None = None) -> None:
        if len(self.findings) < MAX_FINDINGS:
            finding = Finding(
                journal_id=self.journal_id, seq=seq, rule=rule, detail=detail, call_id=call_id
            )
            self.findings.append(finding)
        else:
            self.omitted += 1

    def run(self, tick: Any) -> JournalReport:
        segments = self.segments
        first = segments[0].segment
        # A journal whose earlier segments are not here starts from its first file's link.
        start_seq = first.first_seq - 1
        start_hash = first.prev_hash or journal.GENESIS_HASH
        chain = journal.ChainVerifier(
            self.journal_id,
            start_seq=start_seq,
            start_hash=start_hash,
            check_payloads=False,
            max_findings=MAX_FINDINGS,
        )
        stored: list[tuple[str, Checkpoint]] = []
        keys: list[tuple[int, str]] = []
        for reader in segments:
            where = f" of {reader.path.name}" if len(segments) > 1 else ""
            stored += [
                (f"stored checkpoint #{i + 1}{where}", cp)
                for i, cp in enumerate(reader.checkpoints())
            ]
            at = max(reader.segment.first_seq - 1, 0)
            keys += [(max(seq, at), vkey) for seq, vkey in reader.recorded_keys()]
            link = _link_checkpoint(reader)
            if link is not None:
                stored.append((f"closing checkpoint named by {reader.path.name}", link))
        merkle = all(r.merkle for r in segments)
        held = self.held
        if merkle:  # a bare note's root line is the tree hash
            hash_at = segments[0].hash_at
            held = [(label, journal.tree_checkpoint(cp, hash_at(cp.seq))) for label, cp in held]
        checkpoints = journal.CheckpointCheck(
            chain,
            held + stored,
            self.trust,
            recorded_keys=keys,
            trust_recorded_keys=self.trust_recorded_keys,
            accept_unverified=self.accept_unverified,
            start_seq=start_seq,
            start_hash=start_hash,
            roots_checked=merkle,
        )
        tree = None
        if merkle:  # a v2 journal: the Merkle log too, from the first file's border on
            first_file = segments[0]
            tree = journal.start_tree(
                chain.report,
                first.first_seq,
                start_seq,
                first_file.stored_hash,
                held + stored,
                self.journal_id,
            )
        pending = 0
        previous: Reader | None = None
        check_event = self.events.check_event
        fused = journal.IntegrityPass(chain, checkpoints, tree)
        for reader in segments:
            follows = None  # a later segment's first row must follow the previous one's last
            if previous is not None:
                follows = functools.partial(self._check_link, chain, previous, reader)
            for row in fused.rows(reader.stored_values(leaves=tree is not None), follows):
                check_event(row)
                if row[6] in _NOTED:
                    self._note(row, checkpoints)
                pending += 1
                if tick is not None and pending == PROGRESS_EVERY:
                    tick(pending)
                    pending = 0
            previous = reader
        if tick is not None and pending:
            tick(pending)
        checkpoints.finish()
        signed = checkpoints.signed_through
        pruned_through = 0
        if start_seq > 0:
            # A prune excuses the missing start only under a trusted checkpoint.
            pruned = {end for seq, ends in self._prunes if seq <= signed for end in ends}
            if (start_seq, start_hash) in pruned:
                pruned_through = start_seq  # the first segments were pruned, as journaled
            else:
                self._check_start(segments[0], start_seq)
        live = journal.held_by_a_writer(segments[-1].path)
        policy, unsigned = signed_history_findings(
            first_seq=start_seq + 1, head_seq=chain.seq, signed_through=signed
        )
        policy += excuse_findings(self._excuses, signed)
        if self.local_keys is not None:
            policy += key_file_findings(keys, [cp for _, cp in self.held + stored], self.local_keys)
        for seq, rule, detail in policy:
            self.report(seq, rule, detail)
        for seq in chain.erased:
            if seq not in self._erasure_named:
                self.report(seq, "erasure_unrecorded", "erased; no payload_erased event names it")
        last = segments[-1]
        if last.segment.next_file is not None:
            self.report(
                chain.seq + 1,
                "segment_missing",
                f"{last.path.name} was rolled over: the journal goes on in "
                f"{last.segment.next_file}, which is not here",
            )
        self.events.end_of_stream()
        self.omitted += chain.findings_omitted
        integrity = [
            Finding(journal_id=self.journal_id, seq=f.seq, rule=f.rule, detail=f.detail)
            for f in chain.findings
        ]
        self.findings = sorted(
            integrity + self.findings, key=lambda f: (f.seq is None, f.seq or 0, f.rule)
        )
        given = self.held[0] if self.held else None
        return JournalReport(
            path=str(segments[0].path),
            journal_id=self.journal_id,
            events=chain.count,
            head_seq=chain.seq,
            head_hash=chain.hash,
            calls=self.events.calls,
            checkpoints_checked=checkpoints.checked,
            signatures_checked=checkpoints.signatures_checked,
            signatures_unchecked=checkpoints.signatures_unchecked,
            held_checkpoint=None if given is None else given[0],
            held_checkpoint_seq=None if given is None else given[1].seq,
            held_checkpoint_beside=self.held_beside,
            last_checkpoint_seq=checkpoints.last_seq,
            recorded_keys=[vkey for _, vkey in checkpoints.recorded_keys],
            segments=[str(r.path) for r in segments] if len(segments) > 1 else [],
            first_seq=start_seq + 1,
            pruned_through=pruned_through,
            log_version=2 if merkle else 1,
            leaf_store=_leaf_store(segments) if merkle else None,
            signed_through=signed,
            unsigned_tail=unsigned,
            live=live,
            erased_seqs=chain.erased,
        )

    # --- segments ---------------------------------------------------------------------

    def _check_link(
        self, chain: journal.ChainVerifier, previous: Reader | None, reader: Reader, row: Any
    ) -> None:
        """The first row of a later segment must follow the previous segment's last event."""
        seq, prev_hash, name = row[0], row[15], reader.path.name
        before = "the previous segment" if previous is None else previous.path.name
        if seq > chain.seq + 1:
            self.report(
                seq,
                "segment_missing",
                f"seqs {chain.seq + 1}..{seq - 1} are missing: {name} follows "
                f"{reader.segment.prev_file or 'another segment'}, not {before}",
            )
        elif seq == chain.seq + 1 and prev_hash != chain.hash:
            self.report(
                seq,
                "segment_link_broken",
                f"{name} follows a segment whose last event is not {before}'s (a segment "
                "replaced or rewritten)",
            )
        elif row[6] != "segment_started":
            self.report(seq, "segment_link_broken", f"{name} does not begin with segment_started")
        # Go on from the stored link, so one broken link is one finding, at its seq.
        if seq > chain.seq:
            chain.seq, chain.hash = seq - 1, prev_hash

    def _note(self, row: Any, checkpoints: journal.CheckpointCheck) -> None:
        """An event verify takes note of: an excuse for missing data, or a key rotation."""
        kind = row[6]
        payload, problem = decode_payload(kind, row[7], row[14])
        if problem:
            return  # payload_invalid
        if kind in EXCUSES or kind == "payload_erased":
            self._excuses.append((row[0], kind))
        if isinstance(payload, journal.PayloadErased):
            self._erasure_named.update(payload.seqs)
        if isinstance(payload, journal.SegmentsPruned):
            self._prunes.append((row[0], [(s.last_seq, s.last_hash) for s in payload.segments]))
        elif isinstance(payload, journal.KeyRotated):
            checkpoints.note_rotation(row[0], payload.previous)

    def _check_start(self, first: Reader, start_seq: int) -> None:
        """A journal that starts after seq 1 lacks its earlier segments, and no
        ``segments_pruned`` event in it names the one before its first file."""
        self.report(
            start_seq + 1,
            "segment_missing",
            f"the journal starts at seq {start_seq + 1} in {first.path.name}: seqs 1..{start_seq} "
            f"(from {first.segment.prev_file or 'earlier segments'} back) are not here",
        )


def _leaf_store(segments: Sequence[journal.Reader]) -> str | None:
    """The leaf store of a v2 journal's files: one name, or "mixed"."""
    stores = {r.leaf_store for r in segments}
    return stores.pop() if len(stores) == 1 else "mixed"
