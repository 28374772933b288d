"""Segments: a journal rolled over by size or age into files chained to one another.

Every segment after the first opens with ``segment_started`` naming the previous file, its head
hash and its closing signed checkpoint; seq and the journal id go on. `verify` checks the chain
across the files and names a missing, replaced or truncated segment; every other reader reads
the files as one journal.
"""

from __future__ import annotations

import io
import itertools
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import CallReceived, SegmentStarted
from tests.journal_helpers import KEY, VKEY
from tests.journal_helpers.segmented import (
    TEXT,
    call_events,
    files_of,
    first_row,
    session_event,
    write_segmented,
)
from tests.replay_helpers import replay_cli
from tools.reliability.wire import bridge_env, open_raw_bridge


def verify(*paths: Path, **options: Any) -> replay.VerifyResult:
    return replay.verify(list(paths), trusted=[VKEY], **options)


def rules(result: replay.VerifyResult) -> list[tuple[int | None, str]]:
    return sorted({(f.seq, f.rule) for f in result.findings}, key=lambda f: (f[0] or 0, f[1]))


def drop_triggers(path: Path, *statements: str) -> None:
    """What an attacker with file access does: drop the triggers, then edit."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def test_a_journal_rolled_over_into_segments_verifies_as_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 60)
    files = files_of(path)
    assert len(files) >= 4
    names = ["journal-1.db", "journal-1.seg0002.db", "journal-1.seg0003.db"]
    assert [f.name for f in files[:3]] == names

    # Each later segment opens with segment_started, chained to the previous file's head.
    expected_seq = 1
    journal_ids = set()
    for previous, current in itertools.pairwise(files):
        with journal.open_reader(previous) as reader:
            head_seq, head_hash = reader.head()
            journal_ids.add(reader.journal_id)
            assert reader.segment.next_file == current.name  # sealed
        row = first_row(current)
        started = msgspec.json.decode(row[14], type=SegmentStarted)
        assert (row[0], row[15]) == (head_seq + 1, head_hash)
        assert (started.previous_file, started.previous_seq) == (previous.name, head_seq)
        assert started.previous_hash == head_hash and started.reason == "size"
        assert started.previous_checkpoint is not None
        assert started.previous_checkpoint.check(VKEY)
        assert started.previous_checkpoint.seq == head_seq
        expected_seq = head_seq + 1
    assert expected_seq > 1 and len(journal_ids) == 1

    result = verify(path)
    assert result.ok, result.findings
    (report,) = result.journals
    assert report.segments == [str(f) for f in files]
    # One later segment alone checks from its link (journal.verify is per file).
    alone = journal.verify(files[2], key=KEY)
    assert alone.ok and alone.events == alone.head_seq - first_row(files[2])[0] + 1
    assert report.events == report.head_seq == 1 + 60 * 3 + len(files) - 1
    assert report.calls == 60

    # The CLI: the journal's first file name stands for its segments, a directory for all.
    for given in (path, tmp_path):
        done = replay_cli("verify", given, "--trusted-key", VKEY.to_text())
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("seed", range(2))
def test_a_segment_rolls_over_at_the_commit_that_fills_it(tmp_path: Path, seed: int) -> None:
    """The size is measured lazily (only once the commits could have filled the segment), yet
    after every append the live segment is under ``segment_bytes``: the commit that reaches it
    rolls over, whatever the rows (tiny ones with long envelope columns, 4-byte text)."""
    import random

    rng = random.Random(seed)
    limit = 160 * 1024
    base = tmp_path / "j.db"

    def live_bytes() -> int:
        live = max(base.parent.glob("j*.db"), key=journal.segment_index)
        conn = sqlite3.connect(f"file:{live}?mode=ro", uri=True)
        try:
            pages, size = (
                conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size")
            )
        finally:
            conn.close()
        return int(pages) * int(size)

    rolled = 0
    with journal.open_sync_writer(base, key=KEY, segment_bytes=limit, synchronous_full=False) as w:
        for i in range(1500):
            text = rng.choice(["", "x" * rng.randrange(200), "𝄞漢" * rng.randrange(1, 3000)])
            events = [
                journal.Event(
                    session_id=f"s{i}" * rng.randrange(1, 30),
                    call_id=f"c{i}-{k}" * rng.randrange(1, 30),
                    gen_ai_tool_name="t" * rng.randrange(1, 128),
                    jsonrpc_request_id="r" * rng.randrange(1, 256),
                    payload=CallReceived(arguments={"title": text}),
                )
                for k in range(rng.randrange(1, 4))
            ]
            w.append_many(events, durable=False)
            assert live_bytes() < limit, i
            rolled = max(
                rolled,
                journal.segment_index(max(base.parent.glob("j*.db"), key=journal.segment_index)),
            )
    assert rolled >= 3


def test_every_reader_reads_a_segmented_journal_as_one(tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 40)
    files = files_of(path)
    assert len(files) >= 3
    with replay.open_journals([path]) as journals:
        seqs = [r.seq for r in journals.records()]
    assert seqs == list(range(1, seqs[-1] + 1))
    calls = replay.list_calls([path]).calls
    assert [c.call_id for c in calls] == [f"c{i}" for i in range(40)]
    assert all(c.status == "result" for c in calls)
    assert replay.audit([path]).calls == 40
    assert replay.check_idempotency([path]).ok
    # A call in the last segment, shown whole with its 4-byte text.
    detail = replay.show_call([path], "c39")
    assert detail.arguments["description"] == TEXT
    out = io.StringIO()
    assert replay.export_jsonl([path], out).events == len(seqs)
    # The CLI, given the journal's first file name.
    done = replay_cli("calls", path, "--json")
    assert done.returncode == 0, done.stderr
    assert len(msgspec.json.decode(done.stdout)["calls"]) == 40


def test_a_segment_rolls_over_by_age_and_the_async_writer_keeps_order(tmp_path: Path) -> None:
    """Many tasks append at once (durable and not) while segments roll over after every commit
    (an age already past); every seq is in one unbroken chain."""
    path = tmp_path / "journal-1.db"
    durable_seqs: list[int] = []

    async def main() -> None:
        async with journal.open_writer(path, key=KEY, segment_age=1e-9) as writer:
            await writer.append(session_event())

            async def task(t: int) -> None:
                for k in range(15):
                    for event in call_events(t * 100 + k):
                        seq = await writer.append(event, durable=k % 2 == 0)
                        if k % 2 == 0:
                            durable_seqs.append(seq)

            async with trio.open_nursery() as nursery:
                for t in range(6):
                    nursery.start_soon(task, t)

    trio.run(main)
    files = files_of(path)
    assert len(files) >= 3
    result = verify(path)
    assert result.ok, result.findings
    assert max(durable_seqs) <= result.journals[0].head_seq
    started = [msgspec.json.decode(first_row(f)[14], type=SegmentStarted) for f in files[1:]]
    assert {s.reason for s in started} == {"age"}


def test_a_writer_reopens_the_live_segment_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 25)
    before = files_of(path)
    with journal.open_sync_writer(path, key=KEY) as writer:  # no roll-over configured
        assert writer.path == before[-1]
        head = writer.head
        seq = writer.append(call_events(99)[0])
        assert seq == head[0] + 1
    # A closed segment takes no more events, even from SQLite directly.
    with pytest.raises(sqlite3.IntegrityError, match="segment is closed"):
        conn = sqlite3.connect(before[0], isolation_level=None)
        try:
            row = list(first_row(before[0]))
            row[0] = 10_000
            conn.execute(
                f"INSERT INTO events ({', '.join(journal.COLUMNS)})"
                f" VALUES ({', '.join('?' * len(row))})",
                row,
            )
        finally:
            conn.close()
    assert verify(path).ok


def test_verify_names_a_missing_middle_segment(tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 60)
    files = files_of(path)
    gone = files[2]
    first_after = first_row(files[3])[0]
    gone.unlink()
    result = verify(path)
    assert not result.ok
    assert (first_after, "segment_missing") in rules(result)
    missing = next(f for f in result.findings if f.rule == "segment_missing")
    assert gone.name in missing.detail and f"..{first_after - 1}" in missing.detail
    done = replay_cli("verify", path, "--trusted-key", VKEY.to_text())
    assert done.returncode == 1
    assert "segment_missing" in done.stdout


def test_verify_names_a_segment_replaced_by_another_history(tmp_path: Path) -> None:
    """A segment swapped for one of another history (a fork of the same journal, linked to the
    same predecessor): the next segment's link and the closing checkpoint it names break."""
    path = tmp_path / "journal-1.db"
    write_segmented(path, 12)
    fork_dir = tmp_path / "fork"
    fork_dir.mkdir()
    for f in files_of(path):
        shutil.copy(f, fork_dir / f.name)
    write_segmented(path, 40, start=100)
    write_segmented(fork_dir / path.name, 40, start=500)  # the same seqs, other events
    files = files_of(path)
    middle = files[len(files) // 2]
    shutil.copy(fork_dir / middle.name, middle)
    next_first = first_row(files[len(files) // 2 + 1])[0]
    result = verify(path)
    assert (next_first, "segment_link_broken") in rules(result)
    assert (next_first - 1, "checkpoint_hash_mismatch") in rules(result)


def test_verify_names_a_truncated_last_segment(tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 30, checkpoint_path=tmp_path / "journal-1.db.checkpoint.json")
    files = files_of(path)
    live = files[-1]
    with journal.open_reader(live) as reader:
        head_seq = reader.head()[0]
    # The tail cut, its stored checkpoints with it: the exported one still names the head.
    drop_triggers(
        live,
        f"DELETE FROM events WHERE seq > {head_seq - 3}",
        f"DELETE FROM checkpoints WHERE seq > {head_seq - 3}",
    )
    result = verify(path)
    assert (head_seq - 2, "truncated_before_checkpoint") in rules(result)

    # The whole live segment removed: the one before it names it as its successor.
    live.unlink()
    result = verify(path)
    assert any(f.rule == "segment_missing" and live.name in f.detail for f in result.findings)


def test_a_journal_without_its_first_segments_is_not_ok(tmp_path: Path) -> None:
    """Segments gone from the start (with no prune journaled) are reported, not ignored."""
    path = tmp_path / "journal-1.db"
    write_segmented(path, 40)
    files = files_of(path)
    start = first_row(files[2])[0]
    files[0].unlink()
    files[1].unlink()
    result = verify(path)
    assert (start, "segment_missing") in rules(result)
    # A writer still finds the live segment by the journal's name (it was never recreated).
    with journal.open_sync_writer(path, key=KEY) as writer:
        assert writer.path == files[-1]
    assert not path.exists()


# --- crashes ------------------------------------------------------------------------------

CRASH_SCRIPT = Path(__file__).parent / "journal_helpers" / "crash_writer.py"


def run_writer(path: Path, seed: int, crash_at: str | None) -> list[tuple[int, int, int]]:
    """Run the writer until it kills itself (``crash_at``) or, without, until it has rolled over
    a few times and the test kills it; return the durable appends it reported."""
    args = [sys.executable, str(CRASH_SCRIPT), str(path), str(seed), "--segments"]
    proc = subprocess.Popen(
        [*args, "--crash-at", crash_at] if crash_at else args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if crash_at is None and len(journal.segment_files(path)) >= 4:
                break  # killed while writing into its fourth segment, at no chosen point
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    promised = []
    # The last piece has no newline when the kill cut a line short: only whole lines count.
    for line in ("".join(lines) + out).split("\n")[:-1]:
        if line != "ready":
            seq, task, k = map(int, line.split())
            promised.append((seq, task, k))
    return promised


def check_after_crash(path: Path, promised: list[tuple[int, int, int]]) -> None:
    """The journal verifies as one chain and every durable append that returned is in it."""
    result = verify(path)
    assert result.ok, result.findings
    with replay.open_journals([path]) as journals:
        records = {r.seq: r for r in journals.records()}
    assert sorted(records) == list(range(1, max(records) + 1))
    for seq, task, k in promised:
        payload = records[seq].payload
        assert isinstance(payload, CallReceived)
        assert (payload.arguments["task"], payload.arguments["k"]) == (task, k)


@pytest.mark.parametrize("crash_at", ["before_publish", "after_publish", None])
def test_sigkill_during_a_roll_over_leaves_a_verifiable_journal(
    tmp_path: Path, crash_at: str | None
) -> None:
    path = tmp_path / "journal-1.db"
    promised = run_writer(path, 1, crash_at)
    assert promised
    files = files_of(path)
    hidden = journal.segment_path(path, 4).with_name(".journal-1.seg0004.db.tmp")
    if crash_at == "before_publish":
        # Killed between closing the third segment and publishing the fourth: the third stays
        # live (its closing checkpoint signed), the fourth exists only under its hidden name.
        assert len(files) == 3 and hidden.exists()
    if crash_at == "after_publish":
        # Published, the third not sealed yet: the fourth is live, linked to the third's head.
        assert len(files) == 4
        with journal.open_reader(files[2]) as reader:
            assert reader.segment.next_file is None
    check_after_crash(path, promised)

    # A new writer goes on in the live segment (sealing a predecessor the crash left open) and
    # rolls over again; nothing forks.
    write_segmented(path, 30, start=1000)
    after = files_of(path)
    assert len(after) > len(files)
    for closed in after[:-1]:
        with journal.open_reader(closed) as reader:
            assert reader.segment.next_file is not None
    assert not hidden.exists() or crash_at is None
    check_after_crash(path, promised)


# --- real bridges ---------------------------------------------------------------------------

BRIDGE_CALLS = 10


@pytest.mark.slow
async def test_bridges_in_one_pool_roll_over_under_load_and_replay_reads_every_chain(
    tmp_path: Path,
) -> None:
    """Two `serve --embedded` sessions at once in one pool directory, each journal rolling over
    every few calls of 4-byte text; then `verify` and `calls` over the pool see two journals,
    each one chain across its segments, every call in it."""
    pool = tmp_path / "journals"
    pool.mkdir(mode=0o700)
    env = bridge_env({}, tmp_path)
    both_open = trio.Event()
    opened = 0

    async def session(name: str) -> None:
        nonlocal opened
        extra = ("--embedded", "--journal-segment-bytes", "256K")
        async with open_raw_bridge(pool, env, *extra, client_name=name) as raw:
            opened += 1
            if opened == 2:
                both_open.set()
            # Each holds a journal of its own before either calls: on a loaded machine one
            # session could otherwise end before the other starts, and the pool reuse its file.
            await both_open.wait()
            for i in range(BRIDGE_CALLS):
                task = {"title": f"{name} {i} " + "𝄞" * 190, "description": "𝄞漢" * 5000}
                arguments = {"channel": "general", "tasks": [task]}
                answer = await raw.call("task_create", arguments)
                assert not answer["result"].get("isError"), answer

    with trio.fail_after(300):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session, "a")
            nursery.start_soon(session, "b")

    chains = {base: files_of(base) for base in (pool / "journal-1.db", pool / "journal-2.db")}
    # At least one roll-over each: how many depends on how far commits run ahead of the event
    # loop's sequencing of the next segment's first row (fewer, larger segments under load).
    assert all(len(files) >= 2 for files in chains.values()), chains
    local = {**os.environ, **env}
    done = replay_cli("verify", pool, "--json", env=local)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    verified = msgspec.json.decode(done.stdout)
    assert sorted(j["segments"] for j in verified["journals"]) == sorted(
        [str(f) for f in files] for files in chains.values()
    )
    done = replay_cli("calls", pool, "--json", env=local)
    assert done.returncode == 0, done.stderr
    calls = msgspec.json.decode(done.stdout)["calls"]
    assert len(calls) == 2 * BRIDGE_CALLS
    assert {c["status"] for c in calls} == {"result"}
