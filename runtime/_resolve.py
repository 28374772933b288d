"""Names in a request resolved to rows: boards, tasks, members, threads.

Each lookup either returns the row or raises the `ApiError` a caller can act on, with the
candidates a retry could use (close board slugs, nearby task numbers, the live parent of a
deleted task). Every function takes the connection (inside or outside a transaction).
"""

from __future__ import annotations

import difflib
import sqlite3
from typing import Any

from ._errors import Conflict, Forbidden, NotFound, ValidationFailed
from ._rows import (
    Board,
    Member,
    ParentLink,
    StoredTask,
    TaskRef,
    TaskRow,
    columns,
    many,
    one,
    scalar,
)
from ._tokens import Principal


def find_board(c: sqlite3.Connection, workspace_id: str, slug: str) -> Board | None:
    """The board `slug` of the workspace, member or not."""
    return one(
        c,
        Board,
        f"SELECT {columns(Board, 'b')} FROM boards b WHERE b.workspace_id = ? AND b.slug = ?",
        (workspace_id, slug),
    )


def member_board(c: sqlite3.Connection, p: Principal, slug: str, path: str) -> Board:
    """The board `slug` of the principal's workspace, which the principal is a member of."""
    found = find_board(c, p.workspace_id, slug)
    if found is None:
        raise NotFound(
            "channel_not_found",
            f"No board `{slug}` in this workspace.",
            field_errors={path: "unknown board"},
            candidates=board_candidates(c, p, slug),
        )
    require_member(c, p, found)
    return found


def require_member(c: sqlite3.Connection, p: Principal, board: Board) -> None:
    member = scalar(
        c,
        "SELECT 1 FROM board_members WHERE board_id = ? AND member_id = ?",
        (board.id, p.agent_id),
    )
    if member is None:
        raise Forbidden("not_a_member", f"The agent is not a member of board `{board.slug}`.")


def board_candidates(c: sqlite3.Connection, p: Principal, slug: str) -> list[dict[str, Any]]:
    """Up to three of the principal's boards, the closest to `slug` first."""
    boards = many(
        c,
        Board,
        f"SELECT {columns(Board, 'b')} FROM boards b JOIN board_members m ON"
        " m.board_id = b.id WHERE b.workspace_id = ? AND m.member_id = ?"
        " ORDER BY b.slug",
        (p.workspace_id, p.agent_id),
    )
    names = {b.slug: b.name for b in boards}
    close = difflib.get_close_matches(slug, list(names), n=3, cutoff=0.3) or list(names)[:3]
    return [{"channel": s, "name": names[s]} for s in close]


def task(c: sqlite3.Connection, board: Board, number: int, path: str) -> TaskRow:
    """The live task `number` on the board; a deleted one names its nearest live ancestor."""
    found = one(
        c,
        StoredTask,
        f"SELECT {columns(StoredTask)} FROM tasks t WHERE t.board_id = ? AND t.number = ?",
        (board.id, number),
    )
    if found is not None and found.deleted_at is None:
        return found
    if found is not None:
        live_parent = _live_parent(c, found.parent_id)
        raise NotFound(
            "task_deleted",
            f"Task {number} on `{board.slug}` was deleted.",
            field_errors={path: "deleted task"},
            candidates=[live_parent] if live_parent else [],
        )
    near = many(
        c,
        TaskRef,
        f"SELECT {columns(TaskRef)} FROM tasks t WHERE t.board_id = ? AND t.deleted_at IS NULL"
        " ORDER BY abs(t.number - ?), t.number LIMIT 3",
        (board.id, number),
    )
    raise NotFound(
        "task_not_found",
        f"No task {number} on `{board.slug}`.",
        field_errors={path: "unknown task number"},
        candidates=[{"channel": board.slug, "number": t.number, "title": t.title} for t in near],
    )


def live_task(c: sqlite3.Connection, board: Board, number: int) -> TaskRow | None:
    """The live task `number` on the board, or None (no candidates: for batch operations)."""
    return one(
        c,
        TaskRow,
        f"SELECT {columns(TaskRow)} FROM tasks t WHERE t.board_id = ? AND t.number = ?"
        " AND t.deleted_at IS NULL",
        (board.id, number),
    )


def task_by_id(c: sqlite3.Connection, task_id: int) -> TaskRow:
    found = one(c, TaskRow, f"SELECT {columns(TaskRow)} FROM tasks t WHERE t.id = ?", (task_id,))
    assert found is not None, task_id
    return found


def _live_parent(c: sqlite3.Connection, parent_id: int | None) -> dict[str, Any] | None:
    while parent_id is not None:
        link = one(
            c,
            ParentLink,
            f"SELECT {columns(ParentLink, 't', slug='b.slug')} FROM tasks t"
            " JOIN boards b ON b.id = t.board_id WHERE t.id = ?",
            (parent_id,),
        )
        assert link is not None, parent_id
        if link.deleted_at is None:
            return {"channel": link.slug, "number": link.number, "title": link.title}
        parent_id = link.parent_id
    return None


def member_by_handle(c: sqlite3.Connection, workspace_id: str, handle: str) -> str | None:
    """The id of the workspace member with this handle, or None."""
    found: str | None = scalar(
        c, "SELECT id FROM members WHERE workspace_id = ? AND handle = ?", (workspace_id, handle)
    )
    return found


def board_member(c: sqlite3.Connection, board: Board, handle: str, path: str) -> str:
    """The id of the board member with this handle; anyone else is refused with close handles."""
    members = many(
        c,
        Member,
        f"SELECT {columns(Member, 'm')} FROM members m JOIN board_members bm ON"
        " bm.member_id = m.id WHERE bm.board_id = ? ORDER BY m.handle",
        (board.id,),
    )
    by_handle = {m.handle: m.id for m in members}
    if handle in by_handle:
        return by_handle[handle]
    close = difflib.get_close_matches(handle, list(by_handle), n=3, cutoff=0.3)
    raise ValidationFailed(
        {path: f"`{handle}` is not a member of board `{board.slug}`"},
        code="assignee_not_member",
        candidates=[{"assignee": h} for h in close or list(by_handle)[:3]],
    )


def handle(c: sqlite3.Connection, member_id: str | None) -> str | None:
    """A member's handle as answers show it (the id itself if the member is unknown)."""
    if member_id is None:
        return None
    found: str | None = scalar(c, "SELECT handle FROM members WHERE id = ?", (member_id,))
    return member_id if found is None else found


def check_target(c: sqlite3.Connection, p: Principal, target: str, board: Board, path: str) -> None:
    """A source thread (create's `target`, the patch's `thread`) on the task's own board."""
    slug, _, thread = target[1:].partition(":")
    if not target.startswith("#") or not slug or (":" in target and not thread):
        raise ValidationFailed(
            {path: "expected `#channel` or `#channel:threadid`"}, code="target_invalid"
        )
    found = find_board(c, p.workspace_id, slug)
    if found is None:
        raise NotFound(
            "target_not_found",
            f"No board `{slug}` for target `{target}`.",
            field_errors={path: "unknown board"},
            candidates=board_candidates(c, p, slug),
        )
    if found.id != board.id:
        raise Conflict(
            "target_conflict",
            f"Target `{target}` is on board `{found.slug}`, not `{board.slug}`.",
            field_errors={path: f"resolves to board `{found.slug}`"},
        )
