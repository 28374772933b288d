"""Task semantics of contract section 13 over SQLite: one transaction per operation.

The store knows nothing of HTTP. Each public method takes the authenticated principal and a
parsed DTO, validates the complete intent, and either commits the whole operation or raises an
`ApiError` having changed nothing.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import hmac
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET

from . import _dto as dto
from ._clock import Clock
from ._errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized, ValidationFailed
from ._schema import migrate

_json_encode = msgspec.json.Encoder(order="sorted").encode
_json_decode = msgspec.json.decode

_TASK_COLUMNS = (
    "t.id, t.scope_id, t.number, t.parent_id, t.title, t.description, t.status, t.priority,"
    " t.labels, t.assignee_id, t.creator_id, t.checklist, t.urls, t.attachments, t.blocker,"
    " t.source_target, t.created_at, t.updated_at, t.board_id"
)
_CHECKPOINTS_IN_DETAIL = 5
_CHILDREN_IN_DETAIL = 20
_PATCH_COLUMN = {"assignee": "assignee_id", "parent": "parent_id", "thread": "source_target"}
_LIST_FIELDS = ("labels", "checklist", "urls", "attachments", "messages", "workspaces")


@dataclass(frozen=True, slots=True)
class Principal:
    workspace_id: str
    agent_id: str


@dataclass(frozen=True, slots=True)
class Board:
    id: int
    slug: str
    name: str


class Store:
    """The runtime's storage and the rules of every operation."""

    def __init__(
        self, conn: sqlite3.Connection, *, cursor_secret: bytes, token_ttl_seconds: float = 900.0
    ) -> None:
        self._conn = conn
        self._clock = Clock()
        self._cursor_secret = cursor_secret
        self.token_ttl_seconds = token_ttl_seconds

    @classmethod
    def open(
        cls, path: str, *, cursor_secret: bytes | None = None, token_ttl_seconds: float = 900.0
    ) -> Store:
        conn = connect(path)
        migrate(conn)
        return cls(
            conn,
            cursor_secret=cursor_secret or secrets.token_bytes(32),
            token_ttl_seconds=token_ttl_seconds,
        )

    def close(self) -> None:
        self._conn.close()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """The rows of a read-only query, as tuples (the local board and callback listings)."""
        return [tuple(row) for row in self._conn.execute(sql, params).fetchall()]

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _now(self, c: sqlite3.Connection, board: Board) -> str:
        """An instant later than any on the board's tasks, so `updatedAt` stays a sound revision
        token when several processes share the database (their clocks can hand out one
        microsecond twice). The caller holds the write lock; the index makes this one seek."""
        latest = c.execute(
            "SELECT max(updated_at) FROM tasks WHERE board_id = ?", (board.id,)
        ).fetchone()[0]
        return self._clock.now(after=latest)

    # --- tokens --------------------------------------------------------------------------

    def mint_token(
        self, workspace_id: str, agent_id: str, ttl_seconds: float | None = None
    ) -> tuple[str, float]:
        ttl = self.token_ttl_seconds if ttl_seconds is None else ttl_seconds
        with self._tx() as c:
            self._agent(c, workspace_id, agent_id)
            token = "atk_" + secrets.token_urlsafe(32)
            expires_at = time.time() + ttl
            c.execute(
                "INSERT INTO tokens VALUES (?, ?, ?, ?)",
                (_token_hash(token), workspace_id, agent_id, expires_at),
            )
        return token, expires_at

    def authenticate(
        self, authorization: str | None, workspace_id: str, agent_id: str
    ) -> Principal:
        if not authorization or not authorization.startswith("Bearer "):
            raise Unauthorized("unauthorized", "A bearer token is required.")
        token = authorization[len("Bearer ") :].strip()
        row = self._conn.execute(
            "SELECT workspace_id, agent_id, expires_at FROM tokens WHERE token_hash = ?",
            (_token_hash(token),),
        ).fetchone()
        if row is None:
            raise Unauthorized("unauthorized", "The bearer token is not recognised.")
        if row[2] <= time.time():
            raise Unauthorized("token_expired", "The bearer token has expired; mint a fresh one.")
        if (row[0], row[1]) != (workspace_id, agent_id):
            raise Forbidden(
                "token_scope_mismatch", "The bearer token belongs to another workspace or agent."
            )
        return Principal(workspace_id, agent_id)

    # --- seeding and admin ---------------------------------------------------------------

    def add_workspace(self, workspace_id: str, name: str) -> None:
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO workspaces VALUES (?, ?)", (workspace_id, name))

    def add_member(
        self,
        workspace_id: str,
        member_id: str,
        handle: str,
        kind: str,
        display_name: str | None = None,
    ) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO members VALUES (?, ?, ?, ?, ?)",
                (member_id, workspace_id, handle, kind, display_name or handle[1:]),
            )

    def add_board(
        self, workspace_id: str, slug: str, member_ids: Sequence[str], name: str | None = None
    ) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO boards (workspace_id, slug, name) VALUES (?, ?, ?)",
                (workspace_id, slug, name or slug),
            )
            board_id = c.execute(
                "SELECT id FROM boards WHERE workspace_id = ? AND slug = ?", (workspace_id, slug)
            ).fetchone()[0]
            c.executemany(
                "INSERT OR IGNORE INTO board_members VALUES (?, ?)",
                [(board_id, m) for m in member_ids],
            )

    def open_callback(
        self, workspace_id: str, run_id: str, callback_effect_id: str, responder_agent_id: str
    ) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO workflow_callbacks VALUES (?, ?, ?, ?, 'active')",
                (workspace_id, run_id, callback_effect_id, responder_agent_id),
            )

    def complete_callback(self, workspace_id: str, run_id: str, callback_effect_id: str) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE workflow_callbacks SET state = 'completed' WHERE workspace_id = ?"
                " AND run_id = ? AND callback_effect_id = ?",
                (workspace_id, run_id, callback_effect_id),
            )

    def stats(self) -> dict[str, int]:
        tables = (
            "tasks",
            "activity",
            "live_events",
            "idempotency_receipts",
            "checkpoints",
            "tombstones",
        )
        return {t: self._conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}

    # --- list ----------------------------------------------------------------------------

    def list_tasks(self, p: Principal, q: dto.ListQuery) -> dict[str, Any]:
        c = self._conn
        board = self._member_board(c, p, q.channel, "$.channel")
        searching = bool(q.query.strip())
        errors: dict[str, str] = {}
        if q.status == "all" and not searching:
            errors["$.status"] = "`all` is accepted only with a non-empty query"
        if q.sort == "relevance" and not searching:
            errors["$.sort"] = "`relevance` is accepted only with a non-empty query"
        if errors:
            raise ValidationFailed(errors)
        sort = q.sort or ("relevance" if searching else "number")
        digest = _filter_digest(board.slug, q, sort)
        after = self._decode_cursor(q.cursor, digest) if q.cursor else None

        where = ["t.board_id = ?", "t.deleted_at IS NULL"]
        args: list[Any] = [board.id]
        if q.status == "open":
            where.append("t.status IN ('todo', 'in_progress', 'in_review')")
        elif q.status != "all":
            where.append("t.status = ?")
            args.append(q.status)
        if not q.include_subtasks:
            where.append("t.parent_id IS NULL")
        f = q.filters
        if f.assignee is not UNSET:
            member = self._member_by_handle(c, p.workspace_id, f.assignee)
            where.append("t.assignee_id IS ?")
            args.append(member)
        if f.label is not UNSET:
            where.append("EXISTS (SELECT 1 FROM json_each(t.labels) WHERE value = ?)")
            args.append(f.label)
        if f.priority is not UNSET:
            where.append("t.priority = ?")
            args.append(f.priority)

        source = "tasks t"
        rank = "0.0"
        if searching:
            source = "tasks_fts JOIN tasks t ON t.id = tasks_fts.rowid"
            where.append("tasks_fts MATCH ?")
            args.append(_fts_query(q.query))
            rank = "bm25(tasks_fts, 4.0, 1.0)"
        keys, order, seek = _SORTS[sort]
        outer = ""
        if after is not None:
            outer = f" WHERE {seek}"
            args.extend(after[i] for i in _SEEK_ARGS[len(keys)])
        # The inner query names every column so the keyset predicate can use the FTS rank.
        sql = (
            f"SELECT * FROM (SELECT {_TASK_COLUMNS}, t.priority_rank AS priority_rank,"
            f" {rank} AS rank FROM {source} WHERE {' AND '.join(where)}){outer}"
            f" ORDER BY {order} LIMIT ?"
        )
        rows = c.execute(sql, [*args, q.limit + 1]).fetchall()
        page = rows[: q.limit]
        result: dict[str, Any] = {
            "channel": board.slug,
            "items": [self._compact(c, board, r) for r in page],
        }
        if len(rows) > q.limit:
            last = page[-1]
            result["nextCursor"] = self._encode_cursor(digest, [last[_COLUMN[k]] for k in keys])
        return result

    def _encode_cursor(self, digest: str, key: list[Any]) -> str:
        body = base64.urlsafe_b64encode(_json_encode({"d": digest, "k": key})).rstrip(b"=")
        mac = hmac.new(self._cursor_secret, body, hashlib.sha256).hexdigest()[:16]
        return body.decode() + "." + mac

    def _decode_cursor(self, cursor: str, digest: str) -> list[Any]:
        invalid = BadRequest(
            "cursor_invalid",
            "The cursor is not one this server issued.",
            field_errors={"$.cursor": "not a cursor issued by this server"},
        )
        body, _, mac = cursor.partition(".")
        good = hmac.new(self._cursor_secret, body.encode(), hashlib.sha256).hexdigest()[:16]
        if not hmac.compare_digest(mac.encode(), good.encode()):  # str: ASCII only
            raise invalid
        try:
            decoded = _json_decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, msgspec.DecodeError):
            raise invalid from None
        if decoded.get("d") != digest:
            raise ValidationFailed(
                {"$.cursor": "the cursor belongs to another query or filter set"},
                "The cursor was issued for a different query, status, sort or filter; "
                "start again without a cursor.",
                code="cursor_mismatch",
            )
        key: list[Any] = decoded["k"]
        return key

    # --- get -----------------------------------------------------------------------------

    def get_task(self, p: Principal, req: dto.Locator) -> dict[str, Any]:
        c = self._conn
        board = self._member_board(c, p, req.channel, "$.channel")
        row = self._task(c, board, req.number, "$.number")
        return {"task": self._detail(c, board, row)}

    # --- create --------------------------------------------------------------------------

    def create_tasks(self, p: Principal, req: dto.CreateRequest) -> dict[str, Any]:
        # Everything below reads the canonical request: a default written out is a default.
        req = _fold_create_defaults(req)
        key = self._validate_create(req)
        digest = _payload_digest(req)
        with self._tx() as c:
            if key is not None:
                replay = self._idempotent_replay(c, p, req, key, digest)
                if replay is not None:
                    return replay
            board, parent = self._create_locator(c, p, req)
            if req.target is not UNSET:
                self._check_target(c, p, req.target, board, "$.target")
            now = self._now(c, board)
            created = []
            for item in req.tasks:
                created.append(self._insert_task(c, p, board, parent, item, req, now))
            result = {
                "channel": board.slug,
                "parent": parent[1] if parent else None,
                "tasks": [self._compact(c, board, self._task_row(c, tid)) for tid in created],
                "reused": False,
            }
            if key is not None:
                assert req.workflow_run_id is not UNSET and req.callback_effect_id is not UNSET
                c.execute(
                    "INSERT INTO idempotency_receipts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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

    def _validate_create(self, req: dto.CreateRequest) -> str | None:
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
                    f
                    for f in item.__struct_fields__
                    if f != "title" and getattr(item, f) is not UNSET
                ]
                if extra:
                    name = _camel(extra[0])
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
        self, c: sqlite3.Connection, p: Principal, req: dto.CreateRequest, key: str, digest: str
    ) -> dict[str, Any] | None:
        cb = c.execute(
            "SELECT responder_agent_id, state FROM workflow_callbacks WHERE workspace_id = ?"
            " AND run_id = ? AND callback_effect_id = ?",
            (p.workspace_id, req.workflow_run_id, req.callback_effect_id),
        ).fetchone()
        if cb is None:
            raise Conflict(
                "callback_not_active",
                "No workflow callback with this run and effect identity exists.",
            )
        if cb[0] != p.agent_id:
            raise Forbidden(
                "callback_responder_mismatch",
                "The authenticated agent is not the responder of this callback.",
            )
        receipt = c.execute(
            "SELECT payload_digest, result FROM idempotency_receipts WHERE workspace_id = ?"
            " AND agent_id = ? AND run_id = ? AND callback_effect_id = ? AND idempotency_key = ?",
            (p.workspace_id, p.agent_id, req.workflow_run_id, req.callback_effect_id, key),
        ).fetchone()
        if receipt is not None:
            if receipt[0] != digest:
                raise Conflict(
                    "idempotency_conflict",
                    "This idempotency key was already used with a different create payload.",
                    field_errors={"$.idempotencyKey": "reused with a different payload"},
                )
            original: dict[str, Any] = _json_decode(receipt[1])
            original["reused"] = True
            return original
        if cb[1] != "active":
            raise Conflict(
                "callback_not_active",
                "The workflow callback has completed; a new key cannot be reserved.",
            )
        return None

    def _create_locator(
        self,
        c: sqlite3.Connection,
        p: Principal,
        req: dto.CreateRequest,
    ) -> tuple[Board, tuple[int, int] | None]:
        """Resolve the board and the optional parent task as (task id, number)."""
        if req.parent_task_scope is not UNSET:
            scope = req.parent_task_scope
            if scope.kind != "task":
                raise ValidationFailed(
                    {"$.parentTaskScope.kind": "only `task` scopes are accepted"},
                    code="scope_not_task",
                )
            tomb = c.execute(
                "SELECT 1 FROM tombstones WHERE scope_id = ? AND workspace_id = ?",
                (scope.scope_id, p.workspace_id),
            ).fetchone()
            if tomb:
                raise NotFound(
                    "scope_deleted",
                    "The parent task scope was deleted.",
                    field_errors={"$.parentTaskScope.scopeId": "deleted task scope"},
                )
            row = c.execute(
                "SELECT t.id, t.number, b.id, b.slug, b.name FROM tasks t JOIN boards b"
                " ON b.id = t.board_id WHERE t.scope_id = ? AND t.workspace_id = ?"
                " AND t.deleted_at IS NULL",
                (scope.scope_id, p.workspace_id),
            ).fetchone()
            if row is None:
                raise NotFound(
                    "scope_not_found",
                    "No task scope with this id in this workspace.",
                    field_errors={"$.parentTaskScope.scopeId": "unknown task scope"},
                )
            board = Board(row[2], row[3], row[4])
            self._require_member(c, p, board)
            return board, (row[0], row[1])
        assert req.channel is not UNSET
        board = self._member_board(c, p, req.channel, "$.channel")
        if req.parent is UNSET:
            return board, None
        parent = self._task(c, board, req.parent, "$.parent")
        return board, (parent[0], parent[2])

    def _check_target(
        self, c: sqlite3.Connection, p: Principal, target: str, board: Board, path: str
    ) -> None:
        """A source thread (create's `target`, the patch's `thread`) on the task's own board."""
        slug, _, thread = target[1:].partition(":")
        if not target.startswith("#") or not slug or (":" in target and not thread):
            raise ValidationFailed(
                {path: "expected `#channel` or `#channel:threadid`"}, code="target_invalid"
            )
        found = self._board(c, p.workspace_id, slug)
        if found is None:
            raise NotFound(
                "target_not_found",
                f"No board `{slug}` for target `{target}`.",
                field_errors={path: "unknown board"},
                candidates=self._board_candidates(c, p, slug),
            )
        if found.id != board.id:
            raise Conflict(
                "target_conflict",
                f"Target `{target}` is on board `{found.slug}`, not `{board.slug}`.",
                field_errors={path: f"resolves to board `{found.slug}`"},
            )

    def _insert_task(
        self,
        c: sqlite3.Connection,
        p: Principal,
        board: Board,
        parent: tuple[int, int] | None,
        item: dto.NewTask,
        req: dto.CreateRequest,
        now: str,
    ) -> int:
        number = c.execute(
            "UPDATE boards SET next_number = next_number + 1 WHERE id = ?"
            " RETURNING next_number - 1",
            (board.id,),
        ).fetchone()[0]
        assignee = None
        if item.assignee is not UNSET:
            assignee = self._board_member(c, p, board, item.assignee, "$.tasks[0].assignee")
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
                parent[0] if parent else None,
                item.title,
                _or_none(item.description),
                "todo" if item.status is UNSET else item.status,
                priority,
                dto.PRIORITY_RANK[priority],
                _json_list(item.labels),
                assignee,
                p.agent_id,
                _json_list(item.checklist),
                _json_list(item.urls),
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

    # --- update --------------------------------------------------------------------------

    def update_task(self, p: Principal, req: dto.UpdateRequest) -> dict[str, Any]:
        patch = req.patch
        present = [f for f in dto.PATCH_FIELDS if getattr(patch, f) is not UNSET]
        if not present:
            raise ValidationFailed(
                {"$.patch": "the patch is empty; set at least one field"},
                "An empty patch changes nothing.",
                code="empty_patch",
            )
        with self._tx() as c:
            board = self._member_board(c, p, req.channel, "$.channel")
            row = self._task(c, board, req.number, "$.number")
            if req.expected_updated_at is not UNSET and req.expected_updated_at != row[17]:
                raise Conflict(
                    "stale_update",
                    "The task changed since `expectedUpdatedAt`; read it again and retry.",
                    field_errors={"$.expectedUpdatedAt": "does not match the task's updatedAt"},
                    details={"currentUpdatedAt": row[17]},
                )
            changes, changed = self._patch_changes(c, p, board, row, patch, present)
            if changes:
                now = self._now(c, board)
                assigns = ", ".join(f"{col} = ?" for col in changes)
                c.execute(
                    f"UPDATE tasks SET {assigns}, updated_at = ? WHERE id = ?",
                    [*changes.values(), now, row[0]],
                )
                c.execute(
                    "INSERT INTO activity (task_id, actor_id, kind, detail, at)"
                    " VALUES (?, ?, 'updated', ?, ?)",
                    (row[0], p.agent_id, _json_encode({"fields": changed}).decode(), now),
                )
            task = self._compact(c, board, self._task_row(c, row[0]))
            return {"task": task, "changed": [_camel(f) for f in changed]}

    def _patch_changes(
        self,
        c: sqlite3.Connection,
        p: Principal,
        board: Board,
        row: Any,
        patch: dto.Patch,
        present: list[str],
    ) -> tuple[dict[str, Any], list[str]]:
        """Map the patch onto the columns it really changes; a no-op field changes nothing."""
        current = {
            "title": row[4],
            "description": row[5],
            "status": row[6],
            "priority": row[7],
            "labels": row[8],
            "assignee": row[9],
            "checklist": row[11],
            "urls": row[12],
            "attachments": row[13],
            "blocker": row[14],
            "parent": row[3],
            "thread": row[15],
            **self._links(c, row[0]),
        }
        changes: dict[str, Any] = {}
        changed: list[str] = []
        for field in present:
            value: Any = getattr(patch, field)
            if field == "assignee" and value is not None:
                value = self._board_member(c, p, board, value, "$.patch.assignee")
            elif field == "parent" and value is not None:
                value = self._reparent_target(c, board, row, value)
            elif field == "thread" and value is not None:
                self._check_target(c, p, value, board, "$.patch.thread")
            elif field == "messages":
                for i, ref in enumerate(value):
                    self._member_board(c, p, ref[1:].partition(":")[0], f"$.patch.messages[{i}]")
            if field in _LIST_FIELDS:
                value = _json_list(value)
            if value == current[field]:
                continue
            changed.append(field)
            changes[_PATCH_COLUMN.get(field, field)] = value
            if field == "priority":
                changes["priority_rank"] = dto.PRIORITY_RANK[value]
        return changes, changed

    def _reparent_target(self, c: sqlite3.Connection, board: Board, row: Any, number: int) -> int:
        if number < 1:
            raise ValidationFailed({"$.patch.parent": "`parent` must be a positive task number"})
        parent = self._task(c, board, number, "$.patch.parent")
        ancestor: int | None = parent[0]
        while ancestor is not None:
            if ancestor == row[0]:
                raise ValidationFailed(
                    {"$.patch.parent": f"task {number} is this task or one of its subtasks"},
                    "Re-parenting would create a cycle.",
                    code="parent_cycle",
                )
            ancestor = c.execute(
                "SELECT parent_id FROM tasks WHERE id = ?", (ancestor,)
            ).fetchone()[0]
        return int(parent[0])

    # --- checkpoint ----------------------------------------------------------------------

    def add_checkpoint(self, p: Principal, req: dto.CheckpointRequest) -> dict[str, Any]:
        summary = req.summary.strip()
        if not summary:
            raise ValidationFailed({"$.summary": "the summary must not be blank"})
        with self._tx() as c:
            board = self._member_board(c, p, req.channel, "$.channel")
            row = self._task(c, board, req.number, "$.number")
            now = self._now(c, board)
            cur = c.execute(
                "INSERT INTO checkpoints (task_id, summary, author_id, created_at)"
                " VALUES (?, ?, ?, ?)",
                (row[0], summary, p.agent_id, now),
            )
            c.execute(
                "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, 'checkpoint', ?)",
                (row[0], p.agent_id, now),
            )
            return {
                "checkpoint": {
                    "id": cur.lastrowid,
                    "summary": summary,
                    "author": self._handle(c, p.agent_id),
                    "createdAt": now,
                },
                "task": self._compact(c, board, row),
            }

    # --- set-claim -----------------------------------------------------------------------

    def set_claim(self, p: Principal, req: dto.SetClaimRequest) -> dict[str, Any]:
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
        with self._tx() as c:
            board = self._member_board(c, p, req.channel, "$.channel")
            changed: list[int] = []
            unchanged: list[int] = []
            failures: list[dict[str, Any]] = []
            tasks = []
            now = self._now(c, board)
            for n in req.numbers:
                row = c.execute(
                    f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE t.board_id = ?"
                    " AND t.number = ? AND t.deleted_at IS NULL",
                    (board.id, n),
                ).fetchone()
                if row is None:
                    failures.append(
                        {
                            "number": n,
                            "code": "task_not_found",
                            "message": f"No live task {n} on `{board.slug}`.",
                        }
                    )
                    continue
                holder = row[9]
                desired = p.agent_id if req.claimed else None
                if holder == desired:
                    unchanged.append(n)
                elif req.claimed and holder is not None:
                    failures.append(
                        {
                            "number": n,
                            "code": "claimed_by_other",
                            "message": f"Task {n} is held by {self._handle(c, holder)}.",
                            "holder": self._handle(c, holder),
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
                                "message": f"Task {n} is held by {self._handle(c, holder)};"
                                " only its assignee can release it.",
                                "holder": self._handle(c, holder),
                            }
                        )
                        continue
                else:
                    c.execute(
                        "UPDATE tasks SET assignee_id = ?, updated_at = ? WHERE id = ?",
                        (desired, now, row[0]),
                    )
                    c.execute(
                        "INSERT INTO activity (task_id, actor_id, kind, at) VALUES (?, ?, ?, ?)",
                        (row[0], p.agent_id, "claimed" if req.claimed else "released", now),
                    )
                    changed.append(n)
                tasks.append(self._compact(c, board, self._task_row(c, row[0])))
            return {
                "channel": board.slug,
                "claimed": req.claimed,
                "count": len(changed) + len(unchanged),
                "changed": changed,
                "unchanged": unchanged,
                "failures": failures,
                "tasks": tasks,
            }

    # --- delete --------------------------------------------------------------------------

    def delete_task(self, p: Principal, req: dto.DeleteRequest) -> dict[str, Any]:
        with self._tx() as c:
            board = self._member_board(c, p, req.channel, "$.channel")
            row = self._task(c, board, req.number, "$.number")
            if row[10] != p.agent_id:
                raise Forbidden(
                    "not_creator",
                    f"Task {req.number} was created by "
                    f"{self._handle(c, row[10])}; only its creator may delete it.",
                )
            children = c.execute(
                "SELECT id, number FROM tasks WHERE parent_id = ?"
                " AND deleted_at IS NULL ORDER BY number",
                (row[0],),
            ).fetchall()
            if children and req.subtask_mode is UNSET:
                raise ValidationFailed(
                    {"$.subtaskMode": "this task has subtasks: choose `promote` or `delete`"},
                    f"Task {req.number} has {len(children)} subtask(s); choose `promote` to keep"
                    " them or `delete` to remove them too.",
                    code="subtask_mode_required",
                    candidates=[{"number": n} for _, n in children[:10]],
                )
            now = self._now(c, board)
            doomed = [(row[0], row[1], row[2])]
            promoted: list[int] = []
            if children and req.subtask_mode == "delete":
                descendants = self._descendants(c, row[0])
                foreign = [n for _, _, n, creator in descendants if creator != p.agent_id]
                if foreign:
                    raise Forbidden(
                        "descendant_not_owned",
                        "Recursive deletion needs every subtask to have the same creator;"
                        f" not yours: {', '.join(map(str, foreign[:10]))}.",
                        details={"numbers": foreign[:50]},
                    )
                doomed += [(tid, scope, n) for tid, scope, n, _ in descendants]
            elif children:
                c.execute(
                    "UPDATE tasks SET parent_id = ?, updated_at = ? WHERE parent_id = ?"
                    " AND deleted_at IS NULL",
                    (row[3], now, row[0]),
                )
                promoted = [n for _, n in children]
            for tid, scope, n in doomed:
                c.execute(
                    "UPDATE tasks SET deleted_at = ?, updated_at = ? WHERE id = ?", (now, now, tid)
                )
                c.execute(
                    "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?, ?)",
                    (scope, p.workspace_id, board.id, n, p.agent_id, now),
                )
                c.execute(
                    "INSERT INTO activity (task_id, actor_id, kind, at)"
                    " VALUES (?, ?, 'deleted', ?)",
                    (tid, p.agent_id, now),
                )
                c.execute(
                    "INSERT INTO live_events (workspace_id, kind, task_scope_id, at)"
                    " VALUES (?, 'task_deleted', ?, ?)",
                    (p.workspace_id, scope, now),
                )
            return {
                "channel": board.slug,
                "deleted": sorted(n for _, _, n in doomed),
                "promoted": promoted,
            }

    def _descendants(self, c: sqlite3.Connection, task_id: int) -> list[tuple[int, str, int, str]]:
        return c.execute(
            "WITH RECURSIVE d(id) AS (SELECT id FROM tasks WHERE parent_id = ? AND deleted_at"
            " IS NULL UNION ALL SELECT t.id FROM tasks t JOIN d ON t.parent_id = d.id"
            " WHERE t.deleted_at IS NULL)"
            " SELECT t.id, t.scope_id, t.number, t.creator_id FROM tasks t JOIN d ON t.id = d.id"
            " ORDER BY t.number",
            (task_id,),
        ).fetchall()

    # --- resolution helpers --------------------------------------------------------------

    def _agent(self, c: sqlite3.Connection, workspace_id: str, agent_id: str) -> None:
        row = c.execute(
            "SELECT kind FROM members WHERE id = ? AND workspace_id = ?", (agent_id, workspace_id)
        ).fetchone()
        if row is None or row[0] != "agent":
            raise NotFound("agent_not_found", "No such agent in this workspace.")

    def _board(self, c: sqlite3.Connection, workspace_id: str, slug: str) -> Board | None:
        row = c.execute(
            "SELECT id, slug, name FROM boards WHERE workspace_id = ? AND slug = ?",
            (workspace_id, slug),
        ).fetchone()
        return Board(*row) if row else None

    def _member_board(self, c: sqlite3.Connection, p: Principal, slug: str, path: str) -> Board:
        board = self._board(c, p.workspace_id, slug)
        if board is None:
            raise NotFound(
                "channel_not_found",
                f"No board `{slug}` in this workspace.",
                field_errors={path: "unknown board"},
                candidates=self._board_candidates(c, p, slug),
            )
        self._require_member(c, p, board)
        return board

    def _require_member(self, c: sqlite3.Connection, p: Principal, board: Board) -> None:
        if (
            c.execute(
                "SELECT 1 FROM board_members WHERE board_id = ? AND member_id = ?",
                (board.id, p.agent_id),
            ).fetchone()
            is None
        ):
            raise Forbidden("not_a_member", f"The agent is not a member of board `{board.slug}`.")

    def _board_candidates(
        self, c: sqlite3.Connection, p: Principal, slug: str
    ) -> list[dict[str, Any]]:
        rows = c.execute(
            "SELECT b.slug, b.name FROM boards b JOIN board_members m ON"
            " m.board_id = b.id WHERE b.workspace_id = ? AND m.member_id = ?"
            " ORDER BY b.slug",
            (p.workspace_id, p.agent_id),
        ).fetchall()
        names = {r[0]: r[1] for r in rows}
        close = difflib.get_close_matches(slug, list(names), n=3, cutoff=0.3) or list(names)[:3]
        return [{"channel": s, "name": names[s]} for s in close]

    def _task(self, c: sqlite3.Connection, board: Board, number: int, path: str) -> Any:
        row = c.execute(
            f"SELECT {_TASK_COLUMNS}, t.deleted_at FROM tasks t WHERE t.board_id = ?"
            " AND t.number = ?",
            (board.id, number),
        ).fetchone()
        if row is not None and row[-1] is None:
            return row[:-1]
        if row is not None:
            live_parent = self._live_parent(c, row[3])
            raise NotFound(
                "task_deleted",
                f"Task {number} on `{board.slug}` was deleted.",
                field_errors={path: "deleted task"},
                candidates=[live_parent] if live_parent else [],
            )
        near = c.execute(
            "SELECT number, title FROM tasks WHERE board_id = ? AND deleted_at IS NULL"
            " ORDER BY abs(number - ?), number LIMIT 3",
            (board.id, number),
        ).fetchall()
        raise NotFound(
            "task_not_found",
            f"No task {number} on `{board.slug}`.",
            field_errors={path: "unknown task number"},
            candidates=[{"channel": board.slug, "number": n, "title": t} for n, t in near],
        )

    def _live_parent(self, c: sqlite3.Connection, parent_id: int | None) -> dict[str, Any] | None:
        while parent_id is not None:
            row = c.execute(
                "SELECT t.number, t.title, b.slug, t.deleted_at, t.parent_id FROM tasks"
                " t JOIN boards b ON b.id = t.board_id WHERE t.id = ?",
                (parent_id,),
            ).fetchone()
            if row[3] is None:
                return {"channel": row[2], "number": row[0], "title": row[1]}
            parent_id = row[4]
        return None

    def _task_row(self, c: sqlite3.Connection, task_id: int) -> Any:
        return c.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks t WHERE t.id = ?", (task_id,)
        ).fetchone()

    def _member_by_handle(
        self, c: sqlite3.Connection, workspace_id: str, handle: str
    ) -> str | None:
        row = c.execute(
            "SELECT id FROM members WHERE workspace_id = ? AND handle = ?", (workspace_id, handle)
        ).fetchone()
        return row[0] if row else None

    def _board_member(
        self, c: sqlite3.Connection, p: Principal, board: Board, handle: str, path: str
    ) -> str:
        rows = c.execute(
            "SELECT m.id, m.handle FROM members m JOIN board_members bm ON"
            " bm.member_id = m.id WHERE bm.board_id = ? ORDER BY m.handle",
            (board.id,),
        ).fetchall()
        by_handle: dict[str, str] = {h: i for i, h in rows}
        if handle in by_handle:
            return by_handle[handle]
        close = difflib.get_close_matches(handle, list(by_handle), n=3, cutoff=0.3)
        raise ValidationFailed(
            {path: f"`{handle}` is not a member of board `{board.slug}`"},
            code="assignee_not_member",
            candidates=[{"assignee": h} for h in close or list(by_handle)[:3]],
        )

    def _handle(self, c: sqlite3.Connection, member_id: str | None) -> str | None:
        if member_id is None:
            return None
        row = c.execute("SELECT handle FROM members WHERE id = ?", (member_id,)).fetchone()
        return row[0] if row else member_id

    # --- shapes --------------------------------------------------------------------------

    def _compact(self, c: sqlite3.Connection, board: Board, row: Any) -> dict[str, Any]:
        parent = None
        if row[3] is not None:
            parent = c.execute("SELECT number FROM tasks WHERE id = ?", (row[3],)).fetchone()[0]
        subtasks = c.execute(
            "SELECT count(*) FROM tasks WHERE parent_id = ? AND deleted_at IS NULL", (row[0],)
        ).fetchone()[0]
        task: dict[str, Any] = {
            "channel": board.slug,
            "number": row[2],
            "scopeId": row[1],
            "title": row[4],
            "status": row[6],
            "priority": row[7],
            "assignee": self._handle(c, row[9]),
            "labels": _json_decode(row[8]),
            "parent": parent,
            "subtaskCount": subtasks,
            "updatedAt": row[17],
        }
        return task

    def _links(self, c: sqlite3.Connection, task_id: int) -> dict[str, Any]:
        """A task's linked messages and work locations, as stored (JSON lists)."""
        row = c.execute(
            "SELECT messages, workspaces FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
        return {"messages": row[0], "workspaces": row[1]}

    def _detail(self, c: sqlite3.Connection, board: Board, row: Any) -> dict[str, Any]:
        task = self._compact(c, board, row)
        checkpoints = c.execute(
            "SELECT id, summary, author_id, created_at FROM checkpoints WHERE task_id = ?"
            " ORDER BY id DESC LIMIT ?",
            (row[0], _CHECKPOINTS_IN_DETAIL),
        ).fetchall()
        checkpoint_count = c.execute(
            "SELECT count(*) FROM checkpoints WHERE task_id = ?", (row[0],)
        ).fetchone()[0]
        children = c.execute(
            "SELECT number, title, status FROM tasks WHERE parent_id = ? AND deleted_at IS NULL"
            " ORDER BY number LIMIT ?",
            (row[0], _CHILDREN_IN_DETAIL),
        ).fetchall()
        task.update(
            {
                "description": row[5],
                "checklist": _json_decode(row[11]),
                "urls": _json_decode(row[12]),
                "attachments": [
                    {k: a[k] for k in ("name", "mediaType", "sizeBytes") if k in a}
                    for a in _json_decode(row[13])
                ],
                "blocker": row[14],
                "thread": row[15],
                **{k: _json_decode(v) for k, v in self._links(c, row[0]).items()},
                "creator": self._handle(c, row[10]),
                "createdAt": row[16],
                "checkpoints": {
                    "items": [
                        {"id": i, "summary": s, "author": self._handle(c, a), "createdAt": t}
                        for i, s, a, t in checkpoints
                    ],
                    "total": checkpoint_count,
                },
                "subtasks": {
                    "items": [{"number": n, "title": t, "status": s} for n, t, s in children],
                    "total": task["subtaskCount"],
                },
            }
        )
        return task


# --- module helpers ----------------------------------------------------------------------

_COLUMN = {"number": 2, "updated_at": 17, "priority_rank": 19, "rank": 20}
_SORTS: dict[str, tuple[tuple[str, ...], str, str]] = {
    # sort -> (cursor key columns, ORDER BY, keyset predicate after the last row of a page)
    "number": (("number",), "number", "number > ?"),
    "updated": (
        ("updated_at", "number"),
        "updated_at DESC, number DESC",
        "(updated_at < ? OR (updated_at = ? AND number < ?))",
    ),
    "priority": (
        ("priority_rank", "number"),
        "priority_rank DESC, number",
        "(priority_rank < ? OR (priority_rank = ? AND number > ?))",
    ),
    "relevance": (("rank", "number"), "rank, number", "(rank > ? OR (rank = ? AND number > ?))"),
}
# Which cursor key feeds each `?` of the keyset predicate, by the number of keys.
_SEEK_ARGS = {1: (0,), 2: (0, 0, 1)}


def _filter_digest(channel: str, q: dto.ListQuery, sort: str) -> str:
    material = _json_encode(
        {
            "channel": channel,
            "query": q.query.strip(),
            "status": q.status,
            "includeSubtasks": q.include_subtasks,
            "sort": sort,
            "filters": q.filters,
        }
    )
    return hashlib.sha256(material).hexdigest()[:24]


def _fts_query(text: str) -> str:
    """Quote every word so user text can never be FTS5 syntax; any word may match (OR)."""
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in text).split() if w]
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or '""'


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


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _or_none(value: Any) -> Any:
    return None if value is UNSET else value


def _json_list(value: Any) -> str:
    return "[]" if value is UNSET else _json_encode(value).decode()


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # Several processes (every `serve --embedded` session) share one file; writes are short.
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA foreign_keys = ON")
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn
