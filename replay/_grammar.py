"""The event grammar of one call, as a small state machine that names the first event out of place.

    call_received
      ( call_rejected
      | context_injected
        [ upstream_request [ upstream_response [ token_refreshed upstream_request
                                                 [ upstream_response ] ] ] ]
        ( call_result | call_error | call_cancelled ) )

It accepts exactly the language of ``CALL_GRAMMAR`` in ``tests/bridge_harness.py`` (a test holds
the two together). ``deprecated_usage`` events may appear anywhere after ``call_received`` and are
not part of the grammar: the bridge notes an old name where it meets it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["IGNORED", "OUTCOMES", "Grammar"]

OUTCOMES: Final = frozenset({"call_rejected", "call_result", "call_error", "call_cancelled"})
IGNORED: Final = frozenset({"deprecated_usage"})
_ENDINGS: Final = ("call_result", "call_error", "call_cancelled")

# state -> {kind: next state}; "done" accepts nothing more.
_TRANSITIONS: Final[dict[str, dict[str, str]]] = {
    "start": {"call_received": "received"},
    "received": {"call_rejected": "done", "context_injected": "injected"},
    "injected": {"upstream_request": "sent", **dict.fromkeys(_ENDINGS, "done")},
    "sent": {"upstream_response": "answered", **dict.fromkeys(_ENDINGS, "done")},
    "answered": {"token_refreshed": "refreshed", **dict.fromkeys(_ENDINGS, "done")},
    "refreshed": {"upstream_request": "resent"},
    "resent": {"upstream_response": "reanswered", **dict.fromkeys(_ENDINGS, "done")},
    "reanswered": dict.fromkeys(_ENDINGS, "done"),
    "done": {},
}


class Grammar:
    """Feed one call's kinds in order; ``step`` says what is wrong with the kind, or None."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = "start"

    def step(self, kind: str) -> str | None:
        if kind in IGNORED and self.state != "start":
            return None
        following = _TRANSITIONS[self.state]
        nxt = following.get(kind)
        if nxt is None:
            expected = " or ".join(sorted(following)) or "nothing (the call had ended)"
            return f"{kind} after {self.state}; expected {expected}"
        self.state = nxt
        return None

    @property
    def complete(self) -> bool:
        return self.state == "done"


def accepts(kinds: list[str]) -> bool:
    """Whether a whole sequence of kinds is one complete call."""
    grammar = Grammar()
    return all(grammar.step(kind) is None for kind in kinds) and grammar.complete
