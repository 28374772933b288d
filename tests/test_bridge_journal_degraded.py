"""No answer the journal lacks: when a mutation's outcome cannot be recorded (locked, read-only),
the model gets the result with `meta.journal` saying so, the call stays in doubt, and the writer
recovers by itself, journals the gap and takes mutations again."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge.testing import upstream_task

from .bridge_inprocess import inprocess_bridge, verified

CREATED = {
    "channel": "general",
    "parent": None,
    "tasks": [upstream_task(title="x")],
    "reused": False,
}
CREATE = {"channel": "general", "tasks": [{"title": "x"}]}


class Fault:
    """Breaks the journal while the upstream holds a mutation (its request already durable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.armed = False
        self._undo: Callable[[], None] | None = None

    def break_journal(self) -> None:
        raise NotImplementedError

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.armed:
            self.armed = False
            self.break_journal()
        return httpx.Response(200, json=CREATED)

    def repair(self) -> None:
        assert self._undo is not None
        self._undo()


class Locked(Fault):
    def break_journal(self) -> None:
        other = sqlite3.connect(self.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another tool holding the write lock

        def undo() -> None:
            other.execute("ROLLBACK")
            other.close()

        self._undo = undo


class ReadOnly(Fault):
    """Immutable files: as root, a mode of 0400 stops nobody, `chattr +i` does."""

    def break_journal(self) -> None:
        files = [p for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists()]
        for p in files:
            subprocess.run(["chattr", "+i", str(p)], check=True)

        def undo() -> None:
            for p in files:
                subprocess.run(["chattr", "-i", str(p)], check=True)

        self._undo = undo


@contextmanager
def _chattr_works(tmp_path: Path) -> Iterator[None]:
    if shutil.which("chattr") is None:
        pytest.skip("no chattr: cannot make a file read-only for root")
    probe = tmp_path / "probe"
    probe.write_text("x")
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i unavailable here: {done.stderr.decode().strip()}")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    yield


async def _wait_until_healthy(writer: journal.AsyncWriter) -> None:
    with trio.fail_after(60):  # bounds a hang: the re-probe backoff tops out at 2 s
        while writer.failed is not None:  # noqa: ASYNC110 - the state the bridge reads
            await trio.sleep(0.01)


@pytest.mark.parametrize("fault", ["locked", "read_only"])
async def test_an_unrecorded_outcome_is_answered_with_meta_journal_and_recovers(
    tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "j.db"
    if fault == "read_only":
        with _chattr_works(tmp_path):
            pass
    breaker: Fault = Locked(path) if fault == "locked" else ReadOnly(path)
    async with inprocess_bridge(path, httpx.MockTransport(breaker.handler), busy_timeout=0.1) as (
        bridge,
        writer,
    ):
        breaker.armed = True
        try:
            first = await bridge.call("task_create", CREATE, {}, 1)
            refused = await bridge.call("task_create", CREATE, {}, 2)
        finally:
            breaker.repair()
        # The effect happened: the answer is the result, never a plain success.
        assert not first.is_error
        content: dict[str, Any] = first.structured_content  # type: ignore[assignment]
        note = content["meta"]["journal"]
        assert note["recorded"] is False and note["in_doubt"] is True
        assert note["reason"] in (("locked",) if fault == "locked" else ("read_only", "io_error"))
        assert "could not be recorded" in first.content[0].text  # type: ignore[union-attr]
        # While the journal is down, mutations fail closed (nothing sent unrecorded).
        refused_error = refused.structured_content["error"]  # type: ignore[index]
        assert refused_error["code"] == "journal_unavailable"
        assert refused_error["retryable"] is True  # the writer re-probes and recovers
        await _wait_until_healthy(writer)
        again = await bridge.call("task_create", CREATE, {}, 3)
        assert not again.is_error and "journal" not in again.structured_content["meta"]  # type: ignore[index]
    with journal.open_reader(path) as reader:
        [gap] = list(reader.events(kind="journal_gap"))
    assert isinstance(gap.payload, journal.JournalGap)
    assert gap.payload.reason == note["reason"]
    assert gap.payload.calls == ["s_inproc.1", "s_inproc.2"]
    assert gap.payload.seconds >= 0 and gap.payload.probes >= 1
    result = verified(path)
    assert [(c.call_id, c.reason) for c in result.in_doubt] == [("s_inproc.1", "journal_gap")]


@contextmanager
def _small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A real, size-limited filesystem (tmpfs), or a skip saying why there cannot be one."""
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(
            "mounting a size-limited tmpfs is not permitted here (needs root, as in CI): "
            + done.stderr.decode(errors="replace").strip()
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; return it (delete it to free the space)."""
    filler = directory / "filler"
    chunk = b"\0" * (64 * 1024)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:
            while True:  # the last few bytes too
                f.write(b"\0" * 512)
        except OSError:
            pass
    return filler


async def test_a_full_filesystem_between_request_and_outcome(
    file_runtime: Any, tmp_path: Path
) -> None:
    from agentteam_task_bridge import replay
    from agentteam_task_bridge.runtime import Runtime

    from .bridge_harness import open_bridge

    assert isinstance(file_runtime, Runtime)
    with _small_tmpfs(tmp_path / "fs", "8m") as fs:
        path = fs / "journal.db"
        filler: list[Path] = []
        take = file_runtime.faults.take

        def fill_on_create(op: str) -> Any:
            # The bridge journals a mutation's request durably before sending it: fill the disk
            # now, before the runtime answers, so that only the outcome meets a full disk.
            if op == "create" and not filler:
                filler.append(_fill(fs))
            return take(op)

        file_runtime.faults.take = fill_on_create  # type: ignore[method-assign]
        async with open_bridge(
            file_runtime.bridge_env(), path, runtime=file_runtime, check_journal=False
        ) as bridge:
            first = await bridge.call("task_create", CREATE)
            assert not first.is_error, first.structured_content
            assert file_runtime.store.stats()["tasks"] == 1  # the effect happened
            content: dict[str, Any] = first.structured_content  # type: ignore[assignment]
            assert content["meta"]["journal"] == {
                "recorded": False,
                "reason": "disk_full",
                "in_doubt": True,
            }
            assert content["data"]["tasks"][0]["number"] == 1
            await bridge.fails("task_create", CREATE, code="journal_unavailable")
            assert file_runtime.store.stats()["tasks"] == 1  # nothing sent unrecorded
            read = await bridge.ok("task_list", {"channel": "general"})
            assert read["meta"]["journal"] == {"recorded": False, "reason": "disk_full"}
            filler[0].unlink()  # space again: the bridge recovers by itself, no restart
            with trio.fail_after(60):  # bounds a hang; the re-probe backoff tops out at 2 s
                while not _has_gap(path):  # noqa: ASYNC110 - a row in another process's file
                    await trio.sleep(0.05)
            again = await bridge.ok("task_create", CREATE)
            assert "journal" not in again["meta"]
        key = journal.load_key(
            fs / "config" / "agentteam-bridge" / "journal-signing.key", create=False
        )
        result = replay.verify([path], key=key)
        assert result.ok, result.findings
        assert [c.reason for c in result.in_doubt] == ["journal_gap"]
        with journal.open_reader(path) as reader:
            [gap] = list(reader.events(kind="journal_gap"))
        assert isinstance(gap.payload, journal.JournalGap) and gap.payload.reason == "disk_full"
        assert len(gap.payload.calls) == 3  # the create, the refused create, the read


def _has_gap(path: Path) -> bool:
    with journal.open_reader(path) as reader:
        return any(True for _ in reader.events(kind="journal_gap"))
