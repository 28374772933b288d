"""``ship --follow`` as a service: it starts before the pool has a journal, waits out a store
that is down (one stderr line when the outage starts, one when it ends), and stops on SIGTERM."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from agentteam_task_bridge import journal, replay

from .fleet_helpers import append_calls, write_fleet_journal
from .pg_cluster import ENV_URL, Cluster, ClusterUnavailable, start_cluster

SHIP: list[str] = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "ship"]


class Follower:
    """``ship DIR --to URL --follow`` as a subprocess, its stderr lines collected as they come."""

    def __init__(self, pool: Path, url: str) -> None:
        self.proc = subprocess.Popen(
            [*SHIP, str(pool), "--to", url, "--follow", "--interval", "0.2", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, what: Callable[[], bool], why: str) -> None:
        deadline = time.monotonic() + 90  # bounds a hang only
        while not what():
            assert self.proc.poll() is None, f"{why}: exit {self.proc.returncode}: {self.lines}"
            assert time.monotonic() < deadline, f"{why}: {''.join(self.lines)}"
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=60)
        self._reader.join(timeout=10)
        return self.proc.returncode


def head(path: Path) -> int:
    with journal.open_reader(path) as reader:
        return reader.head()[0]


def has_store(url: str) -> bool:
    """Whether a round ran: the first one creates the store's schema, journals or not."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('agentteam.store_meta') IS NOT NULL").fetchone()
    return bool(row and row[0])


def shipped_to(url: str, journal_id: str, path: Path) -> Callable[[], bool]:
    return lambda: replay.contiguous_seq(url, journal_id) >= head(path)


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A server of the test's own, which it may stop and start again."""
    if os.environ.get(ENV_URL):
        pytest.skip(f"{ENV_URL} names a server this test may not stop")
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL for the fleet tests: {exc}")
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def test_follow_starts_on_an_empty_pool_and_waits_for_its_first_journal(
    pg_url: str, tmp_path: Path
) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    follower = Follower(pool, pg_url)
    try:
        follower.wait_for(lambda: has_store(pg_url) or follower.proc.poll() is not None, "a round")
        time.sleep(0.5)  # more rounds over the empty pool
        assert follower.proc.poll() is None, "".join(follower.lines)
        path = pool / "journal-1.db"
        jid = write_fleet_journal(path, 1, 2)
        follower.wait_for(shipped_to(pg_url, jid, path), "the first journal shipped")
    finally:
        code = follower.stop()
    assert code == 0, "".join(follower.lines)
    assert follower.lines == [], "nothing to say on stderr"


def test_follow_waits_out_a_store_outage_and_stops_cleanly(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    url = own_cluster.create_database()
    pool = tmp_path / "pool"  # not there yet: the service starts before the first session
    follower = Follower(pool, url)
    try:
        follower.wait_for(lambda: has_store(url) or follower.proc.poll() is not None, "a round")
        time.sleep(0.5)
        assert follower.proc.poll() is None, "".join(follower.lines)
        pool.mkdir()
        path = pool / "journal-1.db"
        jid = write_fleet_journal(path, 2, 2)
        follower.wait_for(shipped_to(url, jid, path), "shipped before the outage")
        own_cluster.pause()
        append_calls(path, jid, 10, 3)
        follower.wait_for(lambda: len(follower.lines) >= 1, "the outage said")
        time.sleep(1.5)  # a few retries while it is down
        own_cluster.resume()
        follower.wait_for(shipped_to(url, jid, path), "shipped after the outage")
        follower.wait_for(lambda: len(follower.lines) >= 2, "the end of the outage said")
    finally:
        code = follower.stop()
    assert code == 0, "".join(follower.lines)
    down, back = follower.lines
    assert "the store is unreachable, retrying" in down and "back after" in back
    assert "Traceback" not in down


def test_a_one_shot_ship_shows_its_progress_on_a_terminal(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 3, 40)
    primary, replica = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    with subprocess.Popen(
        [*SHIP, str(path), "--to", pg_url, "--batch-size", "20"],
        stdout=subprocess.DEVNULL,
        stderr=replica,
        env=env,
    ) as proc:
        os.close(replica)
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0
    os.close(primary)
    assert b"shipping events" in seen


def test_a_stop_ends_the_service_whatever_the_round_then_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An interrupt raised inside the driver could leave the connection busy, so that its
    rollback failed as "another command is already in progress": an ``OperationalError``, taken
    for an outage, and the service went on shipping past SIGTERM. Once stopping, nothing a round
    raises is retried (a scripted ``ship``: the fault path alone)."""
    from agentteam_task_bridge.replay import _fleet_follow

    stop = threading.Event()
    rounds: list[int] = []

    def ship(*args: object, **kwargs: object) -> replay.ShipReport:
        rounds.append(1)
        stop.set()  # the signal came in the middle of the round
        raise psycopg.OperationalError("another command is already in progress")

    monkeypatch.setattr(_fleet_follow, "ship", ship)
    said: list[str] = []
    report = _fleet_follow.ship_follow(
        [],
        "postgresql://nobody@127.0.0.1:1/x",
        interval=0.01,
        rounds=5,
        on_outage=said.append,
        stop=stop,
    )
    assert rounds == [1] and said == [] and report.shipped == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_ship_stops_after_the_batch_in_flight(
    pg_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    path = pool / "journal-1.db"
    jid = write_fleet_journal(path, 4, 400)
    total = head(path)
    proc = subprocess.Popen(
        [*SHIP, str(pool), "--to", pg_url, "--follow", "--interval", "0.2", "--batch-size", "7"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90  # bounds a hang only
        while replay.contiguous_seq(pg_url, jid) < 7 * 3:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "unreachable" not in err, err
    held = replay.contiguous_seq(pg_url, jid)
    assert held % 7 == 0 and held < total, (held, total)  # stopped at a batch's end, early
    assert replay.ship([path], pg_url).ok and replay.contiguous_seq(pg_url, jid) == total
