"""One call summary, four engines: the same journals folded by the Python reader
(`replay._story`, what `calls` and `audit` print), the journal file's SQLite `calls` view, the
store's PostgreSQL `calls` view and the store's call lines kept at ingest (`replay._fleet_calls`)
agree on every call and every column they share.

The views and the Python fold time a call by two clocks, each documented (README "A call is
timed two ways", the views' docstrings): a view's `duration_ms` is the outcome event's own
(`call_result` / `call_error`, the bridge's timer), the fold's `bridge_ms` the monotonic stamps
from `call_received` to the outcome (any outcome). So the views are compared with each other on
every column, duration included, and with the fold on the rest; the call lines keep the fold's
nanoseconds and are compared with it exactly; and each figure is checked against the events it
is defined by.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import CallSummary

from .fleet_helpers import write_fleet, write_idempotency_fleet
from .pg_cluster import Cluster
from .replay_helpers import build, everyday

# The fold's name for a column -> the views' name for it.
SHARED = {
    "session_id": "session_id",
    "first_seq": "first_seq",
    "last_seq": "last_seq",
    "started_at": "started_at",
    "ended_at": "ended_at",
    "tool": "gen_ai_tool_name",
    "request_id": "jsonrpc_request_id",
    "status": "outcome",
    "error_code": "error_type",
    "upstream_requests": "upstream_requests",
    "http_status": "last_http_response_status_code",
    "token_refreshes": "token_refreshes",
    "deprecated_uses": "deprecated_uses",
}
Key = tuple[str, str]


@pytest.fixture(scope="module")
def shipped(
    tmp_path_factory: pytest.TempPathFactory, pg_cluster: Cluster
) -> tuple[list[Path], str]:
    """A bridge-written journal (errors, rejections, in-doubt and cancelled calls, refreshes,
    deprecated names), generated journals and keyed creates, shipped into an empty store."""
    base = tmp_path_factory.mktemp("engines")
    paths = [
        build(base / "bridge", everyday).path,
        *write_fleet(base / "written", 4, 9),
        *write_idempotency_fleet(base / "idempotency"),
    ]
    url = pg_cluster.create_database()
    assert replay.ship(paths, url).ok
    return paths, url


def python_fold(paths: list[Path]) -> dict[Key, CallSummary]:
    return {(c.journal_id, c.call_id): c for c in replay.list_calls(paths).calls}


def sqlite_view(paths: list[Path]) -> dict[Key, dict[str, Any]]:
    rows: dict[Key, dict[str, Any]] = {}
    for path in paths:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            (journal_id,) = conn.execute(
                "SELECT value FROM journal_meta WHERE key = 'journal_id'"
            ).fetchone()
            for row in conn.execute("SELECT * FROM calls"):
                rows[(journal_id, row["call_id"])] = {"journal_id": journal_id, **dict(row)}
        finally:
            conn.close()
    return rows


def store_rows(url: str, sql: str) -> dict[Key, dict[str, Any]]:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {(r["journal_id"], r["call_id"]): r for r in cur.execute(sql).fetchall()}


def test_the_four_engines_fold_the_same_calls(shipped: tuple[list[Path], str]) -> None:
    paths, url = shipped
    fold = python_fold(paths)
    local = sqlite_view(paths)
    view = store_rows(url, "SELECT * FROM agentteam.calls")
    lines = store_rows(url, "SELECT * FROM agentteam.call_lines")
    assert len(fold) > 100
    assert set(fold) == set(local) == set(view) == set(lines)
    statuses = {c.status for c in fold.values()}
    assert {"result", "error", "rejected", "in_doubt"} <= statuses  # the folds are exercised


def test_the_sqlite_and_postgresql_views_agree_on_every_column(
    shipped: tuple[list[Path], str],
) -> None:
    paths, url = shipped
    local, view = sqlite_view(paths), store_rows(url, "SELECT * FROM agentteam.calls")
    for key, row in local.items():
        assert set(view[key]) == set(row), key
        assert view[key] == row, key


def test_the_views_agree_with_the_python_fold_on_every_shared_column(
    shipped: tuple[list[Path], str],
) -> None:
    paths, _ = shipped
    fold, local = python_fold(paths), sqlite_view(paths)
    for key, summary in fold.items():
        got = {name: local[key][column] for name, column in SHARED.items()}
        want = {name: getattr(summary, name) for name in SHARED}
        assert got == want, key


def test_the_call_lines_are_the_python_fold_column_by_column(
    shipped: tuple[list[Path], str],
) -> None:
    paths, url = shipped
    fold, lines = python_fold(paths), store_rows(url, "SELECT * FROM agentteam.call_lines")
    skip = {"bridge_ms", "upstream_ms", "journal_id", "call_id"}
    for key, summary in fold.items():
        line = lines[key]
        for name in CallSummary.__struct_fields__:
            if name in skip:
                continue
            assert line[name] == getattr(summary, name), (key, name)
        ns = line["bridge_ns"]
        assert summary.bridge_ms == (None if ns is None else round(ns / 1e6, 3)), key
        durations = line["upstream_durations"]
        assert summary.upstream_ms == (round(sum(durations), 3) if durations else None), key


def test_each_duration_is_the_clock_its_docs_name(shipped: tuple[list[Path], str]) -> None:
    """A view's `duration_ms` is the outcome event's own (null for an outcome that carries none);
    the fold's `bridge_ms` is the outcome's monotonic stamp less the `call_received`'s."""
    paths, url = shipped
    fold, local = python_fold(paths), sqlite_view(paths)
    view = store_rows(url, "SELECT journal_id, call_id, duration_ms FROM agentteam.calls")
    received: dict[Key, journal.Record] = {}
    outcome: dict[Key, journal.Record] = {}
    with replay.open_journals(paths) as journals:
        for record in journals.records():
            if record.call_id is None:
                continue
            key = (record.journal_id, record.call_id)
            if record.kind == "call_received":
                received.setdefault(key, record)
            elif record.kind in journal.OUTCOMES:
                outcome[key] = record
    both = 0
    for key, summary in fold.items():
        end, start = outcome.get(key), received.get(key)
        timed = end is not None and end.kind in ("call_result", "call_error")
        own = end.duration_ms if end is not None and timed else None
        assert local[key]["duration_ms"] == view[key]["duration_ms"] == own, key
        stamps = None if end is None or start is None else end.ts_mono_ns - start.ts_mono_ns
        assert summary.bridge_ms == (None if stamps is None else round(stamps / 1e6, 3)), key
        both += own is not None and stamps is not None
    # Both figures are exercised, and a rejected call has the journal's figure only.
    assert both > 20
    assert any(s.status == "rejected" and s.bridge_ms is not None for s in fold.values())
    assert all(local[k]["duration_ms"] is None for k, s in fold.items() if s.status == "rejected")


def test_the_two_views_are_one_definition_rendered_per_dialect(
    shipped: tuple[list[Path], str],
) -> None:
    """The journal file's view and the store's are `journal.calls_view` in each dialect: the
    same columns in the same order (the store's keyed by journal too)."""
    paths, url = shipped
    sqlite_text, pg_text = journal.calls_view("sqlite"), journal.calls_view("postgresql")
    assert "SUM(e.kind = 'call_result') > 0" in sqlite_text and "bool_or(" not in sqlite_text
    assert "bool_or(e.kind = 'call_result')" in pg_text and "SUM(" not in pg_text
    conn = sqlite3.connect(f"file:{paths[0]}?mode=ro", uri=True)
    try:
        (stored,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'calls'").fetchone()
        local = [d[0] for d in conn.execute("SELECT * FROM calls LIMIT 0").description]
    finally:
        conn.close()
    assert stored.endswith(sqlite_text.strip())
    with psycopg.connect(url) as pg, pg.cursor() as cur:
        cur.execute("SELECT * FROM agentteam.calls LIMIT 0")
        store = [d.name for d in cur.description or ()]
    assert store == ["journal_id", *local]
