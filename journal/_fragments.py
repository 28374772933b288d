"""Fragments of known secrets: the runs of a secret a text may hold once it was cut, re-cased or
re-spelled, found and removed whole.

A secret the writer or the bridge was told about (the bearer token, the token command's output,
a proxy or URL password) leaks not only whole: a cut keeps a prefix, a conversion to snake_case
inserts ``_`` and lower-cases, a header may upper-case it. So a text is compared with each known
secret in **folded** form: lower-cased, with every ``_`` and ``-`` removed. A **fragment** is a run
of at least ``FRAGMENT_RUN`` (10) folded characters of a secret, found in the folded text: every
run of 12 characters of the secret holding at most two ``_``/``-``, in any letter case, with
``_``/``-`` added or removed (snake_case, kebab-case, camelCase of it), at any offset of the
secret (a prefix, a suffix, the middle). Not found: a secret re-encoded (base64, percent-escapes,
reversed), or cut to fewer than ten letters and digits. A secret folding to fewer than
``FRAGMENT_RUN`` characters has no fragments: it is only replaced whole.

Invariants: ``Fragments.hits(text)`` is False only if ``remove(text)`` leaves it unchanged (the
probes below are a sufficient screen); ``remove`` replaces each maximal run, and the ``_``/``-``
inside it, by the marker, so no run of ``FRAGMENT_RUN`` folded characters of a secret survives.

The screen: each secret's folded form cut into probes of ``_PROBE`` characters every ``_STRIDE``
characters. Any run of ``FRAGMENT_RUN`` folded characters holds a whole probe
(``FRAGMENT_RUN >= _PROBE + _STRIDE - 1``), so a text holding no probe holds no fragment; a probe
found is extended left and right along the secret to the whole run.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FRAGMENT_RUN", "Fragments", "fold"]

FRAGMENT_RUN: Final = 10
_PROBE: Final = 7
_STRIDE: Final = 4
assert FRAGMENT_RUN >= _PROBE + _STRIDE - 1
_SEPARATORS: Final = "_-"


def fold(text: str) -> str:
    """Lower-cased, `_` and `-` removed: the form in which fragments are compared."""
    return text.lower().replace("_", "").replace("-", "")


def _fold_bytes(raw: bytes) -> bytes:
    return raw.lower().translate(None, b"_-")


class Fragments:
    """The folded secrets and their probes; what a text holds of them, and that text without it."""

    def __init__(self) -> None:
        self._folded: list[str] = []
        self.probes: list[str] = []
        self._probes_bytes: list[bytes] = []
        self._ascii = True

    def __bool__(self) -> bool:
        return bool(self._folded)

    def add(self, secret: str) -> None:
        folded = fold(secret)
        if len(folded) < FRAGMENT_RUN or folded in self._folded:
            return
        self._folded.append(folded)
        self._ascii = self._ascii and folded.isascii()
        starts = range(0, len(folded) - _PROBE + 1, _STRIDE)
        for probe in dict.fromkeys(folded[k : k + _PROBE] for k in starts):
            if probe not in self.probes:
                self.probes.append(probe)
                self._probes_bytes.append(probe.encode("utf-8", "surrogatepass"))

    def hits_folded(self, folded: str) -> bool:
        """Whether a text already folded (`fold`) may hold a fragment."""
        for probe in self.probes:
            if probe in folded:
                return True
        return False

    def hits(self, text: str) -> bool:
        """Whether `remove` could change `text` (a screen: never False where it would)."""
        return bool(self.probes) and self.hits_folded(fold(text))

    def hits_bytes(self, raw: bytes) -> bool:
        """`hits` of UTF-8 bytes (an upstream body as it came), without decoding ASCII secrets."""
        if not self.probes:
            return False
        if not self._ascii:
            return self.hits(raw.decode("utf-8", "replace"))
        folded = _fold_bytes(raw)
        for probe in self._probes_bytes:
            if probe in folded:
                return True
        return False

    def remove(self, text: str, marker: str) -> str:
        """`text` with every run of FRAGMENT_RUN or more folded characters of a secret replaced by
        `marker` (the run's own `_`/`-` with it)."""
        if not self.hits(text):
            return text
        chars: list[str] = []
        where: list[int] = []  # the index in `text` of each folded character
        for index, char in enumerate(text):
            if char in _SEPARATORS:
                continue
            for low in char.lower():
                chars.append(low)
                where.append(index)
        folded = "".join(chars)
        spans: list[tuple[int, int]] = []
        for secret in self._folded:
            for k in range(0, len(secret) - _PROBE + 1, _STRIDE):
                probe = secret[k : k + _PROBE]
                at = folded.find(probe)
                while at >= 0:
                    start, stop, s_start, s_stop = at, at + _PROBE, k, k + _PROBE
                    while start > 0 and s_start > 0 and folded[start - 1] == secret[s_start - 1]:
                        start, s_start = start - 1, s_start - 1
                    end = len(folded)
                    while stop < end and s_stop < len(secret) and folded[stop] == secret[s_stop]:
                        stop, s_stop = stop + 1, s_stop + 1
                    if stop - start >= FRAGMENT_RUN:
                        spans.append((where[start], where[stop - 1] + 1))
                    at = folded.find(probe, at + 1)
        if not spans:
            return text
        spans.sort()
        out: list[str] = []
        end = 0
        for start, stop in spans:
            if start < end:  # overlapping runs: one marker
                end = max(end, stop)
                continue
            out += (text[end:start], marker)
            end = stop
        out.append(text[end:])
        return "".join(out)
