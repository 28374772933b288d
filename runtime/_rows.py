"""Typed rows of the runtime's tables: a frozen Struct per shape a query reads.

A query selects ``columns(TaskRow)``, generated from the type's fields, and reads its answer
with :func:`one` or :func:`many`; a row is never read by position, and a column added to a type
is selected by every query that reads that type::

    task = one(c, TaskRow, f"SELECT {columns(TaskRow)} FROM tasks t WHERE t.id = ?", (task_id,))
    task.updated_at

A field that is not a column of the aliased table names its SQL expression:
``columns(ListedTask, rank="bm25(tasks_fts, 4.0, 1.0)")``. A one-value query reads with
:func:`scalar`, a one-column query with :func:`values`.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

_json_encode = msgspec.json.Encoder(order="sorted").encode


class Row(msgspec.Struct, frozen=True):
    """A row as a query selected it: the fields, in order, are the selected columns."""


R = TypeVar("R", bound=Row)


@functools.cache
def columns(row: type[Row], alias: str = "t", **exprs: str) -> str:
    """The select list of ``row``: ``alias.field AS field`` each, or ``expr AS field``."""
    return ", ".join(
        f"{exprs.get(name, f'{alias}.{name}')} AS {name}" for name in row.__struct_fields__
    )


def one(c: sqlite3.Connection, row: type[R], sql: str, params: Sequence[Any] = ()) -> R | None:
    """The first row of a query that selected ``columns(row)``, or None."""
    cursor = _checked(c.execute(sql, params), row)
    found = cursor.fetchone()
    return None if found is None else row(*found)


def many(c: sqlite3.Connection, row: type[R], sql: str, params: Sequence[Any] = ()) -> list[R]:
    """Every row of a query that selected ``columns(row)``."""
    return [row(*found) for found in _checked(c.execute(sql, params), row).fetchall()]


def _checked(cursor: sqlite3.Cursor, row: type[Row]) -> sqlite3.Cursor:
    """The cursor, once its column names are the row's fields in order (so filling the Struct
    positionally is filling it by name)."""
    names = tuple(name for name, *_ in cursor.description)
    if names != row.__struct_fields__:
        raise TypeError(f"{row.__name__} read from columns {names}")
    return cursor


def scalar(c: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The one value of a query selecting one column (None when there is no row)."""
    found = c.execute(sql, params).fetchone()
    if found is None:
        return None
    (value,) = found
    return value


def values(c: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """The values of a query selecting one column, one per row."""
    return [value for (value,) in c.execute(sql, params).fetchall()]


def json_list(value: Any) -> str:
    """A list-valued field as its column stores it: JSON text (left out: the empty list)."""
    return "[]" if value is msgspec.UNSET else _json_encode(value).decode()


# --- the rows --------------------------------------------------------------------------------


class Board(Row, frozen=True):
    id: int
    slug: str
    name: str


class TaskRow(Row, frozen=True):
    """A task as the operations read it; list-valued columns hold JSON text."""

    id: int
    scope_id: str
    board_id: int
    number: int
    parent_id: int | None
    title: str
    description: str | None
    status: str
    priority: str | None
    priority_rank: int
    labels: str
    assignee_id: str | None
    creator_id: str
    checklist: str
    urls: str
    attachments: str
    blocker: str | None
    source_target: str | None
    messages: str
    workspaces: str
    created_at: str
    updated_at: str


class StoredTask(TaskRow, frozen=True):
    """A task whether live or deleted (a lookup by number tells the two apart)."""

    deleted_at: str | None


class ListedTask(TaskRow, frozen=True):
    """A task on a list page, with its full-text rank (0.0 when not searching)."""

    rank: float


class TaskRef(Row, frozen=True):
    """A task as the nearest live tasks, a parent chain or a deletion names it."""

    id: int
    scope_id: str
    number: int
    title: str
    creator_id: str


class ScopedTask(Row, frozen=True):
    """A live task found by its scope id, with its board."""

    task_id: int
    number: int
    board_id: int
    slug: str
    name: str


class ParentLink(Row, frozen=True):
    """One step up a parent chain: the task, its board and whether it is deleted."""

    number: int
    title: str
    slug: str
    deleted_at: str | None
    parent_id: int | None


class Checkpoint(Row, frozen=True):
    id: int
    summary: str
    author_id: str
    created_at: str


class Subtask(Row, frozen=True):
    number: int
    title: str
    status: str


class Member(Row, frozen=True):
    id: str
    handle: str
    kind: str


class Token(Row, frozen=True):
    workspace_id: str
    agent_id: str
    expires_at: float


class Callback(Row, frozen=True):
    run_id: str
    callback_effect_id: str
    responder_agent_id: str
    state: str


class Receipt(Row, frozen=True):
    payload_digest: str
    result: str


class BoardSummary(Row, frozen=True):
    """A board as the local listing shows it."""

    slug: str
    name: str
    members: int
    tasks: int
