"""A session is journaled from the process's start; who the client is, when it says so.

`session_started` is written before any frame is read (an idle start is on record as idle), and
the client's name, version and protocol come in a `session_handshake` event once its `initialize`
is answered: every reader (the `sessions` view, a call's story, `calls`) still names the client.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import trio

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.runtime import Runtime

from .test_bridge_lifecycle import create, handshake, journal_kinds, served

IDLE_S = 2.0


async def test_an_idle_start_is_journaled_at_process_start_and_the_client_at_its_handshake(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    async with served(file_runtime.bridge_env(), tmp_path) as bridge:
        await _journaled_start(bridge.journal_path)  # nothing was sent yet
        await trio.sleep(IDLE_S)  # the client takes its time
        await handshake(bridge)
        await bridge.send(create(1, "after an idle start"))
        assert "result" in await bridge.answer(1)
        await bridge.close_stdin()
        assert await bridge.end() == 0
    path = bridge.journal_path
    kinds = journal_kinds(path)
    assert kinds[:3] == ["session_started", "session_handshake", "call_received"]
    with journal.open_reader(path) as reader:
        records = {r.kind: r for r in reader.events() if r.call_id is None}
    started, hello = records["session_started"], records["session_handshake"]
    waited = _at(hello.ts_wall) - _at(started.ts_wall)
    assert waited.total_seconds() >= IDLE_S  # the start is on record before the idle wait
    assert isinstance(hello.payload, journal.SessionHandshake)
    assert (hello.payload.client_name, hello.payload.client_version) == ("lifecycle", "1")
    assert hello.payload.protocol_version == "2025-11-25"
    assert isinstance(started.payload, journal.SessionStarted)
    assert started.payload.client_name is None  # not known at process start
    # Every reader names the client: the view, the call list, the call's story.
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT client_name, client_version, protocol_version FROM sessions")
        assert row.fetchall() == [("lifecycle", "1", "2025-11-25")]
    (call,) = replay.list_calls([path], replay.CallFilter()).calls
    assert call.client_name == "lifecycle"
    shown = replay.show_call([path], call.call_id)
    assert shown.session is not None and shown.session.client_name == "lifecycle"


async def _journaled_start(path: Path) -> None:
    """Return once the journal holds the session's start (polled: up to 30 s, a hang only)."""
    for _ in range(600):
        try:
            if "session_started" in journal_kinds(path):
                return
        except Exception:  # not created yet, or mid-creation
            pass
        await trio.sleep(0.05)
    raise AssertionError("no session_started 30 s after the start")


def _at(ts_wall: str) -> datetime:
    return datetime.fromisoformat(ts_wall)
