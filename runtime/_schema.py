"""Versioned, additive migrations of the reference runtime's SQLite storage."""

from __future__ import annotations

import sqlite3

from ._rows import scalar

# Each entry is one migration; the list index + 1 is the schema version it brings the file to.
# Migrations are only ever appended: a shipped migration is never edited.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL
    );
    CREATE TABLE members (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        handle TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('agent', 'human')),
        display_name TEXT NOT NULL,
        UNIQUE (workspace_id, handle)
    );
    CREATE TABLE boards (
        id INTEGER PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        slug TEXT NOT NULL,
        name TEXT NOT NULL,
        next_number INTEGER NOT NULL DEFAULT 1,
        UNIQUE (workspace_id, slug)
    );
    CREATE TABLE board_members (
        board_id INTEGER NOT NULL REFERENCES boards(id),
        member_id TEXT NOT NULL REFERENCES members(id),
        PRIMARY KEY (board_id, member_id)
    );
    CREATE TABLE tokens (
        token_hash TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        expires_at REAL NOT NULL
    );
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY,
        scope_id TEXT NOT NULL UNIQUE,
        workspace_id TEXT NOT NULL,
        board_id INTEGER NOT NULL REFERENCES boards(id),
        number INTEGER NOT NULL,
        parent_id INTEGER REFERENCES tasks(id),
        title TEXT NOT NULL,
        description TEXT,
        status TEXT NOT NULL,
        priority TEXT,
        priority_rank INTEGER NOT NULL DEFAULT 0,
        labels TEXT NOT NULL DEFAULT '[]',
        assignee_id TEXT REFERENCES members(id),
        creator_id TEXT NOT NULL REFERENCES members(id),
        checklist TEXT NOT NULL DEFAULT '[]',
        urls TEXT NOT NULL DEFAULT '[]',
        attachments TEXT NOT NULL DEFAULT '[]',
        blocker TEXT,
        source_target TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        deleted_at TEXT,
        UNIQUE (board_id, number)
    );
    CREATE INDEX tasks_board_parent ON tasks (board_id, parent_id);
    CREATE INDEX tasks_board_updated ON tasks (board_id, updated_at);
    CREATE VIRTUAL TABLE tasks_fts USING fts5(
        title, description, content='tasks', content_rowid='id', tokenize='unicode61'
    );
    CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO tasks_fts (rowid, title, description)
        VALUES (new.id, new.title, coalesce(new.description, ''));
    END;
    CREATE TRIGGER tasks_fts_update AFTER UPDATE OF title, description ON tasks BEGIN
        INSERT INTO tasks_fts (tasks_fts, rowid, title, description)
        VALUES ('delete', old.id, old.title, coalesce(old.description, ''));
        INSERT INTO tasks_fts (rowid, title, description)
        VALUES (new.id, new.title, coalesce(new.description, ''));
    END;
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        task_id INTEGER NOT NULL REFERENCES tasks(id),
        summary TEXT NOT NULL,
        author_id TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TRIGGER checkpoints_append_only_update BEFORE UPDATE ON checkpoints BEGIN
        SELECT RAISE(ABORT, 'checkpoints are append-only');
    END;
    CREATE TRIGGER checkpoints_append_only_delete BEFORE DELETE ON checkpoints BEGIN
        SELECT RAISE(ABORT, 'checkpoints are append-only');
    END;
    CREATE TABLE activity (
        id INTEGER PRIMARY KEY,
        task_id INTEGER NOT NULL,
        actor_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}',
        at TEXT NOT NULL
    );
    CREATE TABLE live_events (
        id INTEGER PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        task_scope_id TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE TABLE tombstones (
        scope_id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        board_id INTEGER NOT NULL,
        number INTEGER NOT NULL,
        deleted_by TEXT NOT NULL,
        deleted_at TEXT NOT NULL
    );
    CREATE TABLE workflow_callbacks (
        workspace_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        callback_effect_id TEXT NOT NULL,
        responder_agent_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('active', 'completed')),
        PRIMARY KEY (workspace_id, run_id, callback_effect_id)
    );
    CREATE TABLE idempotency_receipts (
        workspace_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        callback_effect_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (workspace_id, agent_id, run_id, callback_effect_id, idempotency_key)
    );
    """,
    # 2: task_update's `messages` and `workspaces` (JSON lists; `thread` is `source_target`).
    """
    ALTER TABLE tasks ADD COLUMN messages TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE tasks ADD COLUMN workspaces TEXT NOT NULL DEFAULT '[]';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database up to SCHEMA_VERSION; return the version it had before."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    current = int(scalar(conn, "SELECT max(version) FROM schema_migrations") or 0)
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {current} is newer than this runtime ({SCHEMA_VERSION})"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        # Several processes may open one file at once: another may have migrated since we read.
        done = conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,))
        if done.fetchone() is not None:
            conn.execute("ROLLBACK")
            continue
        try:
            for statement in _statements(MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, datetime('now'))",
                (version,),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return current


def _statements(script: str) -> list[str]:
    """Split a migration script into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError(f"incomplete statement in migration: {buffer.strip()[:80]}")
    return statements
