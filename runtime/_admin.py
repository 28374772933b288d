"""Seeding and administration: workspaces, members, boards, workflow callbacks, counts.

Used by the admin routes, the local seed and `agentteam-bridge runtime board|callback`; every
write is idempotent (adding what exists changes nothing), so processes sharing one database can
all seed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._rows import BoardSummary, Callback, columns, many, scalar, values

if TYPE_CHECKING:
    from ._store import Store

# The tables `stats` counts (what a test checks a refused write did not touch).
STATS_TABLES = (
    "tasks",
    "activity",
    "live_events",
    "idempotency_receipts",
    "checkpoints",
    "tombstones",
)


def add_workspace(store: Store, workspace_id: str, name: str) -> None:
    with store.transaction() as c:
        c.execute("INSERT OR IGNORE INTO workspaces (id, name) VALUES (?, ?)", (workspace_id, name))


def add_member(
    store: Store, workspace_id: str, member_id: str, handle: str, kind: str, display_name: str
) -> None:
    with store.transaction() as c:
        c.execute(
            "INSERT OR IGNORE INTO members (id, workspace_id, handle, kind, display_name)"
            " VALUES (?, ?, ?, ?, ?)",
            (member_id, workspace_id, handle, kind, display_name),
        )


def add_board(
    store: Store, workspace_id: str, slug: str, member_ids: Sequence[str], name: str
) -> None:
    """The board (created unless it exists) with every one of `member_ids` on it."""
    with store.transaction() as c:
        c.execute(
            "INSERT OR IGNORE INTO boards (workspace_id, slug, name) VALUES (?, ?, ?)",
            (workspace_id, slug, name),
        )
        board_id = scalar(
            c, "SELECT id FROM boards WHERE workspace_id = ? AND slug = ?", (workspace_id, slug)
        )
        c.executemany(
            "INSERT OR IGNORE INTO board_members (board_id, member_id) VALUES (?, ?)",
            [(board_id, m) for m in member_ids],
        )


def open_callback(
    store: Store, workspace_id: str, run_id: str, callback_effect_id: str, responder: str
) -> None:
    with store.transaction() as c:
        c.execute(
            "INSERT OR REPLACE INTO workflow_callbacks (workspace_id, run_id,"
            " callback_effect_id, responder_agent_id, state) VALUES (?, ?, ?, ?, 'active')",
            (workspace_id, run_id, callback_effect_id, responder),
        )


def complete_callback(
    store: Store, workspace_id: str, run_id: str, callback_effect_id: str
) -> None:
    with store.transaction() as c:
        c.execute(
            "UPDATE workflow_callbacks SET state = 'completed' WHERE workspace_id = ?"
            " AND run_id = ? AND callback_effect_id = ?",
            (workspace_id, run_id, callback_effect_id),
        )


def stats(store: Store) -> dict[str, int]:
    c = store.connection
    return {t: scalar(c, f"SELECT count(*) FROM {t}") for t in STATS_TABLES}


def member_ids(store: Store, workspace_id: str) -> list[str]:
    found: list[str] = values(
        store.connection,
        "SELECT id FROM members WHERE workspace_id = ? ORDER BY id",
        (workspace_id,),
    )
    return found


def boards(store: Store, workspace_id: str) -> list[BoardSummary]:
    """Every board of the workspace with its member and task counts, by slug."""
    selected = columns(
        BoardSummary,
        "b",
        members="(SELECT count(*) FROM board_members m WHERE m.board_id = b.id)",
        tasks="(SELECT count(*) FROM tasks t WHERE t.board_id = b.id)",
    )
    return many(
        store.connection,
        BoardSummary,
        f"SELECT {selected} FROM boards b WHERE b.workspace_id = ? ORDER BY b.slug",
        (workspace_id,),
    )


def callbacks(store: Store, workspace_id: str) -> list[Callback]:
    """Every workflow callback of the workspace, by run and effect id."""
    return many(
        store.connection,
        Callback,
        f"SELECT {columns(Callback, 'w')} FROM workflow_callbacks w WHERE w.workspace_id = ?"
        " ORDER BY w.run_id, w.callback_effect_id",
        (workspace_id,),
    )
