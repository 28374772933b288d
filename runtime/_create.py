"""The `create` operation: one rich task or a title-only batch, under a board or a parent,
optionally keyed by an idempotency receipt inside an active workflow callback.

A create is validated whole before the transaction; inside it, a key that already has a receipt
answers the recorded result (`reused: true`) and changes nothing. The receipt is keyed on the
canonical request: defaults written out are folded away first, so the same intent replays.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from . import _dto as dto
from . import _resolve as resolve
from ._errors import Conflict, Forbidden, NotFound, ValidationFailed
from ._rows import Board, Callback, Receipt, ScopedTask, columns, json_list, one, scalar
from ._shapes import camel, compact
from ._tokens import Principal

if TYPE_CHECKING:
    from ._store import Store

_json_encode = msgspec.json.Encoder(order="sorted").encode
_json_decode = msgspec.json.decode


class Parent(msgspec.Struct, frozen=True):
    """The task new tasks are created under."""

    id: int
    number: int


def create_tasks(store: Store, p: Principal, req: dto.CreateRequest) -> dict[str, Any]:
    # Everything below reads the canonical request: a default written out is a default.
    req = _fold_create_defaults(req)
    key = _validate(req)
    digest = _payload_digest(req)
    with store.transaction() as c:
        if key is not None:
            replay = _idempotent_replay(c, p, req, key, digest)
            if replay is not None:
                return replay
        board, parent = _locate(c, p, req)
        if req.target is not UNSET:
            resolve.check_target(c, p, req.target, board, "$.target")
        now = store.now(c, board)
        created = [_insert_task(c, p, board, parent, item, req, now) for item in req.tasks]
        result = {
            "channel": board.slug,
            "parent": parent.number if parent else None,
            "tasks": [compact(c, board, resolve.task_by_id(c, tid)) for tid in created],
            "reused": False,
        }
        if key is not None:
            assert req.workflow_run_id is not UNSET and req.callback_effect_id is not UNSET
            c.execute(
                "INSERT INTO idempotency_receipts (workspace_id, agent_id, run_id,"
                " callback_effect_id, idempotency_key, payload_digest, result, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    p.workspace_id,
                    p.agent_id,
                    req.workflow_run_id,
                    req.callback_effect_id,
                    key,
                    digest,
                    _json_encode(result).decode(),
                    now,
                ),
            )
        return result


def _validate(req: dto.CreateRequest) -> str | None:
    """Refuse an inconsistent request whole; return its idempotency key, trimmed, if any."""
    errors: dict[str, str] = {}
    has_channel = req.channel is not UNSET
    has_scope = req.parent_task_scope is not UNSET
    if has_channel and has_scope:
        errors["$.parentTaskScope"] = "`parentTaskScope` is mutually exclusive with `channel`"
    elif not has_channel and not has_scope:
        errors["$.channel"] = "one locator is required: `channel` or `parentTaskScope`"
    if has_scope and req.parent is not UNSET:
        errors["$.parent"] = "`parent` cannot be combined with `parentTaskScope`"
    if req.parent is not UNSET and req.parent < 1:
        errors["$.parent"] = "`parent` must be a positive task number"
    if not req.tasks:
        errors["$.tasks"] = "at least one task is required"
    if len(req.tasks) > 1:
        for i, item in enumerate(req.tasks):
            extra = [
                f for f in item.__struct_fields__ if f != "title" and getattr(item, f) is not UNSET
            ]
            if extra:
                name = camel(extra[0])
                errors[f"$.tasks[{i}].{name}"] = (
                    "a batch of several tasks is title-only; create a rich task alone"
                )
    key: str | None = None
    if req.idempotency_key is not UNSET:
        key = req.idempotency_key.strip()
        if not key:
            errors["$.idempotencyKey"] = "the idempotency key must not be blank"
        elif len(key.encode()) > dto.MAX_KEY_BYTES:
            errors["$.idempotencyKey"] = (
                f"the idempotency key is at most {dto.MAX_KEY_BYTES} UTF-8 bytes"
            )
        elif req.workflow_run_id is UNSET or req.callback_effect_id is UNSET:
            raise ValidationFailed(
                {"$.idempotencyKey": "accepted only inside an active workflow callback"},
                "An idempotency key is accepted only during an active workflow callback.",
                code="idempotency_key_requires_callback",
            )
    if errors:
        raise ValidationFailed(errors)
    return key


def _idempotent_replay(
    c: sqlite3.Connection, p: Principal, req: dto.CreateRequest, key: str, digest: str
) -> dict[str, Any] | None:
    """The recorded result of this key, or None when the key may be reserved now."""
    callback = one(
        c,
        Callback,
        f"SELECT {columns(Callback, 'w')} FROM workflow_callbacks w WHERE w.workspace_id = ?"
        " AND w.run_id = ? AND w.callback_effect_id = ?",
        (p.workspace_id, req.workflow_run_id, req.callback_effect_id),
    )
    if callback is None:
        raise Conflict(
            "callback_not_active",
            "No workflow callback with this run and effect identity exists.",
        )
    if callback.responder_agent_id != p.agent_id:
        raise Forbidden(
            "callback_responder_mismatch",
            "The authenticated agent is not the responder of this callback.",
        )
    receipt = one(
        c,
        Receipt,
        f"SELECT {columns(Receipt, 'r')} FROM idempotency_receipts r WHERE r.workspace_id = ?"
        " AND r.agent_id = ? AND r.run_id = ? AND r.callback_effect_id = ?"
        " AND r.idempotency_key = ?",
        (p.workspace_id, p.agent_id, req.workflow_run_id, req.callback_effect_id, key),
    )
    if receipt is not None:
        if receipt.payload_digest != digest:
            raise Conflict(
                "idempotency_conflict",
                "This idempotency key was already used with a different create payload.",
                field_errors={"$.idempotencyKey": "reused with a different payload"},
            )
        original: dict[str, Any] = _json_decode(receipt.result)
        original["reused"] = True
        return original
    if callback.state != "active":
        raise Conflict(
            "callback_not_active",
            "The workflow callback has completed; a new key cannot be reserved.",
        )
    return None


def _locate(
    c: sqlite3.Connection, p: Principal, req: dto.CreateRequest
) -> tuple[Board, Parent | None]:
    """Resolve the board and the optional parent task."""
    if req.parent_task_scope is not UNSET:
        scope = req.parent_task_scope
        if scope.kind != "task":
            raise ValidationFailed(
                {"$.parentTaskScope.kind": "only `task` scopes are accepted"},
                code="scope_not_task",
            )
        tomb = scalar(
            c,
            "SELECT 1 FROM tombstones WHERE scope_id = ? AND workspace_id = ?",
            (scope.scope_id, p.workspace_id),
        )
        if tomb:
            raise NotFound(
                "scope_deleted",
                "The parent task scope was deleted.",
                field_errors={"$.parentTaskScope.scopeId": "deleted task scope"},
            )
        selected = columns(
            ScopedTask, task_id="t.id", board_id="b.id", slug="b.slug", name="b.name"
        )
        found = one(
            c,
            ScopedTask,
            f"SELECT {selected} FROM tasks t JOIN boards b ON b.id = t.board_id"
            " WHERE t.scope_id = ? AND t.workspace_id = ? AND t.deleted_at IS NULL",
            (scope.scope_id, p.workspace_id),
        )
        if found is None:
            raise NotFound(
                "scope_not_found",
                "No task scope with this id in this workspace.",
                field_errors={"$.parentTaskScope.scopeId": "unknown task scope"},
            )
        board = Board(found.board_id, found.slug, found.name)
        resolve.require_member(c, p, board)
        return board, Parent(found.task_id, found.number)
    assert req.channel is not UNSET
    board = resolve.member_board(c, p, req.channel, "$.channel")
    if req.parent is UNSET:
        return board, None
    parent = resolve.task(c, board, req.parent, "$.parent")
    return board, Parent(parent.id, parent.number)


def _insert_task(
    c: sqlite3.Connection,
    p: Principal,
    board: Board,
    parent: Parent | None,
    item: dto.NewTask,
    req: dto.CreateRequest,
    now: str,
) -> int:
    number = scalar(
        c,
        "UPDATE boards SET next_number = next_number + 1 WHERE id = ? RETURNING next_number - 1",
        (board.id,),
    )
    assignee = None
    if item.assignee is not UNSET:
        assignee = resolve.board_member(c, board, item.assignee, "$.tasks[0].assignee")
    priority = None if item.priority is UNSET else item.priority
    scope_id = "tsk_" + secrets.token_hex(8)
    cur = c.execute(
        "INSERT INTO tasks (scope_id, workspace_id, board_id, number, parent_id, title,"
        " description, status, priority, priority_rank, labels, assignee_id, creator_id,"
        " checklist, urls, blocker, source_target, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            scope_id,
            p.workspace_id,
            board.id,
            number,
            parent.id if parent else None,
            item.title,
            _or_none(item.description),
            "todo" if item.status is UNSET else item.status,
            priority,
            dto.PRIORITY_RANK[priority],
            json_list(item.labels),
            assignee,
            p.agent_id,
            json_list(item.checklist),
            json_list(item.urls),
            _or_none(item.blocker),
            _or_none(req.target),
            now,
            now,
        ),
    )
    task_id = cur.lastrowid
    assert task_id is not None
    c.execute(
        "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, 'created', ?)",
        (task_id, p.agent_id, now),
    )
    c.execute(
        "INSERT INTO live_events (workspace_id, kind, task_scope_id, at)"
        " VALUES (?, 'task_created', ?, ?)",
        (p.workspace_id, scope_id, now),
    )
    return task_id


def _fold_create_defaults(req: dto.CreateRequest) -> dto.CreateRequest:
    """The request with every new task's spelled-out defaults left out (one canonical form)."""
    tasks = []
    for item in req.tasks:
        folded = {
            name: UNSET
            for name, default in dto.NEW_TASK_DEFAULTS.items()
            if getattr(item, name) == default
        }
        tasks.append(msgspec.structs.replace(item, **folded) if folded else item)
    return msgspec.structs.replace(req, tasks=tasks)


def _payload_digest(req: dto.CreateRequest) -> str:
    """The receipt digest over the canonical create payload (defaults folded by the caller)."""
    canonical = {
        "channel": req.channel,
        "parent": req.parent,
        "parentTaskScope": req.parent_task_scope,
        "target": req.target,
        "tasks": req.tasks,
    }
    clean = {k: v for k, v in canonical.items() if v is not UNSET}
    return hashlib.sha256(_json_encode(clean)).hexdigest()


def _or_none(value: Any) -> Any:
    return None if value is UNSET else value
