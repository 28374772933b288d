"""`serve --retain-payloads`: an erasure under way never holds the session's end. The session's
end cancels the retention task while its erasure waits for the journal's write lock (as a large
journal's or pool's erasure takes seconds): the task ends at once, the erasure stops at SQLite's
next look and rolls back, and the journal verifies. Measured before: a 600,000-event journal kept
`serve` 12.8 s past Claude Code's SIGINT and SIGTERM (the SDK client kills at 2 s). In-process:
the retention task as `serve`'s nursery runs it, over a real journal file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge.bridge import _retention

from .journal_helpers import VKEY
from .journal_helpers.segmented import files_of
from .replay_helpers import replay_main
from .test_journal_erase import SIGNER, _segmented


async def test_the_session_s_end_stops_an_erasure_waiting_for_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = _segmented(tmp_path)
    monkeypatch.setattr(_retention.journal, "load_key", lambda *a, **k: SIGNER)
    started, finished = threading.Event(), threading.Event()  # the worker thread's run
    real_run = _retention._run_once

    def run_once(*args: Any) -> int:
        started.set()
        try:
            return real_run(*args)
        finally:
            finished.set()

    monkeypatch.setattr(_retention, "_run_once", run_once)
    # Another connection holds the live segment's write lock: the erasure waits for it (30 s).
    holder = sqlite3.connect(files_of(path)[-1], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with trio.fail_after(10):  # bounds a hang only
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_retention.retain_payloads, path, lambda: path, 0.0, None)
                assert await trio.to_thread.run_sync(started.wait, 10)
                nursery.cancel_scope.cancel()  # the session ends
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await trio.to_thread.run_sync(finished.wait, 30)  # let go, it ends by itself
    assert "not trimmed" not in caplog.text  # a stop is no failure to report
    done = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    assert done.returncode == 0, done.stdout
