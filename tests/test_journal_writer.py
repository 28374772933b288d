"""The trio writer: group commit, durability, back-pressure, checkpoints, shutdown under cancel."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentteam_task_bridge import journal

from .journal_helpers import KEY, SESSION, VKEY, event


def _call(i: int) -> journal.Event:
    return journal.Event(
        session_id=SESSION,
        call_id=f"c{i}",
        gen_ai_tool_name="task_list",
        payload=journal.CallReceived(arguments={"i": i}),
    )


async def test_concurrent_durable_appends_are_group_committed(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        seqs: list[int] = []

        async def task(t: int) -> None:
            for k in range(20):
                seqs.append(await writer.append(_call(t * 100 + k)))

        async with trio.open_nursery() as nursery:
            for t in range(16):
                nursery.start_soon(task, t)
        stats = writer.stats
    assert sorted(seqs) == list(range(1, 321))
    assert stats.committed == 320
    assert stats.commits < 320 / 2  # many events per fsync'd transaction
    assert stats.largest_batch > 1
    assert journal.verify(path, key=KEY).ok


async def test_seq_order_is_append_order(tmp_path: Path) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
        seqs = [await writer.append(_call(i), durable=i % 2 == 0) for i in range(50)]
    assert seqs == list(range(1, 51))
    with journal.open_reader(tmp_path / "j.db") as reader:
        assert [r.call_id for r in reader.events()] == [f"c{i}" for i in range(50)]


async def test_non_durable_appends_return_at_once_and_are_committed_with_the_next_group(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        for i in range(10):
            await writer.append(_call(i), durable=False)
        await writer.flush()
        assert writer.head[0] == 10
        assert writer.stats.durable_commits >= 1  # flush fsyncs what NORMAL commits left
    with journal.open_reader(path) as reader:
        assert reader.count() == 10


async def test_a_calls_non_durable_events_travel_with_its_durable_one_in_one_commit(
    tmp_path: Path,
) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
        for call in range(20):
            for i in range(4):
                await writer.append(_call(call * 10 + i), durable=False)
            await writer.append(_call(call * 10 + 9), durable=True)
        stats = writer.stats
    assert stats.committed == 100
    assert stats.commits == 20  # one transaction (and one thread wake-up) per call, not five
    assert stats.largest_batch == 5


async def test_non_durable_events_alone_are_committed_within_the_linger(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        await writer.append(_call(1), durable=False)
        await writer.append(_call(2), durable=False)
        # The event loop learns of the commit after the worker moved `head`: wait for the
        # stats (the later of the two); the deadline only bounds a hang.
        with trio.fail_after(60):
            while writer.stats.committed < 2:  # noqa: ASYNC110 - polls what a reader would see
                await trio.sleep(0.001)
        assert writer.head[0] == 2 and writer.stats.commits == 1
        with journal.open_reader(path) as reader:
            assert reader.count() == 2  # visible to other readers without a flush


async def test_a_bounded_queue_gives_back_pressure(tmp_path: Path) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY, queue_size=4) as writer:
        async with trio.open_nursery() as nursery:
            for t in range(8):
                nursery.start_soon(_append_many, writer, t)
        await writer.flush()
        stats = writer.stats
    assert stats.committed == 8 * 25
    assert stats.largest_batch <= 4  # never more than queue_size events waiting


async def _append_many(writer: journal.AsyncWriter, t: int) -> None:
    for k in range(25):
        await writer.append(_call(t * 100 + k), durable=False)


async def test_checkpoints_at_the_first_durable_commit_every_n_events_and_on_close(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, checkpoint_every=10) as writer:
        for i in range(35):
            await writer.append(_call(i))
    with journal.open_reader(path) as reader:
        seqs = [cp.seq for cp in reader.checkpoints()]
        # The first at once (a journal with events and no checkpoint had it stripped), then at
        # each multiple of checkpoint_every, and on close.
        assert seqs == [1, 10, 20, 30, 35]
        assert all(cp.check(VKEY) for cp in reader.checkpoints())
        assert reader.checkpoints()[-1].head_hash == reader.head()[1]


async def test_an_idle_writer_checkpoints_after_the_interval(tmp_path: Path) -> None:
    exported = tmp_path / "cp.json"
    async with journal.open_writer(
        tmp_path / "j.db", key=KEY, checkpoint_interval=0.05, checkpoint_path=exported
    ) as writer:
        await writer.append(_call(0))
        with trio.fail_after(60):  # bounds a hang only
            while writer.last_checkpoint is None:  # noqa: ASYNC110 - polling a property
                await trio.sleep(0.02)
        assert journal.load_checkpoint(exported) == writer.last_checkpoint
        assert writer.last_checkpoint.seq == 1


async def test_an_explicit_checkpoint_covers_everything_appended(tmp_path: Path) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
        for i in range(5):
            await writer.append(_call(i), durable=False)
        checkpoint = await writer.checkpoint()
    assert (checkpoint.seq, checkpoint.journal_id) == (5, writer.journal_id)
    assert checkpoint.check(VKEY)


async def test_cancelled_shutdown_still_commits_what_was_appended_and_checkpoints(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with trio.CancelScope() as scope:
        async with journal.open_writer(path, key=KEY) as writer:
            for i in range(100):
                await writer.append(_call(i), durable=False)
            scope.cancel()
            await trio.sleep(1)  # cancelled here
    assert scope.cancelled_caught
    with journal.open_reader(path) as reader:
        assert reader.count() == 100
        assert reader.checkpoints()[-1].seq == 100
    assert journal.verify(path, key=KEY).ok


async def test_an_appender_cancelled_while_waiting_leaves_no_gap(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(writer.append, _call(i))
            nursery.cancel_scope.cancel()
        await writer.append(_call(99))
    report = journal.verify(path, key=KEY)
    assert report.ok and report.head_seq == report.events


async def test_a_reader_runs_beside_a_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        await writer.append(event("session_started"))
        with journal.open_reader(path) as reader:
            stream = reader.events()
            assert next(stream).kind == "session_started"
            await writer.append(_call(1))  # not blocked by the open read
            assert reader.count() == 2
            assert journal.verify(reader, key=KEY).ok


@pytest.mark.parametrize("durable", [True, False])
async def test_synchronous_full_off_still_commits(tmp_path: Path, durable: bool) -> None:
    async with journal.open_writer(tmp_path / "j.db", key=KEY, synchronous_full=False) as writer:
        await writer.append(_call(1), durable=durable)
        await writer.flush()
        assert writer.head[0] == 1
    assert journal.verify(tmp_path / "j.db").events == 1
