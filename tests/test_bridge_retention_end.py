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

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import _retention

from .journal_helpers import KEY, VKEY
from .journal_helpers.segmented import call_events, files_of
from .replay_helpers import replay_main
from .test_journal_erase import SEGMENT, SIGNER, _segmented


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


def test_a_roll_over_during_the_run_is_planned_again_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's writer rolls the journal over to a new segment while retention's run has
    planned on the old one (a journal over its segment cap when `serve` starts): the closed
    segment refuses the erasure's event (chain_conflict); the run plans again at once, not a
    period later. The roll-over comes at the erasure's first look at ``stop``, after its plan."""
    path = _segmented(tmp_path)
    monkeypatch.setattr(_retention.journal, "load_key", lambda *a, **k: SIGNER)
    looks: list[int] = []
    with journal.open_sync_writer(path, key=KEY, segment_bytes=SEGMENT) as writer:

        def stop() -> bool:
            looks.append(len(looks))
            if len(looks) == 2:  # the run's own look, then the erasure's first: roll over
                before = len(files_of(path))
                while len(files_of(path)) == before:
                    writer.append_many(call_events(1000 + len(files_of(path))))
            return False

        erased = _retention._run_once([path], 0.0, None, stop)
    assert len(looks) > 2 and erased > 0
    assert "not trimmed" not in caplog.text
    done = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    assert done.returncode == 0, done.stdout
