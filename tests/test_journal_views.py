"""A journal stays readable by sqlite3, sqlite-utils and Datasette: views and canned queries."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from agentteam_task_bridge import journal

from .journal_helpers import SAMPLE_PAYLOADS, SESSION, event, write_journal

METADATA = Path(journal.__file__).parent / "datasette-metadata.json"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "journal.db"
    events = [event("session_started")]
    # c1 succeeds after a deprecated name; c2 fails upstream; c3 is rejected; c4 is in doubt.
    events += [
        event("call_received", call_id="c1", tool="task_create"),
        event("deprecated_usage", call_id="c1", tool="task_create"),
        event("context_injected", call_id="c1", tool="task_create"),
        event("upstream_request", call_id="c1", tool="task_create"),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            gen_ai_tool_name="task_create",
            payload=journal.UpstreamResponse(status=200, duration_ms=2.0),
        ),
        event("call_result", call_id="c1", tool="task_create"),
        event("call_received", call_id="c2", tool="task_update"),
        event("upstream_request", call_id="c2", tool="task_update"),
        event("upstream_response", call_id="c2", tool="task_update"),
        event("call_error", call_id="c2", tool="task_update"),
        event("call_received", call_id="c3", tool="task_list"),
        event("call_rejected", call_id="c3", tool="task_list"),
        event("call_received", call_id="c4", tool="task_delete"),
        event("upstream_request", call_id="c4", tool="task_delete"),
        event("session_ended"),
    ]
    write_journal(path, events)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    yield conn
    conn.close()


def _rows(
    conn: sqlite3.Connection, sql: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sql, params or {})]


def test_the_views_exist(db: sqlite3.Connection) -> None:
    views = {r["name"] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert (
        views
        == set(journal.VIEWS)
        == {"calls", "errors", "deprecated_usages", "injected_context", "sessions"}
    )


def test_calls_has_one_row_per_call_with_its_outcome(db: sqlite3.Connection) -> None:
    calls = {r["call_id"]: r for r in _rows(db, "SELECT * FROM calls")}
    assert {c: r["outcome"] for c, r in calls.items()} == {
        "c1": "result",
        "c2": "error",
        "c3": "rejected",
        "c4": "in_doubt",
    }
    assert calls["c1"]["duration_ms"] == SAMPLE_PAYLOADS["call_result"].duration_ms  # type: ignore[union-attr]
    assert calls["c1"]["last_http_response_status_code"] == 200
    assert calls["c1"]["deprecated_uses"] == 1
    assert calls["c2"]["error_type"] == "task_conflict"
    assert calls["c2"]["last_http_response_status_code"] == 409
    assert calls["c3"]["gen_ai_tool_name"] == "task_list"


def test_errors_deprecations_context_and_sessions(db: sqlite3.Connection) -> None:
    errors = _rows(db, "SELECT kind, error_type, call_id FROM errors")
    assert errors == [
        {"kind": "upstream_response", "error_type": "409", "call_id": "c2"},
        {"kind": "call_error", "error_type": "task_conflict", "call_id": "c2"},
        {"kind": "call_rejected", "error_type": "invalid_arguments", "call_id": "c3"},
    ]
    [deprecated] = _rows(db, "SELECT old_name, replacement, client_name FROM deprecated_usages")
    assert deprecated == {
        "old_name": "create_tasks",
        "replacement": "task_create",
        "client_name": "cursor",
    }
    injected = _rows(db, "SELECT name, source, value FROM injected_context")
    assert [r["name"] for r in injected] == ["workspace_id", "agent_id"]
    [session] = _rows(db, "SELECT client_name, compat_policy, end_reason, calls FROM sessions")
    assert session == {
        "client_name": "claude-code",
        "compat_policy": "hint",
        "end_reason": "stdin closed",
        "calls": 3,
    }


def test_every_canned_query_of_the_datasette_metadata_runs(db: sqlite3.Connection) -> None:
    metadata = json.loads(METADATA.read_text())
    database = metadata["databases"]["journal"]
    tables = {
        r["name"]
        for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    }
    assert set(database["tables"]) <= tables
    for name, spec in database["tables"].items():
        columns = {r[1] for r in db.execute(f"PRAGMA table_info({name})")}
        assert set(spec.get("facets", [])) <= columns, name
    assert len(database["queries"]) >= 3
    for name, query in database["queries"].items():
        params = {p: "c1" for p in re.findall(r":(\w+)", query["sql"])}
        rows = _rows(db, query["sql"], params)
        assert rows, name


def test_sqlite_utils_reads_the_journal(db: sqlite3.Connection) -> None:
    path = db.execute("PRAGMA database_list").fetchone()[2]
    utils_db = sqlite_utils.Database(path)
    try:
        assert utils_db.table("events").count == 16
        assert set(journal.VIEWS) <= set(utils_db.view_names())
        assert utils_db.table("events").pks == ["seq"]
    finally:
        utils_db.close()


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 command-line shell")
def test_the_sqlite3_shell_reads_the_journal(db: sqlite3.Connection) -> None:
    path = db.execute("PRAGMA database_list").fetchone()[2]
    out = subprocess.run(
        ["sqlite3", "-readonly", path, "SELECT count(*) FROM events; SELECT outcome FROM calls;"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["16", "result", "error", "rejected", "in_doubt"]
