"""What the bridge, the journal's readers and the replay auditor must agree on, written once.

The names a model may not use for hidden context, the ``_meta`` keys that carry the workflow
context, the Agent Runtime routes the bridge calls, and the grammar of one call's events. It
imports nothing of ours (only the standard library), so every package may import it through
``journal``; the reference runtime, the far side of the wire, keeps its own routes on purpose
(the wire, not a shared constant, is what proves the two agree).

The call grammar, as a small state machine that names the first event out of place::

    call_received deprecated_usage*
      ( call_rejected
      | call_cancelled
      | context_injected
        [ upstream_request [ upstream_response [deprecated_usage]
                             [ token_refreshed [ upstream_request
                               [ upstream_response [deprecated_usage] ] ] ] ] ]
        ( call_result | call_error | call_cancelled ) )

It accepts exactly the language of ``CALL_GRAMMAR`` in ``tests/bridge_harness.py`` (a test holds
the two together). ``deprecated_usage`` follows ``call_received`` for an old tool name or argument
spelling, and an upstream response for a deprecated route (RFC 9745 ``Deprecation``).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

__all__ = [
    "HIDDEN_NAMES",
    "META_CALLBACK",
    "META_RUN",
    "OUTCOMES",
    "TASKS_ROUTE_TEMPLATE",
    "Grammar",
    "accepts",
    "is_hidden_name",
    "tasks_route",
]

# Per-request workflow context, read from a tools/call request's `params._meta` (section 13.1).
META_RUN: Final = "agentteam/workflow_run_id"
META_CALLBACK: Final = "agentteam/callback_effect_id"

# Argument names a model might use to smuggle hidden context; compared after normalisation
# (see is_hidden_name): the bridge refuses them, `agentteam-replay verify` flags them.
HIDDEN_NAMES: Final = frozenset(
    {
        "workspace",
        "workspaceid",
        "agent",
        "agentid",
        "callingagent",
        "principal",
        "workflowrun",
        "workflowrunid",
        "runid",
        "callbackeffect",
        "callbackeffectid",
        "callbackid",
        "token",
        "bearer",
        "bearertoken",
        "accesstoken",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "apikey",
        "secret",
        "password",
        "session",
        "sessionid",
    }
)


def is_hidden_name(name: str) -> bool:
    """Whether an argument name names hidden context (``_``, ``-`` and case ignored)."""
    return name.replace("_", "").replace("-", "").lower() in HIDDEN_NAMES


# The Agent Runtime's Task routes: this prefix plus a tool's suffix (``/get``, ``/update``...).
TASKS_ROUTE_TEMPLATE: Final = "/api/v1/workspaces/{workspaceId}/agents/{agentId}/runtime/tasks"


def tasks_route(workspace_id: str, agent_id: str) -> str:
    """The Task routes' prefix for one workspace and agent, each path segment percent-encoded."""
    return (
        f"/api/v1/workspaces/{quote(workspace_id, safe='')}/agents/"
        f"{quote(agent_id, safe='')}/runtime/tasks"
    )


OUTCOMES: Final = frozenset({"call_rejected", "call_result", "call_error", "call_cancelled"})
_ENDINGS: Final = ("call_result", "call_error", "call_cancelled")

# state -> {kind: next state}; "done" accepts nothing more.
_TRANSITIONS: Final[dict[str, dict[str, str]]] = {
    "start": {"call_received": "received"},
    "received": {
        "deprecated_usage": "received",
        "call_rejected": "done",
        "call_cancelled": "done",  # cancelled before its context was injected
        "context_injected": "injected",
    },
    "injected": {"upstream_request": "sent", **dict.fromkeys(_ENDINGS, "done")},
    "sent": {"upstream_response": "answered", **dict.fromkeys(_ENDINGS, "done")},
    "answered": {
        "deprecated_usage": "answered_deprecated",
        "token_refreshed": "refreshed",
        **dict.fromkeys(_ENDINGS, "done"),
    },
    "answered_deprecated": {"token_refreshed": "refreshed", **dict.fromkeys(_ENDINGS, "done")},
    # Refreshed, then cancelled or failed before the replay was journaled.
    "refreshed": {"upstream_request": "resent", **dict.fromkeys(_ENDINGS, "done")},
    "resent": {"upstream_response": "reanswered", **dict.fromkeys(_ENDINGS, "done")},
    "reanswered": {"deprecated_usage": "reanswered_deprecated", **dict.fromkeys(_ENDINGS, "done")},
    "reanswered_deprecated": dict.fromkeys(_ENDINGS, "done"),
    "done": {},
}


class Grammar:
    """Feed one call's kinds in order; ``step`` says what is wrong with the kind, or None."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = "start"

    def step(self, kind: str) -> str | None:
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
