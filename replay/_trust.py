"""What ``verify`` takes on trust, and no further: the signed history, its unsigned tail, the
events that excuse missing data, and this machine's key file.

A checkpoint *counts* when its signature verifies under a trusted key (or, with
``--accept-unverified``, is present at all) and the journal holds its hash at its seq; it covers
every event up to that seq (each hash covers the one before it). ``signed_through`` is the
highest seq a counted checkpoint covers. Rules:

=====================  ================================================================
``unsigned_history``   no counted checkpoint covers any event of the journal: its
                       signatures were stripped, or it was forged without any. A writer
                       signs its first commit, so no journal is ever without one, live or
                       not (a lock on the file proves nothing: anyone can take one)
``unsigned_tail``      more than ``CHECKPOINT_EVERY`` (1000) events after the last counted
                       checkpoint. A writer signs its first commit, each commit that reaches
                       a multiple of 1000 events, every 30 s while it runs, after a journal
                       gap and on close,
                       so neither a live session nor one a crash cut short leaves more. A
                       shorter tail is no finding: its count is reported
                       (``JournalReport.unsigned_tail``), as those events are signed by none
``excuse_unsigned``    an event that excuses missing data (``segments_pruned``: earlier
                       segments are gone; ``journal_gap``: events of some calls were lost)
                       that no counted checkpoint covers: anyone who can write the file
                       could have appended it. A prune it names is not accepted (the
                       missing segments are ``segment_missing``)
``key_file_replaced``  only when the trust is this machine's key file (no ``--trusted-key``
                       / ``--key``): the journal rotated to this machine's key
                       (``key_rotated``) from a key the machine does not hold, the key its
                       earlier checkpoints name. A key file replaced by someone who then
                       rewrote the history looks exactly like that; ``--trusted-key``
                       with the key you hold accepts the rotation
=====================  ================================================================

A rotation is *chain-signed*: the ``key_rotated`` event is in the hash chain, so a counted
checkpoint at or after it vouches for the key it names as ``previous``, for the checkpoints
before it (:class:`journal.CheckpointCheck` checks those under it). A journal rewritten whole
and signed by a replaced key file names no earlier key: from the file alone it is a journal
of another machine, which only a key held elsewhere (``--trusted-key``) or a witness tells.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from agentteam_task_bridge import journal

__all__ = [
    "EXCUSES",
    "UNSIGNED_TAIL_LIMIT",
    "TrustFinding",
    "key_file_findings",
    "local_key_ids",
    "signed_history_findings",
]

# The events that excuse data missing from the journal.
EXCUSES: Final = frozenset({"segments_pruned", "journal_gap"})
UNSIGNED_TAIL_LIMIT: Final = journal.CHECKPOINT_EVERY

TrustFinding = tuple[int | None, str, str]  # (seq, rule, detail)


def signed_history_findings(
    *, first_seq: int, head_seq: int, signed_through: int
) -> tuple[list[TrustFinding], int]:
    """The findings on a journal's signed history (events first_seq..head_seq) and the count
    of its unsigned tail."""
    if head_seq < first_seq:
        return [], 0  # no event here
    if signed_through < first_seq:
        unsigned = head_seq - first_seq + 1
        detail = (
            f"no checkpoint signed by a trusted key covers seqs {first_seq}..{head_seq}"
            f" ({unsigned} events): signatures stripped, or a journal written without them"
        )
        return [(first_seq, "unsigned_history", detail)], unsigned
    tail = max(head_seq - signed_through, 0)
    if tail <= UNSIGNED_TAIL_LIMIT:
        return [], tail
    detail = (
        f"{tail} events after the last trusted checkpoint (seq {signed_through}) are signed by"
        f" none: more than a writer leaves ({UNSIGNED_TAIL_LIMIT})"
    )
    return [(signed_through + 1, "unsigned_tail", detail)], tail


def excuse_findings(excuses: Iterable[tuple[int, str]], signed_through: int) -> list[TrustFinding]:
    """``excuse_unsigned`` for each excusing event (seq, kind) past ``signed_through``."""
    return [
        (
            seq,
            "excuse_unsigned",
            f"{kind} at seq {seq} is covered by no trusted checkpoint: what it excuses counts"
            " as missing",
        )
        for seq, kind in excuses
        if seq > signed_through
    ]


def local_key_ids(keys: Iterable[object]) -> set[str]:
    """The key ids (as checkpoints name their signers) of the keys this machine holds."""
    ids: set[str] = set()
    for key in keys:
        if isinstance(key, journal.SigningKey):
            key = key.verifier
        if isinstance(key, journal.VerifierKey | journal.HmacKey):
            ids.add(key.key_id)
    return ids


def key_file_findings(
    recorded_keys: Sequence[tuple[int, str]],
    checkpoints: Iterable[journal.Checkpoint],
    local: set[str],
) -> list[TrustFinding]:
    """``key_file_replaced`` at each rotation to a key of this machine from a key it does not
    hold: the key named before it, or one its earlier checkpoints name."""
    found: list[TrustFinding] = []
    signers = sorted((cp.seq, cp.key_id) for cp in checkpoints)
    named_before: str | None = None
    for seq, vkey in recorded_keys:
        named = _key_id(vkey)
        if seq > 0 and named in local:
            earlier = {kid for at, kid in signers if at < seq}
            if named_before is not None:
                earlier.add(named_before)
            foreign = sorted(earlier - local)
            if foreign:
                found.append(
                    (
                        seq,
                        "key_file_replaced",
                        f"the journal rotated at seq {seq} to this machine's key {named} from"
                        f" {', '.join(foreign)}, which this machine does not hold: its key file"
                        " was replaced (or the key rotated); pass --trusted-key with the key you"
                        " trust to accept it",
                    )
                )
        named_before = named
    return found


def _key_id(vkey: str) -> str:
    return "+".join(vkey.split("+", 2)[:2])  # <name>+<hex ID> of a verifier key
