"""``prove`` and ``check-proof``: RFC 6962 proofs about a v2 journal, for a third party.

``prove JOURNAL --seq N`` shows event N (its leaf: the envelope and the salted digest of its
payload, never the payload) and its inclusion proof under a signed checkpoint: the journal's
latest checkpoint covering N, or the one given with ``--checkpoint`` (a held one). ``--call ID``
does so for every event of a call; ``--consistency OLD NEW`` proves the tree of OLD events is a
prefix of the tree of NEW. Reads are O(log n) stored hashes (:mod:`journal._merkle`), from the
journal's segment files (a journal rolled over: the file of each hash, or a later file's copy of
the border). ``check-proof FILE --trusted-key KEY`` needs no journal: the checkpoint's signature
under the key, its origin, size and root, and the proof (RFC 9162's checks). A consistency proof
passes only with a signed checkpoint at its new size: any tree can be grown from a signed one, so
an unsigned new root is the prover's word (the old size may be unsigned: the proof binds the old
root to the signed tree's prefix, for a checker who holds it). A call's proof passes only with
events of the call it names, each once.

The JSON fields are fixed (base64 standard, padded; proofs in RFC 6962 order): an inclusion proof
``{origin, tree_size, root_hash, checkpoint, leaf_index, leaf, inclusion_proof}``; a call's
``{origin, tree_size, root_hash, checkpoint, call_id, events: [{leaf_index, leaf,
inclusion_proof}]}``; a consistency proof ``{origin, old_size, new_size, old_root, new_root,
consistency_proof, old_checkpoint, new_checkpoint}`` (the signed notes at those sizes when the
journal holds one, else null).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Checkpoint, Reader

from ._source import ReplayInputError, open_reader

__all__ = [
    "CallProof",
    "ConsistencyProof",
    "EventProof",
    "InclusionProof",
    "ProofCheck",
    "check_proof",
    "prove_call",
    "prove_consistency",
    "prove_seq",
]


class EventProof(msgspec.Struct, frozen=True, kw_only=True):
    leaf_index: int
    leaf: str
    inclusion_proof: list[str]


class InclusionProof(msgspec.Struct, frozen=True, kw_only=True):
    """One event's inclusion in the tree a signed checkpoint commits to."""

    origin: str
    tree_size: int
    root_hash: str
    checkpoint: str
    leaf_index: int
    leaf: str
    inclusion_proof: list[str]


class CallProof(msgspec.Struct, frozen=True, kw_only=True):
    """Every event of one call, each with its inclusion proof under one checkpoint."""

    origin: str
    tree_size: int
    root_hash: str
    checkpoint: str
    call_id: str
    events: list[EventProof]


class ConsistencyProof(msgspec.Struct, frozen=True, kw_only=True):
    """The tree of ``old_size`` events is a prefix of the tree of ``new_size``."""

    origin: str
    old_size: int
    new_size: int
    old_root: str
    new_root: str
    consistency_proof: list[str]
    old_checkpoint: str | None = None
    new_checkpoint: str | None = None


class ProofCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What ``check-proof`` found: ``ok`` when the signature and every proof hold."""

    kind: str  # inclusion, call, consistency
    origin: str
    key: str  # the key id(s) of the signed checkpoints
    tree_size: int
    checked: int
    problems: list[str]
    leaves: list[dict[str, Any]] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def origin_of(journal_id: str | None) -> str:
    """The journal's checkpoint origin; ReplayInputError for an id no note can hold (a
    newline, a space: journal.origin_line), which no writer makes."""
    try:
        return journal.origin_line(journal_id or "")
    except ValueError as exc:
        raise ReplayInputError(str(exc)) from None


class _Journal:
    """A v2 journal's segment files, opened read-only, in seq order."""

    def __init__(self, readers: list[Reader]) -> None:
        self.readers = readers
        self.journal_id = readers[0].journal_id
        self.origin = origin_of(self.journal_id)
        self.read = journal.files_reader([(r.segment.first_seq, r.stored_hash) for r in readers])

    def head(self) -> int:
        return self.readers[-1].head()[0]

    def held(self, seq: int) -> None:
        """ReplayInputError when the event at ``seq`` is not held here (pruned)."""
        self.reader_of(seq)

    def call_seqs(self, call_id: str) -> list[int]:
        return [s for r in self.readers for s in r.call_seqs(call_id)]

    def reader_of(self, seq: int) -> Reader:
        holding = [r for r in self.readers if r.segment.first_seq <= seq]
        if not holding:
            raise ReplayInputError(f"event {seq} was pruned: its segment is not here")
        return holding[-1]

    def latest_checkpoint(self) -> Checkpoint | None:
        found = [cp for r in self.readers for cp in r.tree_checkpoints(latest=True)]
        return max(found, key=lambda cp: cp.seq, default=None)

    def notes_at(self, *sizes: int) -> dict[int, str]:
        found = [cp for r in self.readers for cp in r.tree_checkpoints(seqs=sizes)]
        return {cp.seq: cp.note() for cp in found}

    def root(self, size: int) -> bytes:
        try:
            return journal.tree_hash(size, self.read)
        except journal.ProofError as exc:
            raise ReplayInputError(str(exc)) from None

    def leaf(self, seq: int) -> bytes:
        found = self.reader_of(seq).leaf(seq)
        if found is None:
            raise ReplayInputError(f"no event {seq} in {self.journal_id}")
        return found


@contextmanager
def _open(path: Path) -> Iterator[_Journal]:
    if not path.is_file():
        raise ReplayInputError(f"no journal file at {path} (prove reads one journal's file)")
    base = journal.base_path(path)
    files = [p for _, p in journal.segment_files(base)] or [path]
    readers: list[Reader] = []
    try:
        for file in files:
            readers.append(open_reader(file))
        ids = {r.journal_id for r in readers}
        if len(ids) != 1:
            raise ReplayInputError(f"the segment files of {base} name different journals")
        if not all(r.merkle for r in readers):
            raise ReplayInputError(
                f"{path} is a v1 journal (chain only, no proofs): it was written before the "
                "Merkle log; verify checks it, but prove cannot"
            )
        readers.sort(key=lambda r: r.segment.first_seq)
        yield _Journal(readers)
    finally:
        for reader in readers:
            reader.close()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _covering(log: _Journal, seq: int, held: Path | None) -> tuple[Checkpoint, bytes]:
    """The signed checkpoint to prove against and its root: the held one, else the latest."""
    if held is not None:
        from ._verify import load_checkpoint_file

        cp = load_checkpoint_file(held)
        if cp.journal_id != log.journal_id:
            raise ReplayInputError(f"{held} is journal {cp.journal_id}'s, not {log.journal_id}'s")
    else:
        latest = log.latest_checkpoint()
        if latest is None:
            raise ReplayInputError(f"{log.journal_id} holds no signed Merkle checkpoint yet")
        cp = latest
    if cp.seq < seq:
        raise ReplayInputError(
            f"the checkpoint is at size {cp.seq}: event {seq} is after it (the writer signs "
            "its first commit, every 1000 events, 30 s, and at close)"
        )
    if cp.seq > log.head():
        raise ReplayInputError(
            f"the checkpoint names size {cp.seq}; the journal ends at {log.head()}"
        )
    root = log.root(cp.seq)
    if root.hex() != cp.signed_root:
        raise ProofMismatch(
            f"the journal's tree hash at size {cp.seq} is not the checkpoint's signed root: "
            "the journal is not the one the checkpoint signed"
        )
    return cp, root


class ProofMismatch(Exception):
    """The journal does not match the checkpoint asked for (exit 1, not an input error)."""


def _event(log: _Journal, seq: int, size: int) -> EventProof:
    try:
        path = journal.inclusion_proof(seq - 1, size, log.read)
    except journal.ProofError as exc:
        raise ReplayInputError(str(exc)) from None
    return EventProof(
        leaf_index=seq - 1, leaf=_b64(log.leaf(seq)), inclusion_proof=[_b64(h) for h in path]
    )


def prove_seq(path: Path, seq: int, *, checkpoint: Path | None = None) -> InclusionProof:
    with _open(path) as log:
        return log_seq(log, seq, checkpoint)


def log_seq(log: _Journal, seq: int, checkpoint: Path | None) -> InclusionProof:
    """``prove --seq`` over an opened log (these files, or the fleet store's copy)."""
    if not 1 <= seq <= log.head():
        raise ReplayInputError(f"no event {seq}: the journal holds 1..{log.head()}")
    log.held(seq)  # a pruned event says so
    cp, root = _covering(log, seq, checkpoint)
    event = _event(log, seq, cp.seq)
    return InclusionProof(
        origin=log.origin,
        tree_size=cp.seq,
        root_hash=_b64(root),
        checkpoint=cp.note(),
        leaf_index=event.leaf_index,
        leaf=event.leaf,
        inclusion_proof=event.inclusion_proof,
    )


def prove_call(path: Path, call_id: str, *, checkpoint: Path | None = None) -> CallProof:
    with _open(path) as log:
        return log_call(log, call_id, checkpoint)


def log_call(log: _Journal, call_id: str, checkpoint: Path | None) -> CallProof:
    """``prove --call`` over an opened log (these files, or the fleet store's copy)."""
    seqs = log.call_seqs(call_id)
    if not seqs:
        raise ReplayInputError(f"no call {call_id} in {log.journal_id}")
    cp, root = _covering(log, max(seqs), checkpoint)
    return CallProof(
        origin=log.origin,
        tree_size=cp.seq,
        root_hash=_b64(root),
        checkpoint=cp.note(),
        call_id=call_id,
        events=[_event(log, s, cp.seq) for s in sorted(set(seqs))],
    )


def prove_consistency(path: Path, old: int, new: int) -> ConsistencyProof:
    with _open(path) as log:
        return log_consistency(log, old, new)


def log_consistency(log: _Journal, old: int, new: int) -> ConsistencyProof:
    """``prove --consistency`` over an opened log (these files, or the fleet store's copy)."""
    if not 0 < old <= new <= log.head():
        raise ReplayInputError(
            f"sizes must be 1 <= OLD <= NEW <= {log.head()} (the journal's events)"
        )
    try:
        proof = journal.consistency_proof(old, new, log.read)
    except journal.ProofError as exc:
        raise ReplayInputError(str(exc)) from None
    notes = log.notes_at(old, new)
    return ConsistencyProof(
        origin=log.origin,
        old_size=old,
        new_size=new,
        old_root=_b64(log.root(old)),
        new_root=_b64(log.root(new)),
        consistency_proof=[_b64(h) for h in proof],
        old_checkpoint=notes.get(old),
        new_checkpoint=notes.get(new),
    )


# --- check-proof: no journal, the proof file and a key ---------------------------------------


def _hash(text: object, what: str) -> bytes:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except (binascii.Error, ValueError):
        raise ReplayInputError(f"{what} is not base64") from None
    if len(raw) != 32:
        raise ReplayInputError(f"{what} is not a SHA-256 hash (32 bytes)")
    return raw


def _note(text: object, keys: _Keys, problems: list[str], what: str) -> Checkpoint:
    if not isinstance(text, str):
        raise ReplayInputError(f"{what} is not a signed note")
    try:
        cp = Checkpoint.from_note(text)
    except ValueError as exc:
        raise ReplayInputError(f"{what}: {exc}") from None
    if cp.note() != text:
        problems.append(f"{what}: the note is not exactly origin, size, root and one signature")
    key = keys.get(cp.key_id)
    if key is None:
        problems.append(f"{what}: signed by {cp.key_id}, not a trusted key")
    elif not cp.check(key):
        problems.append(f"{what}: the signature does not verify under {key.key_id}")
    return cp


_Keys = dict[str, journal.VerifierKey]


def check_proof(path: Path, trusted: Sequence[journal.VerifierKey]) -> ProofCheck:
    """Check a ``prove --json`` file with the public key alone (RFC 9162 2.1.3.2 / 2.1.4.2)."""
    try:
        doc = msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        raise ReplayInputError(f"no proof file at {path}") from None
    except (OSError, msgspec.DecodeError) as exc:
        raise ReplayInputError(f"{path} is not a proof ({exc})") from None
    if not isinstance(doc, dict):
        raise ReplayInputError(f"{path} is not a proof (a JSON object)")
    problems: list[str] = []
    origin = str(doc.get("origin", ""))
    keys = {k.key_id: k for k in trusted}
    try:
        if "consistency_proof" in doc:
            return _check_consistency(doc, keys, origin, problems)
        return _check_inclusion(doc, keys, origin, problems)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayInputError(f"{path} is not a proof (missing or bad field {exc})") from None


def _check_signed(
    cp: Checkpoint, origin: str, size: int, root: bytes, problems: list[str], what: str
) -> None:
    if f"{journal.ORIGIN_PREFIX}{cp.journal_id}" != origin:
        problems.append(f"{what}: its origin is not {origin}")
    if cp.seq != size:
        problems.append(f"{what}: its size is {cp.seq}, the proof's {size}")
    if cp.signed_root != root.hex():
        problems.append(f"{what}: its root is not the proof's root")


def _check_inclusion(
    doc: dict[str, Any], keys: _Keys, origin: str, problems: list[str]
) -> ProofCheck:
    size, root = int(doc["tree_size"]), _hash(doc["root_hash"], "root_hash")
    cp = _note(doc["checkpoint"], keys, problems, "checkpoint")
    _check_signed(cp, origin, size, root, problems, "checkpoint")
    events = doc["events"] if "events" in doc else [doc]
    leaves: list[dict[str, Any]] = []
    for event in events:
        index = int(event["leaf_index"])
        leaf = base64.b64decode(str(event["leaf"]), validate=True)
        proof = [_hash(h, "an inclusion proof hash") for h in event["inclusion_proof"]]
        if not journal.verify_inclusion(index, size, journal.leaf_hash(leaf), proof, root):
            problems.append(f"leaf {index}: the inclusion proof does not lead to the root")
        try:
            shown = msgspec.json.decode(leaf)
        except msgspec.DecodeError:
            shown = None
        if not isinstance(shown, dict) or shown.get("seq") != index + 1:
            problems.append(f"leaf {index}: it is not the event at seq {index + 1}")
            shown = {}
        elif "events" in doc and shown.get("call_id") != doc.get("call_id"):
            # A call's proof vouches for that call: another call's events are not its story.
            problems.append(f"leaf {index}: an event of another call, not {doc.get('call_id')}")
        elif shown in leaves:
            problems.append(f"leaf {index}: listed twice")
        leaves.append(shown)
    return ProofCheck(
        kind="call" if "events" in doc else "inclusion",
        origin=origin,
        key=cp.key_id,
        tree_size=size,
        checked=len(events),
        problems=problems,
        leaves=leaves,
    )


def _check_consistency(
    doc: dict[str, Any], keys: _Keys, origin: str, problems: list[str]
) -> ProofCheck:
    old, new = int(doc["old_size"]), int(doc["new_size"])
    old_root, new_root = _hash(doc["old_root"], "old_root"), _hash(doc["new_root"], "new_root")
    proof = [_hash(h, "a consistency proof hash") for h in doc["consistency_proof"]]
    if not journal.verify_consistency(old, new, old_root, new_root, proof):
        problems.append(f"the consistency proof does not lead from size {old} to {new}")
    signed: list[str] = []
    for field, size, root in (("old_checkpoint", old, old_root), ("new_checkpoint", new, new_root)):
        if doc.get(field) is not None:
            cp = _note(doc[field], keys, problems, field)
            _check_signed(cp, origin, size, root, problems, field)
            signed.append(cp.key_id)
    if doc.get("new_checkpoint") is None:
        # Any tree extends a signed one: only a signed new root makes the proof say anything.
        problems.append(
            f"size {new} has no signed checkpoint: its root is the prover's word (a tree grown"
            f" from the one at size {old} by anyone); prove between checkpointed sizes"
        )
    return ProofCheck(
        kind="consistency",
        origin=origin,
        key=", ".join(dict.fromkeys(signed)),
        tree_size=new,
        checked=1,
        problems=problems,
    )
