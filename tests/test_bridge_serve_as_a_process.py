"""`agentteam-bridge serve` as a process meeting a broken journal, a bad start, a refused input.

- a mutation's outcome meeting a locked journal or a read-only file: the answer carries the
  result and `meta.journal`, the call stays in doubt, and the bridge recovers by itself;
- a pool directory the bridge cannot write, as root (CI runs as root, where a mode stops nobody);
- and, through the subprocess, cases whose tables run in-process elsewhere: bad starts (the
  same path twice, a loose key file or directory, a bad key file) and workflow ids over the
  limit.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.runtime import Runtime
from tests import test_bridge_idempotency as idempotency
from tests.bridge_harness import BridgeSession, open_bridge
from tests.test_bridge_starts import CASES, one_line, serve, snapshot

CREATE = {"channel": "general", "tasks": [{"title": "x"}]}


# --- an outcome meeting a locked or read-only journal, through the subprocess ----------------


def _chattr(flag: str, *paths: Path) -> None:
    for path in paths:
        subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


def _require_chattr(tmp_path: Path) -> None:
    """`chattr +i` works here (root with CAP_LINUX_IMMUTABLE on a filesystem that has it)."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr: cannot make a file read-only for root")
    probe = tmp_path / "probe"
    probe.write_text("x")
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i unavailable here: {done.stderr.decode().strip()}")
    _chattr("-i", probe)
    probe.unlink()


@contextmanager
def _breaks_on_create(
    runtime: Runtime, breaker: Callable[[], Callable[[], None]]
) -> Iterator[list[Callable[[], None]]]:
    """Break the journal while the runtime holds the first create (its request is durable by
    then); yields the list that receives the repair."""
    repairs: list[Callable[[], None]] = []
    broken: list[bool] = []
    take = runtime.faults.take

    def on_take(op: str) -> Any:
        if op == "create" and not broken:
            broken.append(True)
            repairs.append(breaker())
        return take(op)

    runtime.faults.take = on_take  # type: ignore[method-assign]
    try:
        yield repairs
    finally:
        runtime.faults.take = take  # type: ignore[method-assign]
        for repair in repairs:
            repair()
        repairs.clear()


def _gaps(path: Path) -> list[journal.JournalGap]:
    with journal.open_reader(path) as reader:
        gaps = [e.payload for e in reader.events(kind="journal_gap")]
    assert all(isinstance(g, journal.JournalGap) for g in gaps)
    return gaps  # type: ignore[return-value]


@pytest.mark.parametrize("fault", ["locked", "read_only"])
async def test_an_unrecorded_outcome_through_the_subprocess_is_flagged_and_recovers(
    file_runtime: Runtime, tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "j.db"
    if fault == "read_only":
        _require_chattr(tmp_path)

    def lock() -> Callable[[], None]:
        other = sqlite3.connect(path, isolation_level=None, timeout=60)
        other.execute("BEGIN IMMEDIATE")  # another program holds SQLite's write lock

        def undo() -> None:
            other.execute("ROLLBACK")
            other.close()

        return undo

    def freeze() -> Callable[[], None]:
        files = [p for p in (path, path.with_name(path.name + "-wal")) if p.exists()]
        _chattr("+i", *files)
        return lambda: _chattr("-i", *files)

    with _breaks_on_create(file_runtime, lock if fault == "locked" else freeze) as repairs:
        async with open_bridge(
            file_runtime.bridge_env(), path, runtime=file_runtime, check_journal=False
        ) as bridge:
            first = await bridge.call("task_create", CREATE)
            # The effect happened and the model is told so, with the journal's state beside it.
            assert not first.is_error, first.structured_content
            assert file_runtime.store.stats()["tasks"] == 1
            content: dict[str, Any] = first.structured_content
            note = content["meta"]["journal"]
            assert note["recorded"] is False and note["in_doubt"] is True
            reasons = ("locked",) if fault == "locked" else ("read_only", "io_error")
            assert note["reason"] in reasons, note
            assert content["data"]["tasks"][0]["number"] == 1
            assert "could not be recorded" in first.content[0].text  # type: ignore[union-attr]
            # While it is down, mutations fail closed: nothing is sent unrecorded.
            await bridge.fails("task_create", CREATE, code="journal_unavailable")
            assert file_runtime.store.stats()["tasks"] == 1
            for repair in repairs:
                repair()
            repairs.clear()
            with trio.fail_after(60):  # bounds a hang; the re-probe backoff tops out at 2 s
                while not _gaps(path):  # noqa: ASYNC110 - a row another process writes
                    await trio.sleep(0.05)
            again = await bridge.ok("task_create", CREATE)  # no restart needed
            assert "journal" not in again["meta"]
            assert file_runtime.store.stats()["tasks"] == 2
    [gap] = _gaps(path)
    assert gap.reason == note["reason"] and len(gap.calls) == 2  # the create, the refused one
    key = journal.load_key(
        tmp_path / "config" / "agentteam-bridge" / "journal-signing.key", create=False
    )
    result = replay.verify([path], key=key)
    assert result.ok, result.findings
    assert [c.reason for c in result.in_doubt] == ["journal_gap"]


# --- an unwritable journal directory, as root ----------------------------------------------


def test_an_immutable_journal_directory_is_one_line_even_for_root(tmp_path: Path) -> None:
    """The 0500-mode test is skipped as root (CI's user): `chattr +i` stops root too."""
    _require_chattr(tmp_path)
    pool = tmp_path / "pool"
    pool.mkdir(mode=0o700)
    _chattr("+i", pool)
    try:
        done = serve(tmp_path, "--embedded", "--journal", f"{pool}/")
    finally:
        _chattr("-i", pool)
    one_line(done, str(pool), "writable")
    assert list(pool.iterdir()) == []


# --- cases whose tables run in-process, once as the console script ------ ---------------

NAMED = ("the same path twice", "a bad key file", "a loose key file", "a loose key directory")


@pytest.mark.parametrize("name", NAMED)
def test_a_bad_start_is_one_line_from_the_console_script(name: str, tmp_path: Path) -> None:
    [case] = [c for c in CASES if c.name == name]
    args, kept = case.prepare(tmp_path)
    before = snapshot(kept) if kept is not None and kept.is_file() else None
    one_line(serve(tmp_path, *args), *case.mentioned)
    if before is not None:
        assert kept is not None and snapshot(kept) == before


@pytest.mark.wire
async def test_workflow_ids_over_the_limit_refused_over_the_wire(bridge: BridgeSession) -> None:
    await idempotency.test_workflow_ids_over_the_limit_are_refused_never_cut(bridge)
