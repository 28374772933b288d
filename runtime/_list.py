"""The read operations: `list` (filters, full-text search, keyset pages with cursors) and `get`.

A list page is one query: the filters and the optional FTS5 match select the tasks, the sort
orders them, and a cursor from the previous page seeks past its last row by that row's sort
keys (a keyset, so inserts and deletes between pages never repeat or skip a task). Reads take no
write lock.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from . import _dto as dto
from . import _resolve as resolve
from ._errors import ValidationFailed
from ._rows import ListedTask, TaskRow, columns, many
from ._shapes import compact, detail
from ._tokens import Principal

if TYPE_CHECKING:
    from ._store import Store

_json_encode = msgspec.json.Encoder(order="sorted").encode

# sort -> (cursor key fields of ListedTask, ORDER BY, keyset predicate after a page's last row)
SORTS: dict[str, tuple[tuple[str, ...], str, str]] = {
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
_OPEN = "t.status IN (" + ", ".join(f"'{s}'" for s in dto.OPEN_STATUSES) + ")"


def list_tasks(store: Store, p: Principal, q: dto.ListQuery) -> dict[str, Any]:
    c = store.connection
    board = resolve.member_board(c, p, q.channel, "$.channel")
    searching = bool(q.query.strip())
    errors: dict[str, str] = {}
    if q.status == "all" and not searching:
        errors["$.status"] = "`all` is accepted only with a non-empty query"
    if q.sort == "relevance" and not searching:
        errors["$.sort"] = "`relevance` is accepted only with a non-empty query"
    if errors:
        raise ValidationFailed(errors)
    sort = q.sort or ("relevance" if searching else "number")
    digest = filter_digest(board.slug, q, sort)
    after = store.cursors.decode(q.cursor, digest) if q.cursor else None

    where = ["t.board_id = ?", "t.deleted_at IS NULL"]
    args: list[Any] = [board.id]
    if q.status == "open":
        where.append(_OPEN)
    elif q.status != "all":
        where.append("t.status = ?")
        args.append(q.status)
    if not q.include_subtasks:
        where.append("t.parent_id IS NULL")
    f = q.filters
    if f.assignee is not UNSET:
        where.append("t.assignee_id IS ?")
        args.append(resolve.member_by_handle(c, p.workspace_id, f.assignee))
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
        args.append(fts_query(q.query))
        rank = "bm25(tasks_fts, 4.0, 1.0)"
    keys, order, seek = SORTS[sort]
    outer = ""
    if after is not None:
        outer = f" WHERE {seek}"
        args.extend(after[i] for i in _SEEK_ARGS[len(keys)])
    # The inner query names every column so the keyset predicate can use the FTS rank.
    sql = (
        f"SELECT * FROM (SELECT {columns(ListedTask, rank=rank)} FROM {source}"
        f" WHERE {' AND '.join(where)}){outer} ORDER BY {order} LIMIT ?"
    )
    rows = many(c, ListedTask, sql, [*args, q.limit + 1])
    page = rows[: q.limit]
    result: dict[str, Any] = {
        "channel": board.slug,
        "items": [compact(c, board, task) for task in page],
    }
    if len(rows) > q.limit:
        last = page[-1]
        result["nextCursor"] = store.cursors.encode(digest, [getattr(last, k) for k in keys])
    return result


def get_task(store: Store, p: Principal, req: dto.GetRequest) -> dict[str, Any]:
    c = store.connection
    board = resolve.member_board(c, p, req.channel, "$.channel")
    task: TaskRow = resolve.task(c, board, req.number, "$.number")
    before = req.checkpoints_before if isinstance(req.checkpoints_before, int) else None
    after = req.subtasks_after if isinstance(req.subtasks_after, int) else 0
    return {"task": detail(c, board, task, checkpoints_before=before, subtasks_after=after)}


def filter_digest(channel: str, q: dto.ListQuery, sort: str) -> str:
    """What a cursor is bound to: the board, the query text, the status, the sort, the filters."""
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


def fts_query(text: str) -> str:
    """Quote every word so user text can never be FTS5 syntax; any word may match (OR)."""
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in text).split() if w]
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or '""'
