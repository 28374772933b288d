"""The `set-claim` operation: claim or release several tasks of one board in one transaction.

Each number succeeds, is already as desired (`unchanged`) or fails on its own (`failures`:
not found, held by another, not the assignee); the others still apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _dto as dto
from . import _resolve as resolve
from ._errors import ValidationFailed
from ._shapes import compact
from ._tokens import Principal

if TYPE_CHECKING:
    from ._store import Store


def set_claim(store: Store, p: Principal, req: dto.SetClaimRequest) -> dict[str, Any]:
    errors: dict[str, str] = {}
    if not req.numbers:
        errors["$.numbers"] = "at least one task number is required"
    seen: set[int] = set()
    for i, n in enumerate(req.numbers):
        if n < 1:
            errors[f"$.numbers[{i}]"] = "task numbers are positive"
        elif n in seen:
            errors[f"$.numbers[{i}]"] = f"task {n} appears twice"
        seen.add(n)
    if errors:
        raise ValidationFailed(errors)
    with store.transaction() as c:
        board = resolve.member_board(c, p, req.channel, "$.channel")
        changed: list[int] = []
        unchanged: list[int] = []
        failures: list[dict[str, Any]] = []
        tasks = []
        now = store.now(c, board)
        desired = p.agent_id if req.claimed else None
        for n in req.numbers:
            task = resolve.live_task(c, board, n)
            if task is None:
                failures.append(
                    {
                        "number": n,
                        "code": "task_not_found",
                        "message": f"No live task {n} on `{board.slug}`.",
                    }
                )
                continue
            holder = task.assignee_id
            if holder == desired:
                unchanged.append(n)
            elif req.claimed and holder is not None:
                failures.append(
                    {
                        "number": n,
                        "code": "claimed_by_other",
                        "message": f"Task {n} is held by {resolve.handle(c, holder)}.",
                        "holder": resolve.handle(c, holder),
                    }
                )
                continue
            elif not req.claimed and holder != p.agent_id:
                if holder is None:
                    unchanged.append(n)
                else:
                    failures.append(
                        {
                            "number": n,
                            "code": "not_assignee",
                            "message": f"Task {n} is held by {resolve.handle(c, holder)};"
                            " only its assignee can release it.",
                            "holder": resolve.handle(c, holder),
                        }
                    )
                    continue
            else:
                c.execute(
                    "UPDATE tasks SET assignee_id = ?, updated_at = ? WHERE id = ?",
                    (desired, now, task.id),
                )
                c.execute(
                    "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, ?, ?)",
                    (task.id, p.agent_id, "claimed" if req.claimed else "released", now),
                )
                changed.append(n)
            tasks.append(compact(c, board, resolve.task_by_id(c, task.id)))
        return {
            "channel": board.slug,
            "claimed": req.claimed,
            "count": len(changed) + len(unchanged),
            "changed": changed,
            "unchanged": unchanged,
            "failures": failures,
            "tasks": tasks,
        }
