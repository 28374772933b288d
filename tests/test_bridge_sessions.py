"""Many sessions with the default configuration: every bridge serves and journals, no flag.

Eight bridges start at once with nothing but the README's registration (`serve --embedded`, or
`serve` with the AGENTTEAM_* environment of one shared reference runtime) and a home directory
of their own; each drives many calls concurrently, some are SIGKILLed mid-load, and
`agentteam-replay verify` with no path then verifies every session's calls.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Event, SessionStarted
from agentteam_task_bridge.replay import journal_files
from agentteam_task_bridge.runtime import RuntimeConfig, open_runtime
from tests.replay_helpers import replay_cli
from tools.reliability.load import DriveStats, Workload, drive, seed_tasks
from tools.reliability.wire import RawBridge, bridge_env

BRIDGES = 8
KILLED = 3
CALLS = 40  # per bridge
IN_FLIGHT = 6  # per bridge
DEADLINE = 300  # seconds; only bounds a hang


def home_env(home: Path, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The environment of a user whose home is `home` (nothing else inherited)."""
    return {**bridge_env({}, home), "HOME": str(home), **extra}


@asynccontextmanager
async def default_bridge(
    env: Mapping[str, str], *extra: str, name: str, expect_code: int = 0
) -> AsyncIterator[RawBridge]:
    """`agentteam-bridge serve EXTRA` with no --journal, as a client registration starts it."""
    stderr_path = Path(env["HOME"]) / f"{name}.stderr"
    with stderr_path.open("wb") as errlog:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=dict(env),
        )
    raw = RawBridge(process, stderr_path, name)
    raw.answer_timeout = DEADLINE
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(raw._read)
            yield raw
            if not raw.killed:
                assert process.stdin is not None
                await process.stdin.aclose()
            code = await process.wait()
            assert raw.killed or code == expect_code, (
                f"{name} exited {code}: {raw.stderr()[-2000:]}"
            )
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


class Midway(Workload):
    """The workload, setting `reached` when call number `at` is about to be sent."""

    def __init__(self, inner: Workload, *, at: int, reached: trio.Event) -> None:
        self.__dict__.update(inner.__dict__)
        self._at = at
        self._reached = reached

    def call(self, i: int) -> tuple[str, dict[str, Any]]:
        if i >= self._at:
            self._reached.set()
        return super().call(i)


async def run_sessions(
    env: Mapping[str, str], *extra: str, seed: int
) -> tuple[dict[str, DriveStats], set[str]]:
    """BRIDGES sessions at once, each driving CALLS calls; KILLED of them SIGKILLed mid-load.
    Returns each session's stats by client name, and the names of the killed ones."""
    rng = random.Random(seed)
    doomed = set(rng.sample(range(BRIDGES), KILLED))
    stats: dict[str, DriveStats] = {}
    all_started = trio.Event()
    started = 0

    async def session(i: int) -> None:
        nonlocal started
        name = f"session-{i}"
        async with default_bridge(env, *extra, name=name) as raw:
            await raw.initialize()
            numbers = await seed_tasks(raw, 2)
            started += 1
            if started == BRIDGES:
                all_started.set()
            await all_started.wait()  # every session holds its journal at the same time
            workload = Workload(random.Random(seed + i), f"s{i}", numbers)
            if i not in doomed:
                stats[name] = await drive(raw, workload, calls=CALLS, in_flight=IN_FLIGHT)
                return
            # Mid-load: each worker sends its next call once its last is answered, so the call
            # numbered IN_FLIGHT + n comes after n answers, with IN_FLIGHT calls in flight.
            mid_load = trio.Event()
            workload = Midway(workload, at=IN_FLIGHT + CALLS // 4, reached=mid_load)
            async with trio.open_nursery() as nursery:

                async def load() -> None:
                    stats[name] = await drive(raw, workload, calls=10**6, in_flight=IN_FLIGHT)

                nursery.start_soon(load)
                await mid_load.wait()
                raw.kill()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for i in range(BRIDGES):
                nursery.start_soon(session, i)
    killed = {f"session-{i}" for i in doomed}
    survivors = [s for name, s in stats.items() if name not in killed]
    # Every call of a surviving session is answered (a tool error under load is still an answer).
    assert all(s.protocol_errors == [] and s.answered == CALLS for s in survivors)
    assert all(s.ok > 0 for s in survivors)
    return stats, killed


def check_replay_sees_every_session(home: Path, env: Mapping[str, str], killed: set[str]) -> None:
    pool = home / "data" / "agentteam-bridge" / "journals"
    files = sorted(pool.glob("journal-*.db"))
    assert len(files) == BRIDGES  # one file per concurrent session, no more

    done = replay_cli("verify", "--json", env=dict(env))
    assert done.returncode in (0, 3), done.stderr + done.stdout[-3000:]
    verified = json.loads(done.stdout)
    assert verified["findings"] == []
    assert sorted(j["path"] for j in verified["journals"]) == [str(f) for f in files]
    # Signatures counted under this machine's own key (no flag): each session that ended
    # signed a final checkpoint.
    assert len(verified["trusted_keys"]) == 1
    signed = sum(j["checkpoints_checked"] > 0 for j in verified["journals"])
    assert signed >= BRIDGES - len(killed), verified["journals"]

    done = replay_cli("calls", "--json", env=dict(env))
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)["calls"]
    client = {c["session_id"]: c["client_name"] for c in calls}
    assert sorted(client.values()) == sorted(f"session-{i}" for i in range(BRIDGES))
    # In-doubt calls are the killed sessions' unanswered mutations, listed and not failures;
    # every call of a session that ended has its outcome.
    assert {client[d["session_id"]] for d in verified["in_doubt"]} <= killed
    unfinished = {
        client[c["session_id"]] for c in calls if c["status"] in ("in_doubt", "incomplete")
    }
    assert unfinished <= killed

    for command in ("audit", "idempotency", "deprecations", "export"):
        done = replay_cli(command, "--json", env=dict(env))
        assert done.returncode in (0, 1), (command, done.stderr)  # 1: gates, not input errors
        assert "Traceback" not in done.stderr


@pytest.mark.slow
async def test_eight_embedded_bridges_with_the_default_configuration(tmp_path: Path) -> None:
    env = home_env(tmp_path)
    _, killed = await run_sessions(env, "--embedded", seed=15)
    await trio.to_thread.run_sync(check_replay_sees_every_session, tmp_path, env, killed)
    # One runtime database for all of them, owner-only, beside the pool.
    runtime_db = tmp_path / "data" / "agentteam-bridge" / "runtime.db"
    assert runtime_db.stat().st_mode & 0o777 == 0o600

    # A later session reuses a free file: the pool stays at the peak concurrency.
    async with default_bridge(env, "--embedded", name="later") as raw:
        await raw.initialize()
        answer = await raw.call("task_list", {"channel": "general", "limit": 1})
        assert answer["result"]["isError"] is False
    pool = tmp_path / "data" / "agentteam-bridge" / "journals"
    assert len(list(pool.glob("journal-*.db"))) == BRIDGES


@pytest.mark.slow
async def test_eight_bridges_against_one_shared_runtime(tmp_path: Path) -> None:
    config = RuntimeConfig(db_path=str(tmp_path / "shared-runtime.db"))
    async with open_runtime(config) as runtime:
        env = home_env(tmp_path, runtime.bridge_env())
        _, killed = await run_sessions(env, seed=16)
    await trio.to_thread.run_sync(check_replay_sees_every_session, tmp_path, env, killed)


async def test_a_named_journal_file_held_by_another_session_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    env = home_env(tmp_path)
    journal = tmp_path / "mine.db"
    async with default_bridge(env, "--embedded", "--journal", str(journal), name="first") as raw:
        await raw.initialize()
        with trio.fail_after(60):
            second = await trio.run_process(
                [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", "--embedded"],
                env={**env, "AGENTTEAM_JOURNAL": str(journal)},
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    stderr = second.stderr.decode()
    assert second.returncode == 2, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert f"the journal {journal} is in use by another agentteam-bridge session" in stderr
    assert "--journal a directory" in stderr
    assert second.stdout == b""


def test_replay_with_no_journal_at_the_default_location_says_where_it_looked(
    tmp_path: Path,
) -> None:
    done = replay_cli("verify", env=home_env(tmp_path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "no journal at the default location" in done.stderr
    assert str(tmp_path / "data" / "agentteam-bridge" / "journals") in done.stderr


def test_a_directory_reads_its_journals_and_skips_databases_that_hold_none(
    tmp_path: Path,
) -> None:
    for name in ("journal-1.db", "journal-10.db", "journal-2.db"):
        with journal.open_sync_writer(tmp_path / name, key=b"k" * 32) as writer:
            writer.append(
                Event(
                    session_id=name,
                    payload=SessionStarted(bridge_version="t", compat_policy="hint"),
                )
            )
    (tmp_path / "runtime.db").write_bytes(b"")  # an empty file: a pool file not yet initialised
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()

    assert [p.name for p in journal_files([tmp_path])] == [
        "journal-1.db",
        "journal-2.db",
        "journal-10.db",
    ]
    (tmp_path / "broken.db").write_text("not a database")
    done = replay_cli("verify", tmp_path)
    assert done.returncode == 2 and "broken.db is not a journal" in done.stderr


@pytest.mark.slow  # SQLite's busy timeout (5 s) passes before a locked file is skipped
async def test_a_pool_skips_files_held_by_a_live_writer_or_locked_by_another_program(
    tmp_path: Path,
) -> None:
    from agentteam_task_bridge.bridge._journaling import open_journal

    pool = tmp_path / "pool"
    key = tmp_path / "config" / "journal.key"
    held = journal.open_sync_writer(pool / "journal-1.db", key=b"k" * 32)
    journal.open_sync_writer(pool / "journal-2.db", key=b"k" * 32).close()
    other = sqlite3.connect(pool / "journal-2.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another program holds SQLite's write lock
    try:
        async with open_journal(f"{pool}/", key_path=key) as first:
            assert first.path.name == "journal-3.db"  # 1 held, 2 locked (after SQLite's wait)
            other.execute("ROLLBACK")
            async with open_journal(pool, key_path=key) as second:
                assert second.path.name == "journal-2.db"  # the lowest free file is reused
    finally:
        other.close()
        held.close()
    assert key.stat().st_mode & 0o777 == 0o600


async def test_a_later_session_leaves_the_processs_garbage_collectable(
    runtime: Any, tmp_path: Path
) -> None:
    """`serve` freezes start-up's objects out of the collector at its handshake, once per
    process: one that serves sessions one after another (the in-memory harness, an embedding)
    still collects the cycles it made between them."""
    import gc
    import weakref

    from tests.bridge_inprocess import inprocess_session

    class Cycle:
        me: Any

    async with inprocess_session(runtime, tmp_path / "first.db") as first:
        await first.call("task_list", {"channel": "general"})
    gc.disable()  # the cycle must still exist at the next handshake
    try:
        cycle = Cycle()
        cycle.me = cycle
        alive = weakref.ref(cycle)
        del cycle
        async with inprocess_session(runtime, tmp_path / "second.db") as second:
            await second.call("task_list", {"channel": "general"})
            frozen = gc.get_freeze_count()
    finally:
        gc.enable()
    gc.collect()
    assert frozen > 0  # the handshake did freeze (in this process, once)
    assert alive() is None
