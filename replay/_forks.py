"""Forks: two histories under one journal id among the files given, found by their hashes.

Each event's hash covers the one before it, so two files of one journal that both hold seq N
hold the same history up to N exactly when their hashes at N agree. Two files whose seq ranges
overlap (a copy of a file, a backup, a segment and another file starting in its range) are
compared at the last seq both hold; where they differ, a binary search over hashes names the
first seq of the fork (O(log n) indexed reads, no scan). Files whose ranges do not overlap are
segments of one chain, linked (or not) as :mod:`replay._verify` checks.

``verify`` reports each fork as a ``fork`` finding (exit 1). Every other reader refuses the
input (:func:`replay.open_journals`): merging by (journal id, seq) would otherwise pick one of
the two histories silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agentteam_task_bridge.journal import Reader

__all__ = ["Fork", "find_forks"]


class Fork(msgspec.Struct, frozen=True, kw_only=True):
    """Two files holding different events at ``seq`` (and the same before it) of one journal."""

    journal_id: str | None
    seq: int
    first: str
    second: str

    @property
    def detail(self) -> str:
        return (
            f"{self.first} and {self.second} hold two histories of journal {self.journal_id}:"
            f" they differ from seq {self.seq} on"
        )


def find_forks(readers: Sequence[Reader]) -> list[Fork]:
    """Every pair of files of one journal id that hold different events at a common seq."""
    spans: dict[str | None, list[tuple[Reader, int, int]]] = {}
    for reader in readers:
        head = reader.head()[0]
        if head >= reader.segment.first_seq:  # an empty file holds no history
            spans.setdefault(reader.journal_id, []).append((reader, reader.segment.first_seq, head))
    forks: list[Fork] = []
    for journal_id, files in spans.items():
        for i, (a, a_low, a_high) in enumerate(files):
            for b, b_low, b_high in files[i + 1 :]:
                low, high = max(a_low, b_low), min(a_high, b_high)
                if low > high or a.hash_at(high) == b.hash_at(high):
                    continue
                seq = _first_difference(a, b, low, high)
                forks.append(
                    Fork(journal_id=journal_id, seq=seq, first=str(a.path), second=str(b.path))
                )
    return forks


def _first_difference(a: Reader, b: Reader, low: int, high: int) -> int:
    """The lowest seq in low..high where the two files differ (they do at ``high``)."""
    if a.hash_at(low) != b.hash_at(low):
        return low
    while high - low > 1:  # they agree at low, differ at high
        middle = (low + high) // 2
        if a.hash_at(middle) == b.hash_at(middle):
            low = middle
        else:
            high = middle
    return high
