"""The journal fails closed: disk full, read-only, locked, closed: each a classified error."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from agentteam_task_bridge import journal

from .journal_helpers import KEY, SESSION, event, write_journal


def _big(i: int) -> journal.Event:
    return journal.Event(
        session_id=SESSION,
        call_id=f"c{i}",
        payload=journal.CallResult(result={"blob": "y" * 4000, "i": i}),
    )


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make a file unwritable even for root (immutable attribute) or by mode for other users."""
    if os.geteuid() != 0:
        path.chmod(0o400)
        try:
            yield
        finally:
            path.chmod(0o600)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make a file read-only")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i unavailable here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_a_full_disk_fails_the_append_with_a_classified_reason(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, max_bytes=256 * 1024) as writer:
        with pytest.raises(journal.JournalUnavailable) as caught:
            for i in range(1000):
                await writer.append(_big(i))
        assert caught.value.reason == "disk_full"
        assert writer.failed is not None and writer.failed.reason == "disk_full"
        committed = writer.head[0]
        # Failed stays failed, for durable and non-durable appends alike: nothing is accepted
        # that could not be recorded.
        for durable in (True, False):
            with pytest.raises(journal.JournalUnavailable, match="disk_full"):
                await writer.append(event("call_received"), durable=durable)
    with journal.open_reader(path) as reader:
        assert reader.head()[0] == committed
        assert journal.verify(reader, key=KEY).ok


async def test_a_lock_held_by_another_tool_fails_then_the_writer_recovers(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, busy_timeout=0.05) as writer:
        await writer.append(event("call_received"))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # e.g. a careless tool holding the write lock
        with pytest.raises(journal.JournalUnavailable) as caught:
            await writer.append(event("call_result"))
        assert caught.value.reason == "locked"
        with pytest.raises(journal.JournalUnavailable, match="locked"):  # failed stays failed
            await writer.append(event("call_result", call_id="call-2"))
        other.execute("ROLLBACK")
        other.close()
        await writer.recover()  # the writer's own re-probe would get there too
        assert writer.failed is None
        # The call that lost an event is closed: its story stays a clean prefix.
        with pytest.raises(journal.JournalUnavailable, match="lost in a journal gap"):
            await writer.append(event("call_result"))
        assert await writer.append(event("call_received", call_id="call-3")) == 3
    with journal.open_reader(path) as reader:
        gap = next(iter(reader.events(kind="journal_gap")))
        assert journal.verify(reader, key=KEY).ok
    assert gap.seq == 2 and isinstance(gap.payload, journal.JournalGap)
    assert (gap.payload.reason, gap.payload.calls) == ("locked", ["call-1", "call-2"])
    assert (gap.payload.events_lost, gap.payload.events_refused) == (1, 1)


async def test_the_writer_recovers_by_itself_once_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, busy_timeout=0.05) as writer:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(journal.JournalUnavailable, match="locked"):
            await writer.append(event("call_received"))
        other.execute("ROLLBACK")
        other.close()
        with trio.fail_after(60):  # bounds a hang; the backoff tops out at a few seconds
            while writer.failed is not None:  # noqa: ASYNC110 - the state a caller would see
                await trio.sleep(0.01)
        assert await writer.append(event("call_received", call_id="call-2")) == 2
    with journal.open_reader(path) as reader:
        assert [r.kind for r in reader.events()] == ["journal_gap", "call_received"]
        assert journal.verify(reader, key=KEY).ok


def test_the_sync_writer_raises_and_stores_nothing_of_the_failed_call(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY, max_bytes=128 * 1024) as writer:
        with pytest.raises(journal.JournalUnavailable) as caught:
            writer.append_many([_big(i) for i in range(100)])
        assert caught.value.reason == "disk_full"
        assert writer.head[0] == 0
        assert writer.append(event("call_received")) == 1  # smaller: fits
    assert journal.verify(path, key=KEY).ok


def test_a_read_only_journal_cannot_be_opened_for_writing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    with read_only(path), pytest.raises(journal.JournalUnavailable) as caught:
        journal.open_sync_writer(path, key=KEY)
    assert caught.value.reason == "read_only"
    with journal.open_reader(path) as reader:  # still readable
        assert reader.count() == 1


async def test_a_read_only_journal_fails_the_trio_writer_too(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    with read_only(path), pytest.raises(journal.JournalUnavailable, match="read_only"):
        async with journal.open_writer(path, key=KEY):
            pass


def test_a_second_writer_is_refused_as_locked(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY) as first:
        with pytest.raises(journal.JournalUnavailable) as caught:
            journal.open_sync_writer(path, key=KEY)
        assert caught.value.reason == "locked"
        first.append(event("call_received"))
    with journal.open_sync_writer(path, key=KEY) as second:  # released on close
        assert second.head[0] == 1


def test_an_uncreatable_path_is_classified(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(journal.JournalUnavailable) as caught:
        journal.open_sync_writer(blocker / "j.db", key=KEY)
    assert caught.value.reason == "cannot_open"


async def test_a_closed_writer_refuses_appends(tmp_path: Path) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
        pass
    with pytest.raises(journal.JournalUnavailable, match="closed"):
        await writer.append(event("call_received"))


def test_another_sqlite_database_is_not_taken_for_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "runtime.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(journal.JournalFormatError, match="not a journal"):
        journal.open_sync_writer(path, key=KEY)
    with pytest.raises(journal.JournalFormatError):
        journal.open_reader(path)


def test_a_newer_schema_is_not_written_by_older_code(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {journal.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(journal.JournalFormatError, match="newer"):
        journal.open_sync_writer(path, key=KEY)


def test_a_missing_journal_is_not_found_by_readers(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        journal.open_reader(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()


async def test_an_unencodable_event_is_the_callers_error_and_takes_no_seq(tmp_path: Path) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
        with pytest.raises(journal.EventEncodeError):
            await writer.append(
                journal.Event(session_id=SESSION, payload=journal.CallResult(result=object()))
            )
        assert writer.failed is None
        assert await writer.append(event("call_received")) == 1
        await trio.lowlevel.checkpoint()


async def test_the_writer_counts_the_time_it_spent_failed_and_the_events_it_lost(
    tmp_path: Path,
) -> None:
    """Journal health for metrics: seconds degraded (the open spell included), events lost."""
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, busy_timeout=0.05) as writer:
        await writer.append(event("call_received"))
        assert (writer.stats.degraded_seconds, writer.stats.lost) == (0.0, 0)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(journal.JournalUnavailable, match="locked"):
            await writer.append(event("call_result"))
        await trio.sleep(0.2)  # real time: the spell is measured on the monotonic clock
        during = writer.stats
        # The call's event, and each journal_gap row a re-probe tried while the lock held.
        assert during.lost >= 1 and during.degraded_seconds >= 0.2, during
        other.execute("ROLLBACK")
        other.close()
        await writer.recover()
        # The writer's own re-probe may have got there first: recover() then returns while
        # that re-probe's journal_gap row is still being committed. Count once it is in.
        await writer.flush()
        after = writer.stats
        assert after.degraded_seconds >= during.degraded_seconds
        await trio.sleep(0.05)
        assert writer.stats.degraded_seconds == after.degraded_seconds  # the spell is closed
        assert after.appended - after.committed - after.lost == 0, after
