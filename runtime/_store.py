"""The runtime's storage: contract section 13's task semantics over SQLite, one transaction each.

`Store` opens the database (migrating it), owns the connection, the write transaction and the
clock, and hands each operation to the module that holds its rules. The store knows nothing of
HTTP: each operation takes the authenticated principal and a parsed DTO, validates the complete
intent, and either commits the whole operation or raises an `ApiError` having changed nothing.

Where things are::

    _store.py    Store: open/close, `transaction()`, `now()`, one delegating method per operation
    _list.py     list (filters, FTS5 search, keyset pages) and get
    _cursor.py   Cursors: paging cursors signed with HMAC-SHA256, bound to one query
    _create.py   create: validation, idempotency receipts, defaults folded before the digest
    _update.py   update (a patch of the fields that change) and checkpoint
    _claim.py    set-claim: claim or release several tasks, each failing on its own
    _delete.py   delete: soft deletion, subtasks promoted or deleted, tombstones
    _tokens.py   Principal, minting and checking bearer tokens
    _admin.py    seeding and admin: workspaces, members, boards, callbacks, listings, stats
    _resolve.py  names to rows: boards, tasks, members, threads (with actionable errors)
    _shapes.py   response shapes: a task's compact form and its detail
    _rows.py     typed rows: one Struct per query shape, `SELECT` lists built from its fields
    _schema.py   the migrations (append-only)
    _seed.py, _local.py  the local workspace, and `agentteam-bridge runtime board|callback`

Several processes (every `serve --embedded` session) may share one database file: writes take
SQLite's write lock first (`BEGIN IMMEDIATE`), and `now()` is read under it so instants stay
strictly increasing per board across processes.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import _admin as admin
from . import _claim, _create, _delete, _list, _tokens, _update
from . import _dto as dto
from ._clock import Clock
from ._cursor import Cursors
from ._rows import Board, BoardSummary, Callback, scalar
from ._schema import migrate
from ._tokens import Principal

__all__ = ["Board", "Principal", "Store", "connect"]


class Store:
    """The runtime's storage: one SQLite connection and the operations over it."""

    def __init__(
        self, conn: sqlite3.Connection, *, cursor_secret: bytes, token_ttl_seconds: float = 900.0
    ) -> None:
        self._conn = conn
        self._clock = Clock()
        self.cursors = Cursors(cursor_secret)
        self.token_ttl_seconds = token_ttl_seconds

    @classmethod
    def open(
        cls, path: str, *, cursor_secret: bytes | None = None, token_ttl_seconds: float = 900.0
    ) -> Store:
        """The store of the database at `path` (created or migrated as needed)."""
        conn = connect(path)
        migrate(conn)
        return cls(
            conn,
            cursor_secret=cursor_secret or secrets.token_bytes(32),
            token_ttl_seconds=token_ttl_seconds,
        )

    def close(self) -> None:
        self._conn.close()

    # --- for the operation modules ---------------------------------------------------------

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection, for reads outside a transaction (each statement on its own)."""
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: the write lock is taken first; commit, or roll back on error."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def now(self, c: sqlite3.Connection, board: Board) -> str:
        """An instant later than any on the board's tasks, so `updatedAt` stays a sound revision
        token when several processes share the database (their clocks can hand out one
        microsecond twice). The caller holds the write lock; the index makes this one seek."""
        latest = scalar(c, "SELECT max(updated_at) FROM tasks WHERE board_id = ?", (board.id,))
        return self._clock.now(after=latest)

    # --- tokens ----------------------------------------------------------------------------

    def mint_token(
        self, workspace_id: str, agent_id: str, ttl_seconds: float | None = None
    ) -> tuple[str, float]:
        ttl = self.token_ttl_seconds if ttl_seconds is None else ttl_seconds
        return _tokens.mint_token(self, workspace_id, agent_id, ttl)

    def authenticate(
        self, authorization: str | None, workspace_id: str, agent_id: str
    ) -> Principal:
        return _tokens.authenticate(self, authorization, workspace_id, agent_id)

    # --- the seven operations --------------------------------------------------------------

    def list_tasks(self, p: Principal, q: dto.ListQuery) -> dict[str, Any]:
        return _list.list_tasks(self, p, q)

    def get_task(self, p: Principal, req: dto.GetRequest) -> dict[str, Any]:
        return _list.get_task(self, p, req)

    def create_tasks(self, p: Principal, req: dto.CreateRequest) -> dict[str, Any]:
        return _create.create_tasks(self, p, req)

    def update_task(self, p: Principal, req: dto.UpdateRequest) -> dict[str, Any]:
        return _update.update_task(self, p, req)

    def add_checkpoint(self, p: Principal, req: dto.CheckpointRequest) -> dict[str, Any]:
        return _update.add_checkpoint(self, p, req)

    def set_claim(self, p: Principal, req: dto.SetClaimRequest) -> dict[str, Any]:
        return _claim.set_claim(self, p, req)

    def delete_task(self, p: Principal, req: dto.DeleteRequest) -> dict[str, Any]:
        return _delete.delete_task(self, p, req)

    # --- seeding and admin -----------------------------------------------------------------

    def add_workspace(self, workspace_id: str, name: str) -> None:
        admin.add_workspace(self, workspace_id, name)

    def add_member(
        self,
        workspace_id: str,
        member_id: str,
        handle: str,
        kind: str,
        display_name: str | None = None,
    ) -> None:
        admin.add_member(self, workspace_id, member_id, handle, kind, display_name or handle[1:])

    def add_board(
        self, workspace_id: str, slug: str, member_ids: Sequence[str], name: str | None = None
    ) -> None:
        admin.add_board(self, workspace_id, slug, member_ids, name or slug)

    def open_callback(
        self, workspace_id: str, run_id: str, callback_effect_id: str, responder_agent_id: str
    ) -> None:
        admin.open_callback(self, workspace_id, run_id, callback_effect_id, responder_agent_id)

    def complete_callback(self, workspace_id: str, run_id: str, callback_effect_id: str) -> None:
        admin.complete_callback(self, workspace_id, run_id, callback_effect_id)

    def member_ids(self, workspace_id: str) -> list[str]:
        """The ids of every member of the workspace."""
        return admin.member_ids(self, workspace_id)

    def boards(self, workspace_id: str) -> list[BoardSummary]:
        """Every board of the workspace, by slug, with its member and task counts."""
        return admin.boards(self, workspace_id)

    def callbacks(self, workspace_id: str) -> list[Callback]:
        """Every workflow callback of the workspace, by run and effect id."""
        return admin.callbacks(self, workspace_id)

    def stats(self) -> dict[str, int]:
        """Row counts of the tables a write touches (tasks, activity, receipts, ...)."""
        return admin.stats(self)


def connect(path: str) -> sqlite3.Connection:
    """A connection for one of several processes sharing the file (WAL, a generous busy wait).
    A file that does not exist yet is created owner-only first (:func:`create_owner_only`)."""
    if path != ":memory:":
        create_owner_only(Path(path))
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # Several processes (every `serve --embedded` session) share one file; writes are short.
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA foreign_keys = ON")
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def create_owner_only(path: Path) -> None:
    """Create the database file 0600 and its missing folders 0700, whatever the umask (SQLite
    gives the -wal and -shm files the database's mode). What exists already is left as it is:
    a file or folder the person made is theirs to set."""
    missing = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # another process made it first
            continue
        os.chmod(folder, 0o700)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
