"""The `update` and `checkpoint` operations: a patch of a task's fields, a progress note.

An update applies only the fields that really change (a no-op field is not reported in
`changed` and does not move `updatedAt`); `expectedUpdatedAt` makes it conditional. Checkpoints
are append-only (a trigger refuses any rewrite, even in SQL).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from . import _dto as dto
from . import _resolve as resolve
from ._clock import instant_ns
from ._errors import Conflict, ValidationFailed
from ._rows import Board, TaskRow, json_list, scalar
from ._shapes import camel, compact
from ._tokens import Principal

if TYPE_CHECKING:
    from ._store import Store

_json_encode = msgspec.json.Encoder(order="sorted").encode

# A patch field -> the column that stores it, where the names differ.
_PATCH_COLUMN = {"assignee": "assignee_id", "parent": "parent_id", "thread": "source_target"}
_LIST_FIELDS = ("labels", "checklist", "urls", "attachments", "messages", "workspaces")


def update_task(store: Store, p: Principal, req: dto.UpdateRequest) -> dict[str, Any]:
    patch = req.patch
    if req.expected_updated_at is not UNSET and instant_ns(req.expected_updated_at) is None:
        raise ValidationFailed(
            {"$.expectedUpdatedAt": "not a real RFC3339 UTC instant; pass `updatedAt` as read"}
        )
    present = [f for f in dto.PATCH_FIELDS if getattr(patch, f) is not UNSET]
    if not present:
        raise ValidationFailed(
            {"$.patch": "the patch is empty; set at least one field"},
            "An empty patch changes nothing.",
            code="empty_patch",
        )
    with store.transaction() as c:
        board = resolve.member_board(c, p, req.channel, "$.channel")
        task = resolve.task(c, board, req.number, "$.number")
        if req.expected_updated_at is not UNSET and not _same_revision(
            req.expected_updated_at, task.updated_at
        ):
            raise Conflict(
                "stale_update",
                "The task changed since `expectedUpdatedAt`; read it again and retry.",
                field_errors={"$.expectedUpdatedAt": "does not match the task's updatedAt"},
                details={"currentUpdatedAt": task.updated_at},
            )
        changes, changed = _patch_changes(c, p, board, task, patch, present)
        if changes:
            now = store.now(c, board)
            assigns = ", ".join(f"{col} = ?" for col in changes)
            c.execute(
                f"UPDATE tasks SET {assigns}, updated_at = ? WHERE id = ?",
                [*changes.values(), now, task.id],
            )
            c.execute(
                "INSERT INTO activity (task_id, actor_id, kind, detail, at)"
                " VALUES (?, ?, 'updated', ?, ?)",
                (task.id, p.agent_id, _json_encode({"fields": changed}).decode(), now),
            )
        shape = compact(c, board, resolve.task_by_id(c, task.id))
        return {"task": shape, "changed": [camel(f) for f in changed]}


def _same_revision(expected: str, current: str) -> bool:
    """Whether two instants are one revision: compared as instants, not as spellings."""
    return expected == current or instant_ns(expected) == instant_ns(current)


def _patch_changes(
    c: sqlite3.Connection,
    p: Principal,
    board: Board,
    task: TaskRow,
    patch: dto.Patch,
    present: list[str],
) -> tuple[dict[str, Any], list[str]]:
    """Map the patch onto the columns it really changes; a no-op field changes nothing."""
    changes: dict[str, Any] = {}
    changed: list[str] = []
    for field in present:
        value: Any = getattr(patch, field)
        if field == "assignee" and value is not None:
            value = resolve.board_member(c, board, value, "$.patch.assignee")
        elif field == "parent" and value is not None:
            value = _reparent_target(c, board, task, value)
        elif field == "thread" and value is not None:
            resolve.check_target(c, p, value, board, "$.patch.thread")
        elif field == "messages":
            for i, ref in enumerate(value):
                resolve.member_board(c, p, ref[1:].partition(":")[0], f"$.patch.messages[{i}]")
        if field in _LIST_FIELDS:
            value = json_list(value)
        column = _PATCH_COLUMN.get(field, field)
        if value == getattr(task, column):
            continue
        changed.append(field)
        changes[column] = value
        if field == "priority":
            changes["priority_rank"] = dto.PRIORITY_RANK[value]
    return changes, changed


def _reparent_target(c: sqlite3.Connection, board: Board, task: TaskRow, number: int) -> int:
    """The id of the new parent `number`, refused if it is the task or one of its subtasks."""
    if number < 1:
        raise ValidationFailed({"$.patch.parent": "`parent` must be a positive task number"})
    parent = resolve.task(c, board, number, "$.patch.parent")
    ancestor: int | None = parent.id
    while ancestor is not None:
        if ancestor == task.id:
            raise ValidationFailed(
                {"$.patch.parent": f"task {number} is this task or one of its subtasks"},
                "Re-parenting would create a cycle.",
                code="parent_cycle",
            )
        ancestor = scalar(c, "SELECT parent_id FROM tasks WHERE id = ?", (ancestor,))
    return parent.id


def add_checkpoint(store: Store, p: Principal, req: dto.CheckpointRequest) -> dict[str, Any]:
    summary = req.summary.strip()
    if not summary:
        raise ValidationFailed({"$.summary": "the summary must not be blank"})
    with store.transaction() as c:
        board = resolve.member_board(c, p, req.channel, "$.channel")
        task = resolve.task(c, board, req.number, "$.number")
        now = store.now(c, board)
        cur = c.execute(
            "INSERT INTO checkpoints (task_id, summary, author_id, created_at) VALUES (?, ?, ?, ?)",
            (task.id, summary, p.agent_id, now),
        )
        c.execute(
            "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, 'checkpoint', ?)",
            (task.id, p.agent_id, now),
        )
        return {
            "checkpoint": {
                "id": cur.lastrowid,
                "summary": summary,
                "author": resolve.handle(c, p.agent_id),
                "createdAt": now,
            },
            "task": compact(c, board, task),
        }
