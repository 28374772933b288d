"""The terminal the auditor's tools print to: text from a journal is shown, never obeyed.

Every text a journal holds was written by whoever wrote the file (the model, the upstream, or a
hostile author): tool names, call ids, error messages, client names, file names. Printed raw,
an ANSI/OSC escape in one of them would move the cursor over earlier lines, set the clipboard
(OSC 52), plant a hyperlink (OSC 8) or retitle the window; a rich markup tag in one (``[/red]``)
would be parsed, crash the command or restyle what follows.

Invariants:

* :class:`SafeConsole` renders strings without markup unless a call asks for it
  (``print(..., markup=True)``, whose interpolated values are then passed through
  :func:`rich.markup.escape`).
* Every control character (C0 but newline and tab, DEL, C1), every bidirectional override and
  the line and paragraph separators (U+2028, U+2029) that reach the terminal through a
  :class:`SafeConsole` are shown as visible stand-ins (:func:`shown`): the control pictures
  ``␛`` ``␇`` … for C0 and DEL, ``␤`` for the separators, ``�`` for the rest. The
  ANSI sequences rich itself writes for colours are styles, never text, and are kept.
* A string printed without markup (every table cell, every line of values) is one line: a
  newline in it is shown (``␤``), so a journal's text cannot print a row or a verdict of its
  own. Lines meant to span several are :class:`rich.text.Text` (their control characters still
  shown) or printed with ``markup=True`` (their values passed through :func:`shown` with
  ``one_line`` and escaped).
* :func:`shown` with ``one_line`` also shows a newline, for the one-line error messages the
  command line prints outside rich.
* JSON printed for a person (``--json``) holds no character a terminal obeys: JSON escapes C0
  itself, and :func:`json_shown` writes DEL, C1, the bidirectional controls and the line and
  paragraph separators as ``\\u`` escapes too, the same strings to any reader of the JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

__all__ = ["SafeConsole", "json_shown", "shown"]

# C0 (but newline and tab) and DEL as their control pictures (U+2400 block); C1 and the
# bidirectional embeddings, overrides, isolates and marks (LRM, RLM, ALM: invisible, they move
# the digits and signs beside them), which reorder what the reader sees, as U+FFFD.
_MULTI_LINE: Final[dict[int, str]] = {
    **{c: chr(0x2400 + c) for c in range(0x20) if c not in (0x09, 0x0A)},
    0x7F: "\u2421",
    **{c: "\ufffd" for c in range(0x80, 0xA0)},
    **{c: "\ufffd" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
    **{c: "\ufffd" for c in (0x061C, 0x200E, 0x200F)},
    # The line and paragraph separators: line ends to str.splitlines and JavaScript, not "\n".
    0x2028: "\u2424",
    0x2029: "\u2424",
}
_ONE_LINE: Final[dict[int, str]] = {**_MULTI_LINE, 0x0A: "\u2424"}


def shown(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character a visible stand-in (and newlines too if
    ``one_line``): safe to write to a terminal."""
    return text.translate(_ONE_LINE if one_line else _MULTI_LINE)


# What JSON leaves raw and a terminal obeys: what _MULTI_LINE shows but C0 (JSON escapes it),
# that is DEL, C1, the bidirectional controls and the line and paragraph separators.
_JSON_OBEYED: Final = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in sorted(_MULTI_LINE) if c >= 0x20) + "]"
)


def json_shown(text: str) -> str:
    """JSON text with each character a terminal would obey written as its ``\\u`` escape (a
    raw one can stand only in a string, where the escape is the same character)."""
    if text.isascii() and "\x7f" not in text:  # most JSON: two scans in C, no regex
        return text
    return _JSON_OBEYED.sub(_escaped, text)


def _escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found[0]):04x}"


class SafeConsole(Console):
    """A rich console that shows a journal's text and never obeys it (see the module's
    invariants): markup off by default, control characters shown."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Before markup and measuring, so that a table's widths count the stand-ins. A string
        # without markup is a journal's text (a table cell, a line of values): one line, so that
        # a newline in a tool name cannot print a row of its own.
        markup = kwargs.get("markup")
        one_line = not (markup or (markup is None and self._markup))
        return super().render_str(shown(text, one_line=one_line), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        # Text objects built by the caller (never through render_str) are caught here.
        for segment in super().render(renderable, options):
            if segment.control or segment.text.isprintable() or not segment.text:
                yield segment
            else:
                yield Segment(shown(segment.text), segment.style, segment.control)
