"""Journals for the fleet tests: many small journals of plausible calls, written by the writer."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any, Final

import journal
from journal import (
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Event,
    InjectedField,
    SessionEnded,
    SessionStarted,
    UpstreamRequest,
    UpstreamResponse,
)

from .journal_helpers import KEY

ROUTE: Final = "/api/v1/workspaces/ws-1/agents/{agent}/runtime/tasks"


def call_events(session: str, call: str, agent: str, n: int) -> list[Event]:
    """One call's events; ``n`` picks its shape (result, upstream error, rejection, old name)."""
    tool = ("task_create", "task_list", "task_get", "task_update")[n % 4]

    def ev(payload: Any, *, name: str | None = tool) -> Event:
        return Event(
            session_id=session,
            call_id=call,
            mcp_method_name="tools/call",
            gen_ai_tool_name=name,
            jsonrpc_request_id=n,
            payload=payload,
        )

    shape = n % 5
    requested = "list_tasks" if shape == 4 else tool
    events = [ev(CallReceived(arguments={"channel": "eng", "n": n}), name=requested)]
    if shape == 3:
        events.append(
            ev(
                CallRejected(
                    error_code="invalid_arguments",
                    message="number must be positive ✓ 数字",
                    field_errors={"$.number": "must be ≥ 1"},
                )
            )
        )
        return events
    if shape == 4:
        events.append(
            ev(
                DeprecatedUsage(
                    use_kind="tool_name",
                    old_name="list_tasks",
                    replacement="task_list",
                    client_name="cursor",
                    client_version="1.0",
                    agent_id=agent,
                ),
                name="task_list",
            )
        )
        tool = "task_list"
    events.append(
        ev(
            ContextInjected(
                fields=[
                    InjectedField(name="workspace_id", source="env", value="ws-1"),
                    InjectedField(name="agent_id", source="env", value=agent),
                ]
            ),
            name=tool,
        )
    )
    method = "GET" if tool == "task_list" else "POST"
    body = None if method == "GET" else {"channel": "eng", "title": f"t{n} 🦀"}
    events.append(
        ev(UpstreamRequest(method=method, route=ROUTE.format(agent=agent), body=body), name=tool)
    )
    status = 500 if shape == 2 else 200
    answer = {"error": {"code": "boom"}} if status == 500 else {"number": n, "channel": "eng"}
    events.append(
        ev(UpstreamResponse(status=status, body=answer, duration_ms=1.5 + n % 7), name=tool)
    )
    if status == 500:
        events.append(
            ev(
                CallError(
                    error_code="upstream_unavailable",
                    retryable=True,
                    message="the runtime failed",
                    duration_ms=3.0 + n % 11,
                ),
                name=tool,
            )
        )
    else:
        data = {"channel": "eng", "number": n}
        events.append(
            ev(CallResult(result={"data": data, "meta": {}}, duration_ms=2.0 + n % 13), name=tool)
        )
    return events


def journal_events(index: int, calls: int) -> list[Event]:
    session = f"s{index}"
    agent = f"agent-{index % 3}"
    events = [
        Event(
            session_id=session,
            payload=SessionStarted(
                bridge_version="0.1.0",
                compat_policy="hint",
                client_name=("claude-code", "cursor")[index % 2],
                client_version="2.1.0",
                protocol_version="2025-11-25",
                workspace_id="ws-1",
                agent_id=agent,
            ),
        )
    ]
    for n in range(calls):
        events += call_events(session, f"{session}.{n}", agent, n + index)
    events.append(
        Event(session_id=session, payload=SessionEnded(reason="stdin closed", calls=calls))
    )
    return events


def write_fleet_journal(path: Path, index: int, calls: int, *, checkpoint_every: int = 10) -> str:
    """A journal of ``calls`` calls, signed with the test KEY; its journal id."""
    with journal.open_sync_writer(
        path, key=KEY, journal_id=f"fleet-{index:04d}", checkpoint_every=checkpoint_every
    ) as writer:
        writer.append_many(journal_events(index, calls))
    return f"fleet-{index:04d}"


def write_fleet(directory: Path, journals: int, calls: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(journals):
        path = directory / f"journal-{index}.db"
        write_fleet_journal(path, index, calls)
        paths.append(path)
    return paths


def append_calls(path: Path, journal_id: str, start: int, calls: int) -> None:
    """More calls in a new session of an existing journal."""
    with journal.open_sync_writer(path, key=KEY, journal_id=journal_id) as writer:
        events = journal_events(start, calls)
        writer.append_many(events)


def consolidated_copy(path: Path, target: Path) -> Path:
    """A copy with the WAL folded in (to edit it with sqlite3 without the journal's triggers)."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return target


def truncate_to(path: Path, seq: int) -> None:
    """Cut the journal's events after ``seq`` and its checkpoints beyond it (an attacker's edit)."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in names:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM events WHERE seq > ?", (seq,))
        conn.execute("DELETE FROM checkpoints WHERE seq > ?", (seq,))
        conn.commit()
    finally:
        conn.close()


def drop_before(path: Path, seq: int) -> None:
    """Remove events 1..seq and the checkpoints up to it: what a later segment holds."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in names:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM events WHERE seq <= ?", (seq,))
        conn.execute("DELETE FROM checkpoints WHERE seq <= ?", (seq,))
        conn.commit()
    finally:
        conn.close()


def split_in_segments(path: Path, at: int, directory: Path) -> tuple[Path, Path]:
    """The journal as two files, events 1..at and at+1.. (a rolled-over journal's shape)."""
    first = consolidated_copy(path, directory / "seg1.db")
    second = consolidated_copy(path, directory / "seg2.db")
    truncate_to(first, at)
    drop_before(second, at)
    return first, second


def rewrite_payload(path: Path, seq: int, payload: str) -> None:
    """Rewrite one event's payload and re-hash the chain from there (a re-chained history)."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in names:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE events SET payload = ? WHERE seq = ?", (payload, seq))
        previous = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq - 1,)).fetchone()
        prev = previous[0] if previous else journal.GENESIS_HASH
        cols = ", ".join(journal.COLUMNS)
        rows = conn.execute(f"SELECT {cols} FROM events WHERE seq >= ? ORDER BY seq", (seq,))
        for row in list(rows):
            row = (*row[:15], prev, row[16])
            digest = journal.row_hash(row)
            conn.execute(
                "UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, digest, row[0])
            )
            prev = digest
        conn.commit()
    finally:
        conn.close()


def copy_file(path: Path, target: Path) -> Path:
    shutil.copy(path, target)
    return target
