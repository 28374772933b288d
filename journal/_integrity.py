"""One pass over a v2 journal's rows for its chain and its tree, fused where a row is regular.

:class:`IntegrityPass` feeds raw ``Reader.stored_values`` rows (the 17 ``COLUMNS`` then salt,
payload digest and stored hashes) to a :class:`journal.ChainVerifier`, its
:class:`journal.CheckpointCheck` and a :class:`journal._tlog.TreeCheck`, and gives each row's
values back, unchanged, for the caller's own checks (by position: the first 17 are a
:class:`journal.Row`'s). The findings, the counts and the state it leaves are theirs exactly: a
row is checked here, in one function, only while it is *regular* (the values of the writer's
types, a ``ts_wall`` of the writer's shape in a second already parsed, the next seq after the
previous row's hash, the journal's id, a salt that is not the erased one, its hash, payload
digest and stored tree hashes all recomputing); every other row, and every row once the tree
is broken, goes through their own ``feed`` (which names what is wrong), before any state is
changed for it.

Why: ``verify`` spent about 10.5 us an event in the three (the row read with a row factory
written in Python, the row's checks, two encodings built from 31 attribute reads, four
hashes), 2 us of it in calls, attribute reads and tuples, measured on the 100,020-event bench
journal; the report's page waits for ``verify``. Tests hold this pass to the three on
generated, tampered journals (``tests/test_journal_integrity.py``).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import msgspec

from ._canonical import _ROW_TYPES, COLUMNS, ROW_OF, _Canonical, _last_second, row_problem
from ._merkle import Frontier
from ._tlog import _LEAF_OF, TreeCheck, _Leaf
from ._tlog import _encoder as _leaf_encoder
from ._verify import ChainVerifier, CheckpointCheck

__all__ = ["IntegrityPass"]

_WIDTH: Final = len(COLUMNS)
_SALT, _DIGEST, _STORED = _WIDTH, _WIDTH + 1, _WIDTH + 2
# The types of a regular row's values up to the payload (row_problem's set, cut there): each
# value from the payload on is of its type when the pass uses it as regular (the payload's
# ``encode``, ``fromhex`` of the salt raise otherwise; the links, hash, digest and hashes equal
# a ``str`` or ``bytes`` the pass made). A row's first 14 values checked in one lookup, not 20.
_HEAD: Final = COLUMNS.index("payload")
_HEAD_TYPES: Final = frozenset(types[:_HEAD] for types in _ROW_TYPES)
# A raw row's values in each image's field order (sorted names): made in C, not 31 reads.
_CANONICAL_VALUES: Final = operator.itemgetter(
    *(COLUMNS.index(name) for name in _Canonical.__struct_fields__)
)
_LEAF_VALUES: Final = operator.itemgetter(
    *(_DIGEST if f == "payload_sha256" else COLUMNS.index(f) for f in _Leaf.__struct_fields__)
)
_encode_canonical: Final = msgspec.json.Encoder().encode
_encode_leaf: Final = _leaf_encoder.encode
_sha256: Final = hashlib.sha256
_Raw: Final = msgspec.Raw


class IntegrityPass:
    """The chain, checkpoint and tree checks of one journal's rows, fed in seq order."""

    def __init__(
        self, chain: ChainVerifier, checkpoints: CheckpointCheck, tree: TreeCheck | None
    ) -> None:
        if chain._check_payloads:
            raise ValueError("an integrity pass checks no payloads: the caller's checks do")
        self.chain = chain
        self.checkpoints = checkpoints
        self.tree = tree

    def rows(
        self,
        values: Iterable[tuple[Any, ...]],
        first: Callable[[tuple[Any, ...]], None] | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        """Each raw row in ``values`` checked and given back as it is (its first 17 values a
        Row's, by position); ``first(value)`` before the first is checked."""
        chain, tree, checkpoints = self.chain, self.tree, self.checkpoints
        expected = checkpoints._expected
        roots = tree._roots if tree is not None else {}
        frontier = tree.frontier if tree is not None else Frontier()
        hashes = frontier.hashes
        head, types, last_second = _HEAD, _HEAD_TYPES, _last_second
        # One function, its names local: this runs for every event verified.
        for value in values:
            if first is not None:
                first(value)
                first = None
            regular = False
            if tree is not None and not tree.broken and tuple(map(type, value[:head])) in types:
                seq, wall, salt, digest = value[0], value[5], value[_SALT], value[_DIGEST]
                if (
                    seq == chain.seq + 1
                    and seq == frontier.size + 1
                    and value[15] == chain.hash
                    and value[1] == chain.journal_id
                    and salt != ""  # an erased row's (ChainVerifier.feed and TreeCheck.feed's)
                    and (
                        (  # the writer's shape in a second already parsed, as row_problem's
                            wall[:19] == last_second[0]
                            and len(wall) == 27
                            and wall[26] == "Z"
                            and wall[19] == "."
                            and wall[20:26].isdigit()
                            and wall[20:26].isascii()
                        )
                        or row_problem(ROW_OF(value[:_WIDTH])) is None
                    )
                ):
                    try:
                        payload = value[14].encode()
                        canonical = _Canonical(*_CANONICAL_VALUES(value))
                        canonical.payload = _Raw(payload)
                        salted = _sha256(bytes.fromhex(salt))
                        salted.update(payload)
                        regular = (
                            _sha256(_encode_canonical(canonical)).hexdigest() == value[16]
                            and salted.hexdigest() == digest
                        )
                        node = _sha256(b"\x00" + _encode_leaf(_Leaf(*_LEAF_VALUES(value)))).digest()
                    except (TypeError, ValueError, AttributeError, msgspec.EncodeError):
                        regular = False
                    if regular:
                        # The tree's append, the border unchanged until the stored hashes match.
                        size, at = frontier.size, len(hashes)
                        if size & 1:
                            made = [node]
                            while size & 1:
                                at -= 1
                                node = _sha256(b"\x01" + hashes[at] + node).digest()
                                made.append(node)
                                size >>= 1
                            regular = b"".join(made) == value[_STORED]
                        else:  # a left leaf: its hash alone is stored
                            regular = node == value[_STORED]
                        if regular:
                            del hashes[at:]
                            hashes.append(node)
                            frontier.size += 1
                            chain.count += 1
                            chain.seq, chain.hash = seq, value[16]
                            if seq in expected:
                                checkpoints.see(ROW_OF(value[:_WIDTH]))
                            if seq in roots:
                                tree.check_roots_at(seq)
            if not regular:
                row = ROW_OF(value[:_WIDTH])
                leaf = None if value[_SALT] is None else _LEAF_OF(value[_WIDTH:])
                chain.feed(row, leaf)
                checkpoints.see(row)
                if tree is not None:
                    tree.feed(row, leaf)
            yield value
