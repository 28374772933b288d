"""RFC 6962 / RFC 9162 Merkle tree hashing, stored-hash layout and proofs (pure, no I/O).

Rules (stable; any RFC 6962 implementation recomputes them):

* leaf hash ``SHA-256(0x00 || leaf)``, interior node ``SHA-256(0x01 || left || right)``; the tree
  hash of ``n`` leaves splits at ``k``, the largest power of two below ``n`` (RFC 6962 2.1); the
  empty tree's hash is ``SHA-256("")``.
* Stored hashes follow Go's ``golang.org/x/mod/sumdb/tlog``: appending record ``n`` (0-based)
  stores its leaf hash, then the hash of every complete subtree it completes, at consecutive
  indexes from :func:`stored_hash_index` ``(0, n)``; so ``n`` records hold
  :func:`stored_hash_count` ``(n)`` hashes (about two per record), and every complete aligned
  subtree is one stored hash. A tree hash or a proof reads O(log n) of them.
* Proofs are in RFC 6962 order: an inclusion proof (audit path) from the leaf's sibling up, a
  consistency proof as RFC 6962 2.1.2's ``SUBPROOF``. Checks follow RFC 9162 2.1.3.2 and
  2.1.4.2 (iterative, independent of how the proofs were made).

:class:`Frontier` keeps the right border of a growing tree (one hash per set bit of its size):
appending a leaf returns the hashes to store, and the tree hash is a fold of the border.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "EMPTY_ROOT",
    "Frontier",
    "HashReader",
    "ProofError",
    "consistency_proof",
    "frontier_indexes",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "stored_hash_count",
    "stored_hash_index",
    "subtree_indexes",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
_sha256: Final = hashlib.sha256

# Reads stored hashes by index, in the order asked (raises ProofError when one is missing).
HashReader = Callable[[Sequence[int]], list[bytes]]


class ProofError(ValueError):
    """A proof cannot be made (a hash is not stored here) or does not check."""


def leaf_hash(leaf: bytes) -> bytes:
    return _sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def stored_hash_index(level: int, n: int) -> int:
    """The storage index of the hash of the ``n``-th subtree of ``2**level`` leaves (Go tlog):
    its last leaf's index, ``m + m/2 + m/4 + ... = 2m - popcount(m)``, plus ``level``."""
    last = ((n + 1) << level) - 1
    return 2 * last - last.bit_count() + level


def stored_hash_count(n: int) -> int:
    """How many hashes a tree of ``n`` records stores."""
    if n == 0:
        return 0
    count = stored_hash_index(0, n - 1) + 1
    i = n - 1
    while i & 1:
        count += 1
        i >>= 1
    return count


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2): RFC 6962's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def _largest_within(n: int) -> tuple[int, int]:
    """(k, level): the largest power of two ``k = 2**level <= n`` (n >= 1)."""
    level = n.bit_length() - 1
    return 1 << level, level


def subtree_indexes(lo: int, hi: int) -> list[int]:
    """Stored indexes of the complete subtrees that make up leaves [lo, hi), left to right
    (``lo`` aligned as every range the proofs ask for is)."""
    need: list[int] = []
    while lo < hi:
        k, level = _largest_within(hi - lo)
        while lo & (k - 1):  # not aligned at this size: take a smaller subtree
            k, level = k >> 1, level - 1
        need.append(stored_hash_index(level, lo >> level))
        lo += k
    return need


def frontier_indexes(n: int) -> list[tuple[int, int]]:
    """(level, stored index) of the complete subtrees of a tree of ``n`` leaves, left to right:
    what a new segment copies so that everything after it needs no earlier file."""
    out: list[tuple[int, int]] = []
    lo = 0
    for level in range(n.bit_length() - 1, -1, -1):
        if n >> level & 1:
            out.append((level, stored_hash_index(level, lo >> level)))
            lo += 1 << level
    return out


def _fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of consecutive complete subtrees, largest first (RFC 6962 splits fold right)."""
    h = hashes[-1]
    for left in reversed(hashes[:-1]):
        h = node_hash(left, h)
    return h


def _range_hash(lo: int, hi: int, read: HashReader) -> bytes:
    return _fold(read(subtree_indexes(lo, hi)))


def tree_hash(n: int, read: HashReader) -> bytes:
    """The tree hash of the first ``n`` records, from O(log n) stored hashes."""
    return EMPTY_ROOT if n == 0 else _range_hash(0, n, read)


def inclusion_proof(index: int, size: int, read: HashReader) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves (RFC 6962 2.1.1)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    ranges: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    for r_lo, r_hi in reversed(ranges):  # leaf-nearest first
        path.append(_range_hash(r_lo, r_hi, read))
    return path


def consistency_proof(old: int, new: int, read: HashReader) -> list[bytes]:
    """The proof that the tree of ``old`` leaves is a prefix of the tree of ``new`` (RFC 6962
    2.1.2, ``PROOF(m, D[n]) = SUBPROOF(m, D[n], true)``); empty when ``old == new``."""
    if not 0 < old <= new:
        raise ProofError(f"no consistency proof from size {old} to {new}")
    out: list[bytes] = []
    lo, hi, whole = 0, new, True
    while True:
        if old == hi:
            if not whole:
                out.append(_range_hash(lo, hi, read))
            break
        k = _split(hi - lo)
        if old <= lo + k:
            out.append(_range_hash(lo + k, hi, read))
            hi = lo + k
        else:
            out.append(_range_hash(lo, lo + k, read))
            lo, whole = lo + k, False
    out.reverse()
    return out


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 2.1.3.2: whether ``proof`` shows leaf hash ``leaf`` at ``index`` under ``root``."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != 32 or sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 2.1.4.2: whether ``proof`` shows the tree (old, old_root) is a prefix of
    (new, new_root)."""
    if not 0 < old <= new:
        return False
    if old == new:
        return not proof and old_root == new_root
    path = list(proof)
    if any(len(p) != 32 for p in path):
        return False
    if old & (old - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


class Frontier:
    """The right border of a growing tree: the complete subtrees of its size, largest first."""

    __slots__ = ("hashes", "size")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if len(hashes) != size.bit_count():
            raise ValueError(f"a tree of {size} leaves has {size.bit_count()} border hashes")
        self.size = size
        self.hashes = list(hashes)

    @classmethod
    def read(cls, size: int, read: HashReader) -> Frontier:
        return cls(size, read([index for _, index in frontier_indexes(size)]))

    def copy(self) -> Frontier:
        new = Frontier.__new__(Frontier)  # a valid border's copy: no check (once per commit)
        new.size, new.hashes = self.size, self.hashes.copy()
        return new

    def append(self, leaf_hash_: bytes) -> list[bytes]:
        """Add a leaf (its hash); the hashes to store for it, from its storage index on."""
        stored = [leaf_hash_]
        h = leaf_hash_
        n = self.size
        hashes = self.hashes
        while n & 1:  # node_hash, inlined: this runs for every event written and verified
            h = _sha256(b"\x01" + hashes.pop() + h).digest()
            stored.append(h)
            n >>= 1
        hashes.append(h)
        self.size += 1
        return stored

    def apply(self, stored: bytes) -> None:
        """Add a leaf whose stored hashes (what :meth:`append` returned, joined as
        ``event_leaves.tree_hashes`` holds them) are known: no hashing."""
        count = len(stored) // 32
        if len(stored) != 32 * count or count != (~self.size & (self.size + 1)).bit_length():
            raise ValueError("these are not the stored hashes of the next leaf")
        del self.hashes[len(self.hashes) - (count - 1) :]
        self.hashes.append(stored[-32:])
        self.size += 1

    def root(self) -> bytes:
        return EMPTY_ROOT if not self.hashes else _fold(self.hashes)
