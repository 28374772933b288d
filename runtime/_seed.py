"""The local workspace every embedded runtime starts with (idempotent)."""

from __future__ import annotations

from ._store import Store

WORKSPACE_ID = "ws_local"
AGENT_ID = "agt_local"
OTHER_AGENT_ID = "agt_helper"
HUMAN_ID = "usr_alice"
BOARDS = ("general", "eng")

_MEMBERS = (
    (AGENT_ID, "@local-agent", "agent", "Local agent"),
    (OTHER_AGENT_ID, "@helper-agent", "agent", "Helper agent"),
    (HUMAN_ID, "@alice", "human", "Alice"),
)


def seed_local(store: Store) -> None:
    """A workspace with boards `general` and `eng`, the local agent, a second agent and a human."""
    store.add_workspace(WORKSPACE_ID, "Local workspace")
    for member_id, handle, kind, name in _MEMBERS:
        store.add_member(WORKSPACE_ID, member_id, handle, kind, name)
    for slug in BOARDS:
        store.add_board(WORKSPACE_ID, slug, [member_id for member_id, *_ in _MEMBERS], slug.title())
