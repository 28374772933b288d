"""Fragments of known secrets: the runs of a secret a text may hold once it was cut, re-cased or
re-spelled, found and removed whole.

A secret the writer or the bridge was told about (the bearer token, the token command's output, a
proxy or URL password) leaks not only whole: a cut keeps a prefix, a conversion to snake_case
inserts ``_`` and lower-cases, a header may upper-case it. So a text is compared with each known
secret in **folded** form: lower-cased, with every ``_``, ``-`` and NUL removed (an error page in
UTF-16, read as UTF-8, spells an ASCII secret with a NUL after each character). A **fragment** is a
run of at least ``FRAGMENT_RUN`` (10) folded characters of a secret, found in the folded text:
every run of 12 characters of the secret holding at most two ``_``/``-``, in any letter case, with
``_``/``-`` added or removed (snake_case, kebab-case, camelCase of it), at any offset of the secret
(a prefix, a suffix, the middle). A secret folding to ``SHORTEST`` (8) or 9 characters (a short
proxy password) has no fragments but is found **whole** in those same forms (any letter case,
``_``/``-`` added or removed: its whole folded form is its run); one folding to fewer than
``SHORTEST`` is only replaced where it occurs exactly (`journal._redact`).

A secret re-encoded is found too, as a run of its **encoded forms** (``encoded_forms``): base64
(standard and URL-safe alphabets, padded or not, at each of the three alignments a prefix can give
it, e.g. ``Basic`` credentials holding it; the characters its own bits fix) and percent-escapes of
every byte (``%61%74...``, either case of hex). An encoded form's run is as long as the run of
the secret it spells: ``_B64_RUN`` (14) base64 characters (ten of its bytes), ``_PCT_RUN`` (30)
escaped characters (ten bytes). A secret **percent-escaped in part** (what a URL or a form does
to it: ``quote``, ``quote_plus``, ``encodeURIComponent`` escape its reserved characters only, so a
base64 token's ``+``/``/``/``=`` or a password's ``&"<>!`` become ``%2B``... between runs too
short to be fragments) is found in the text's **unescaped view**: each ``%XX`` of an ASCII byte
(or ``%25XX``, escaped twice: a URL in another's query) read as that character (the run then
covers the escape whole), looked at beside the text as it is wherever the text holds a ``%``.
Not found: a secret reversed, hex-encoded, HTML-escaped, ``+`` for a space, or cut to fewer than
ten letters and digits.

Invariants: ``Fragments.hits(text)`` is False only if ``remove(text)`` leaves it unchanged (the
probes below are a sufficient screen); ``remove`` replaces each maximal run, and the ``_``/``-``
inside it, by the marker, so no run of ``FRAGMENT_RUN`` folded characters of a secret (nor of an
encoded form, its own run) survives.

The screen: each secret's folded form (and each encoded form) cut into probes of ``_PROBE``
characters every *stride* characters, the stride chosen per form so that any run as long as the
form's own holds a whole probe (``run >= _PROBE + stride - 1``): a text holding no probe holds
no fragment; a probe found is extended left and right along the form to the whole run.
"""

from __future__ import annotations

import base64
import re
from typing import Final
from urllib.parse import unquote, unquote_to_bytes

__all__ = ["FRAGMENT_RUN", "SHORTEST", "Fragments", "encoded_forms", "fold"]

FRAGMENT_RUN: Final = 10
SHORTEST: Final = 8  # a secret folding to fewer characters is not looked for re-cased or re-spelled
_PROBE: Final = 7
_STRIDE: Final = 4
assert FRAGMENT_RUN >= _PROBE + _STRIDE - 1 and SHORTEST > _PROBE
_B64_RUN: Final = 14  # base64 characters: ten bytes of the secret at least
_PCT_RUN: Final = 30  # `%XX` characters: ten bytes
_SEPARATORS: Final = "_-\x00"
# `%XX` of an ASCII byte; with the escape escaped once more (`%25XX`: a URL in a URL's query).
_ESCAPES: Final = (re.compile(r"%([0-7][0-9A-Fa-f])"), re.compile(r"%(?:25)?([0-7][0-9A-Fa-f])"))


def fold(text: str) -> str:
    """Lower-cased, `_`, `-` and NUL removed: the form in which fragments are compared."""
    return text.lower().replace("_", "").replace("-", "").replace("\x00", "")


def _fold_bytes(raw: bytes) -> bytes:
    return raw.lower().translate(None, b"_-\x00")


def _unescaped(folded: str) -> str:
    """The unescaped views of a folded text holding a `%` (escapes read once, and twice), each
    folded again, joined by U+0001 (no secret holds one)."""
    once = unquote(folded, errors="surrogateescape")
    if "%" not in once:
        return fold(once)
    return fold(once) + "\x01" + fold(unquote(once, errors="surrogateescape"))


def encoded_forms(secret: str) -> list[tuple[str, int]]:
    """The secret's encoded forms, folded, each with the run that counts as a fragment of it.

    Base64 of the secret after 0, 1 or 2 other bytes: only the characters whose six bits are all
    the secret's (the same whatever surrounds it), in both alphabets (folded alike where the
    secret's bits give no ``+``/``/``); percent-escapes of each of its UTF-8 bytes."""
    raw = secret.encode("utf-8", "surrogatepass")
    forms: list[tuple[str, int]] = []
    for align in range(3):
        encoded = base64.b64encode(bytes(align) + raw).decode()
        first = (8 * align + 5) // 6  # the first character with none of the other bytes' bits
        core = encoded[first : 8 * (align + len(raw)) // 6]
        for form in (core, core.replace("+", "-").replace("/", "_")):
            forms.append((fold(form), _B64_RUN))
    forms.append(("".join(f"%{byte:02x}" for byte in raw), _PCT_RUN))
    return forms


class Fragments:
    """The folded secrets and their probes; what a text holds of them, and that text without it."""

    def __init__(self) -> None:
        self._folded: list[tuple[str, int]] = []  # each form and its run
        self.probes: list[str] = []
        self._probes_bytes: list[bytes] = []
        # The probes of percent-escaped forms: only looked for in a text holding a `%`.
        self._escaped: list[str] = []
        self._escaped_bytes: list[bytes] = []
        self._ascii = True

    def __bool__(self) -> bool:
        return bool(self._folded)

    def add(self, secret: str) -> None:
        """Know `secret`: its folded form and, if that is long enough, its encoded forms."""
        folded = fold(secret)
        if len(folded) < FRAGMENT_RUN:
            if len(folded) >= SHORTEST:  # found whole, in any case and `_`/`-` spelling
                self._add_form(folded, len(folded))
            return
        self._add_form(folded, FRAGMENT_RUN)
        for form, run in encoded_forms(secret):
            self._add_form(form, run)

    def _add_form(self, folded: str, run: int) -> None:
        if len(folded) < run or any(known == folded for known, _ in self._folded):
            return
        self._folded.append((folded, run))
        self._ascii = self._ascii and folded.isascii()
        stride = run - _PROBE + 1  # every run of `run` characters holds a whole probe
        starts = range(0, len(folded) - _PROBE + 1, stride)
        probes, probes_bytes = self.probes, self._probes_bytes
        if folded.startswith("%"):
            probes, probes_bytes = self._escaped, self._escaped_bytes
        for probe in dict.fromkeys(folded[k : k + _PROBE] for k in starts):
            if probe not in probes:
                probes.append(probe)
                probes_bytes.append(probe.encode("utf-8", "surrogatepass"))

    def hits_folded(self, folded: str) -> bool:
        """Whether a text already folded (`fold`) may hold a fragment."""
        for probe in self.probes:
            if probe in folded:
                return True
        if "%" in folded:
            for probe in self._escaped:
                if probe in folded:
                    return True
            unescaped = _unescaped(folded)
            for probes in (self.probes, self._escaped):  # a secret may begin with `%` too
                for probe in probes:
                    if probe in unescaped:
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
        if b"%" in folded:
            for probe in self._escaped_bytes:
                if probe in folded:
                    return True
            once = unquote_to_bytes(folded)
            unescaped = _fold_bytes(once)
            if b"%" in once:
                unescaped += b"\x01" + _fold_bytes(unquote_to_bytes(once))
            for probes_bytes in (self._probes_bytes, self._escaped_bytes):
                for probe in probes_bytes:
                    if probe in unescaped:
                        return True
        return False

    def remove(self, text: str, marker: str) -> str:
        """`text` with every run of FRAGMENT_RUN or more folded characters of a secret replaced by
        `marker` (the run's own `_`/`-` with it), in the text as it is and in its unescaped
        view (a run there covers its escapes whole)."""
        if not self.hits(text):
            return text
        spans = self._spans(*_folded_view(text, escapes=0))
        if "%" in text:
            spans += self._spans(*_folded_view(text, escapes=1))
            spans += self._spans(*_folded_view(text, escapes=2))
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

    def _spans(self, folded: str, where: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The spans of the text (`where`: each folded character's) of every run in `folded`."""
        spans: list[tuple[int, int]] = []
        for secret, run in self._folded:
            for k in range(0, len(secret) - _PROBE + 1, run - _PROBE + 1):
                probe = secret[k : k + _PROBE]
                at = folded.find(probe)
                while at >= 0:
                    start, stop, s_start, s_stop = at, at + _PROBE, k, k + _PROBE
                    while start > 0 and s_start > 0 and folded[start - 1] == secret[s_start - 1]:
                        start, s_start = start - 1, s_start - 1
                    end = len(folded)
                    while stop < end and s_stop < len(secret) and folded[stop] == secret[s_stop]:
                        stop, s_stop = stop + 1, s_stop + 1
                    if stop - start >= run:
                        spans.append((where[start][0], where[stop - 1][1]))
                    at = folded.find(probe, at + 1)
        return spans


def _folded_view(text: str, *, escapes: int) -> tuple[str, list[tuple[int, int]]]:
    """`text` folded (`escapes` 1: each `%XX` of an ASCII byte read as its character first; 2:
    each `%25XX` too), with the span of `text` each folded character came from."""
    escape = _ESCAPES[escapes - 1] if escapes else None
    chars: list[str] = []
    where: list[tuple[int, int]] = []
    index, size = 0, len(text)
    while index < size:
        char, stop = text[index], index + 1
        if escape is not None and char == "%":
            found = escape.match(text, index)
            if found is not None:
                char, stop = chr(int(found[1], 16)), found.end()
        if char not in _SEPARATORS:
            for low in char.lower():
                chars.append(low)
                where.append((index, stop))
        index = stop
    return "".join(chars), where
