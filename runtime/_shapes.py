"""Response shapes of a task: the compact form of lists and receipts, the detail of `get`."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from . import _resolve as resolve
from ._rows import Board, Checkpoint, Subtask, TaskRow, columns, many, scalar

CHECKPOINTS_IN_DETAIL = 5
CHILDREN_IN_DETAIL = 20

_json_decode = msgspec.json.decode


def camel(name: str) -> str:
    """A field's wire name (`expected_updated_at` -> `expectedUpdatedAt`)."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def compact(c: sqlite3.Connection, board: Board, task: TaskRow) -> dict[str, Any]:
    """The task as every list and every write answers it."""
    parent = None
    if task.parent_id is not None:
        parent = scalar(c, "SELECT number FROM tasks WHERE id = ?", (task.parent_id,))
    subtasks = scalar(
        c, "SELECT count(*) FROM tasks WHERE parent_id = ? AND deleted_at IS NULL", (task.id,)
    )
    return {
        "channel": board.slug,
        "number": task.number,
        "scopeId": task.scope_id,
        "title": task.title,
        "status": task.status,
        "priority": task.priority,
        "assignee": resolve.handle(c, task.assignee_id),
        "labels": _json_decode(task.labels),
        "parent": parent,
        "subtaskCount": subtasks,
        "updatedAt": task.updated_at,
    }


def detail(
    c: sqlite3.Connection,
    board: Board,
    task: TaskRow,
    *,
    checkpoints_before: int | None = None,
    subtasks_after: int = 0,
) -> dict[str, Any]:
    """The compact form plus everything `get` shows: text, lists, links, recent checkpoints
    and the first subtasks (each section bounded, with its total). A continued read gives the
    checkpoints older than the id `checkpoints_before` and the subtasks numbered after
    `subtasks_after` instead: keyset, so appends and deletes between reads skip nothing."""
    shape = compact(c, board, task)
    before = 2**63 - 1 if checkpoints_before is None else checkpoints_before
    checkpoints = many(
        c,
        Checkpoint,
        f"SELECT {columns(Checkpoint, 'k')} FROM checkpoints k WHERE k.task_id = ? AND k.id < ?"
        " ORDER BY k.id DESC LIMIT ?",
        (task.id, before, CHECKPOINTS_IN_DETAIL),
    )
    checkpoint_count = scalar(c, "SELECT count(*) FROM checkpoints WHERE task_id = ?", (task.id,))
    children = many(
        c,
        Subtask,
        f"SELECT {columns(Subtask)} FROM tasks t WHERE t.parent_id = ? AND t.deleted_at IS NULL"
        " AND t.number > ? ORDER BY t.number LIMIT ?",
        (task.id, subtasks_after, CHILDREN_IN_DETAIL),
    )
    shape.update(
        {
            "description": task.description,
            "checklist": _json_decode(task.checklist),
            "urls": _json_decode(task.urls),
            "attachments": [
                {k: a[k] for k in ("name", "mediaType", "sizeBytes") if k in a}
                for a in _json_decode(task.attachments)
            ],
            "blocker": task.blocker,
            "thread": task.source_target,
            "messages": _json_decode(task.messages),
            "workspaces": _json_decode(task.workspaces),
            "creator": resolve.handle(c, task.creator_id),
            "createdAt": task.created_at,
            "checkpoints": {
                "items": [
                    {
                        "id": k.id,
                        "summary": k.summary,
                        "author": resolve.handle(c, k.author_id),
                        "createdAt": k.created_at,
                    }
                    for k in checkpoints
                ],
                "total": checkpoint_count,
            },
            "subtasks": {
                "items": [
                    {"number": s.number, "title": s.title, "status": s.status} for s in children
                ],
                "total": shape["subtaskCount"],
            },
        }
    )
    return shape
