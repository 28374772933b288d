"""The `delete` operation: a task its creator deletes, with its subtasks promoted or deleted.

Deletion is soft: the row stays (with `deleted_at`) so numbers are never reused and a lookup of
a deleted number can name the nearest live ancestor; a tombstone keeps the scope id refused.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from . import _dto as dto
from . import _resolve as resolve
from ._errors import Forbidden, ValidationFailed
from ._rows import TaskRef, columns, many
from ._tokens import Principal

if TYPE_CHECKING:
    from ._store import Store


def delete_task(store: Store, p: Principal, req: dto.DeleteRequest) -> dict[str, Any]:
    with store.transaction() as c:
        board = resolve.member_board(c, p, req.channel, "$.channel")
        task = resolve.task(c, board, req.number, "$.number")
        if task.creator_id != p.agent_id:
            raise Forbidden(
                "not_creator",
                f"Task {req.number} was created by "
                f"{resolve.handle(c, task.creator_id)}; only its creator may delete it.",
            )
        children = many(
            c,
            TaskRef,
            f"SELECT {columns(TaskRef)} FROM tasks t WHERE t.parent_id = ?"
            " AND t.deleted_at IS NULL ORDER BY t.number",
            (task.id,),
        )
        if children and req.subtask_mode is UNSET:
            raise ValidationFailed(
                {"$.subtaskMode": "this task has subtasks: choose `promote` or `delete`"},
                f"Task {req.number} has {len(children)} subtask(s); choose `promote` to keep"
                " them or `delete` to remove them too.",
                code="subtask_mode_required",
                candidates=[{"number": child.number} for child in children[:10]],
            )
        now = store.now(c, board)
        doomed = [TaskRef(task.id, task.scope_id, task.number, task.title, task.creator_id)]
        promoted: list[int] = []
        if children and req.subtask_mode == "delete":
            descendants = _descendants(c, task.id)
            foreign = [d.number for d in descendants if d.creator_id != p.agent_id]
            if foreign:
                raise Forbidden(
                    "descendant_not_owned",
                    "Recursive deletion needs every subtask to have the same creator;"
                    f" not yours: {', '.join(map(str, foreign[:10]))}.",
                    details={"numbers": foreign[:50]},
                )
            doomed += descendants
        elif children:
            c.execute(
                "UPDATE tasks SET parent_id = ?, updated_at = ? WHERE parent_id = ?"
                " AND deleted_at IS NULL",
                (task.parent_id, now, task.id),
            )
            promoted = [child.number for child in children]
        for gone in doomed:
            c.execute(
                "UPDATE tasks SET deleted_at = ?, updated_at = ? WHERE id = ?", (now, now, gone.id)
            )
            c.execute(
                "INSERT INTO tombstones (scope_id, workspace_id, board_id, number, deleted_by,"
                " deleted_at) VALUES (?, ?, ?, ?, ?, ?)",
                (gone.scope_id, p.workspace_id, board.id, gone.number, p.agent_id, now),
            )
            c.execute(
                "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, 'deleted', ?)",
                (gone.id, p.agent_id, now),
            )
            c.execute(
                "INSERT INTO live_events (workspace_id, kind, task_scope_id, at)"
                " VALUES (?, 'task_deleted', ?, ?)",
                (p.workspace_id, gone.scope_id, now),
            )
        return {
            "channel": board.slug,
            "deleted": sorted(gone.number for gone in doomed),
            "promoted": promoted,
        }


def _descendants(c: sqlite3.Connection, task_id: int) -> list[TaskRef]:
    """Every live task under `task_id`, at any depth, in number order."""
    return many(
        c,
        TaskRef,
        "WITH RECURSIVE d(id) AS (SELECT id FROM tasks WHERE parent_id = ? AND deleted_at"
        " IS NULL UNION ALL SELECT t.id FROM tasks t JOIN d ON t.parent_id = d.id"
        f" WHERE t.deleted_at IS NULL) SELECT {columns(TaskRef)} FROM tasks t"
        " JOIN d ON t.id = d.id ORDER BY t.number",
        (task_id,),
    )
