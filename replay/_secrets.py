"""The secret screen: where a credential's shape shows in a row's texts (``secret_in_payload``).

:class:`SecretScreen` looks at one journal's rows in turn: the payload and the envelope's text
columns (session, call, method, tool name, request id: a client writes those). It keeps one
thing between rows, the last envelope found clean (the events of one call share theirs), and
changes nothing else, so a caller may screen a journal's rows apart from the rest of verify's
checks (``report`` screens them in its pass over the calls, beside verify).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

__all__ = ["SecretScreen", "first_secret"]

# What `secret_in_payload` finds. The verifier knows no secret (the journal holds none): it finds
# credentials by shape. A runtime token (`atk_` + 43 base64url characters) is found in any letter
# case and snake_cased, whole or any prefix of 12 or more characters (`atk_` and 8 more); a
# `Bearer` credential and a JWT's first two parts as they are. Not found: a fragment of a token
# without its `atk_` start, or a token command's output, a proxy or URL password in another
# format (the writer removes those, whole and in fragments, knowing them: journal._fragments).
_SECRET: Final = re.compile(
    r"(?i:\bbearer\s+)(?!\[REDACTED\])[A-Za-z0-9\-._~+/]{8,}"
    r"|(?i:atk_)[A-Za-z0-9_\-]{8,}"
    r"|\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\."
)


def _may_hold_secret(text: str) -> bool:
    """Whether a secret's shape may start in ``text`` (only then is :data:`_SECRET` run): an
    ``earer`` or an ``atk_`` in any letter case (``BeArEr`` too: a scheme is case-insensitive),
    an ``eyJ``. Plain ``in`` tests over one lower-cased copy, no generator: verify runs this for
    every event.

    An ``earer`` is a trigger only before whitespace (``\\s`` is ``str.isspace``): a ``bearer``
    shape needs it there, and every call's ``context_injected`` names a ``bearer_token``. Where
    lower-casing changed the text's length the offsets differ: any ``earer`` is one. A ``J`` is
    looked for first: one ``memchr``, where ``eyJ`` is a search of its own."""
    if "J" in text and "eyJ" in text:
        return True
    lowered = text.lower()
    if "atk_" in lowered:
        return True
    at = lowered.find("earer")
    if at < 0:
        return False
    if len(lowered) != len(text):
        return True
    while at >= 0:
        if text[at + 5 : at + 6].isspace():
            return True
        at = lowered.find("earer", at + 5)
    return False


# Where each shape of :data:`_SECRET` can start, found with plain ``find`` in the lower-cased
# text: the ``b`` one character before an ``earer``, an ``atk_``, an ``eyJ`` (cased as it is).
_STARTS: Final = (("earer", 1, True), ("atk_", 0, True), ("eyJ", 0, False))


def first_secret(text: str) -> re.Match[str] | None:
    """``_SECRET.search(text)``, tried only where a shape's start is (most texts that hold a
    trigger, a ``bearer_token`` field's name, hold no secret: the regex's scan of the whole
    text, every alternative at every offset, was most of verify's secret check). The leftmost
    match is the search's: every match starts at one of those places, tried in order. Where
    lower-casing changed the text's length (``İ`` becomes two characters) the offsets of the
    lower-cased copy are not the text's: the whole text is searched."""
    lowered = text.lower()
    if len(lowered) != len(text):
        return _SECRET.search(text)
    starts: set[int] = set()
    for needle, back, folded in _STARTS:
        where = lowered if folded else text
        at = where.find(needle, back)
        while at >= 0:
            starts.add(at - back)
            at = where.find(needle, at + 1)
    for start in sorted(starts):
        found = _SECRET.match(text, start)
        if found is not None:
            return found
    return None


class SecretScreen:
    """``report(seq, "secret_in_payload", detail, call_id)`` for each text of a row where a
    credential's shape shows; rows fed in a journal's order."""

    def __init__(self, report: Callable[[int, str, str, str | None], None]) -> None:
        self.report = report
        # The last envelope (session, call, method, tool, request id) seen without a trigger:
        # the events of one call share theirs, so it is looked at once per call.
        self._clean_envelope: tuple[Any, ...] | None = None

    def row(self, seq: int, row: tuple[Any, ...]) -> None:
        """Screen one row whose payload is a text (a Row, or its values in COLUMNS order)."""
        # Substring tests first: the regex runs only where a secret's shape may start (a mixed
        # case `aTk_` only after a look at the lower-cased text, where `atk_` fails).
        # The envelope's text columns too: a tool or method name, a request id come from the
        # client. An envelope equal to the last one without a trigger has none (equal values:
        # the same texts); then only the payload (a text: the caller screens no other row).
        envelope = (row[2], row[3], row[8], row[9], row[10])
        if envelope != self._clean_envelope:
            # One look at all of them (most hold no trigger): a trigger has no NUL, so none
            # spans two columns joined by one.
            if _may_hold_secret("\0".join([v for v in envelope if isinstance(v, str)])):
                self._search_columns(seq, row)
                return
            self._clean_envelope = envelope
        if _may_hold_secret(row[14]):
            self._search_secret(seq, "payload", row[14], row[3])

    def _search_columns(self, seq: int, row: tuple[Any, ...]) -> None:
        """Each text column holding a trigger, the payload first."""
        columns = (
            ("payload", row[14]),
            ("session_id", row[2]),
            ("call_id", row[3]),
            ("mcp_method_name", row[8]),
            ("gen_ai_tool_name", row[9]),
            ("jsonrpc_request_id", row[10]),
        )
        for column, value in columns:
            if isinstance(value, str) and _may_hold_secret(value):
                self._search_secret(seq, column, value, row[3])

    def _search_secret(self, seq: int, column: str, value: str, call_id: str | None) -> None:
        found = first_secret(value)
        if found is not None:
            shape = found.group(0)
            what = "a bearer credential" if shape[:1] in "bB" else "a token or JWT"
            self.report(
                seq,
                "secret_in_payload",
                f"{column} holds {what} at offset {found.start()} ({shape[:6]}…)",
                call_id,
            )
