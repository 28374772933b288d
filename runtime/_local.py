"""The local workspace, organised from the command line: boards and workflow callbacks.

These act on a runtime's database file (the one `agentteam-bridge serve --embedded` and
`agentteam-bridge runtime` use), seeding the local workspace first when the file is new, and are
safe while a bridge or runtime has the same file open (SQLite serialises the writes). A board
added here has every member of the local workspace on it, so the local agent can use it at once.
A workflow callback opened here lets a client try `task_create`'s `idempotency_key`: the client
passes the printed `_meta` with its calls, exactly as a workflow engine would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._seed import AGENT_ID, WORKSPACE_ID, seed_local
from ._store import Store

SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class LocalError(Exception):
    """What the person asked for cannot be done; the message says what to change."""


@dataclass(frozen=True)
class BoardRow:
    slug: str
    name: str
    members: int
    tasks: int


@dataclass(frozen=True)
class CallbackRow:
    run_id: str
    callback_effect_id: str
    responder: str
    state: str


def _open(db: str) -> Store:
    store = Store.open(db)  # a new file is created owner-only (runtime._store.connect)
    seed_local(store)
    return store


def add_board(db: str, slug: str, name: str | None = None) -> BoardRow:
    """A new board (or the existing one of that slug) with every local member on it."""
    if not SLUG.match(slug):
        raise LocalError(
            f"{slug!r} is not a board slug: 1-64 of a-z, 0-9 and '-', not starting with '-'"
        )
    store = _open(db)
    try:
        store.add_board(WORKSPACE_ID, slug, store.member_ids(WORKSPACE_ID), name)
        return next(b for b in _boards(store) if b.slug == slug)
    finally:
        store.close()


def list_boards(db: str) -> list[BoardRow]:
    store = _open(db)
    try:
        return _boards(store)
    finally:
        store.close()


def _boards(store: Store) -> list[BoardRow]:
    return [BoardRow(b.slug, b.name, b.members, b.tasks) for b in store.boards(WORKSPACE_ID)]


def open_callback(db: str, run_id: str, callback_effect_id: str, agent_id: str = AGENT_ID) -> None:
    """An active workflow callback whose responder is `agent_id` (re-opened if completed)."""
    for what, value in (("run id", run_id), ("callback effect id", callback_effect_id)):
        if not ID.match(value):
            raise LocalError(f"{value!r} is not a {what}: 1-128 of A-Z, a-z, 0-9 and '._:-'")
    store = _open(db)
    try:
        if agent_id not in store.member_ids(WORKSPACE_ID):
            raise LocalError(f"no member {agent_id!r} in the local workspace")
        store.open_callback(WORKSPACE_ID, run_id, callback_effect_id, agent_id)
    finally:
        store.close()


def complete_callback(db: str, run_id: str, callback_effect_id: str) -> None:
    """Mark a callback completed: new keys are refused, recorded receipts still replay."""
    store = _open(db)
    try:
        if not any(
            c.run_id == run_id and c.callback_effect_id == callback_effect_id
            for c in _callbacks(store)
        ):
            raise LocalError(f"no callback {run_id}/{callback_effect_id}; see `callback list`")
        store.complete_callback(WORKSPACE_ID, run_id, callback_effect_id)
    finally:
        store.close()


def list_callbacks(db: str) -> list[CallbackRow]:
    store = _open(db)
    try:
        return _callbacks(store)
    finally:
        store.close()


def _callbacks(store: Store) -> list[CallbackRow]:
    return [
        CallbackRow(c.run_id, c.callback_effect_id, c.responder_agent_id, c.state)
        for c in store.callbacks(WORKSPACE_ID)
    ]
