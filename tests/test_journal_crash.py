"""SIGKILL at any moment leaves a journal that opens, verifies, and keeps every durable promise."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentteam_task_bridge import journal

from .journal_helpers import KEY

SCRIPT = Path(__file__).parent / "journal_helpers" / "crash_writer.py"
ITERATIONS = 8


def run_and_kill(path: Path, seed: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """Start the writer, SIGKILL it at a random moment; return the durable appends it reported."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(path), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 0.4))  # maybe while creating or migrating the file
        else:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "ready\n", proc.stderr.read() if proc.stderr else line
            time.sleep(rng.uniform(0.0, 0.15))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL, err
    promised = []
    # The last piece has no newline when the kill cut a line short: only whole lines count.
    for line in out.split("\n")[:-1]:
        if line != "ready":
            seq, task, k = map(int, line.split())
            promised.append((seq, task, k))
    return promised


def test_sigkill_leaves_a_verifying_journal_that_keeps_durable_promises(tmp_path: Path) -> None:
    rng = random.Random(20250131)
    path = tmp_path / "crash.db"
    total_promised = 0
    for iteration in range(ITERATIONS):
        promised = run_and_kill(path, iteration, rng)
        total_promised += len(promised)
        # It opens (a writer completes any unfinished creation) and verifies.
        with journal.open_sync_writer(path, key=KEY) as writer:
            head_seq, _ = writer.head
        with journal.open_reader(path) as reader:
            report = journal.verify(reader, key=KEY)
            assert report.ok, (iteration, report.findings)
            assert report.head_seq == head_seq
            # Every durable append that returned is there, with its content.
            for seq, task, k in promised:
                assert seq <= head_seq
                [record] = reader.events(since_seq=seq - 1, until_seq=seq)
                assert isinstance(record.payload, journal.CallReceived)
                assert (record.payload.arguments["task"], record.payload.arguments["k"]) == (
                    task,
                    k,
                )
            # What survived is a clean prefix: each task's appends, in order, with no hole.
            seen: dict[tuple[str, int], list[int]] = {}
            for record in reader.events(kind="call_received"):
                assert isinstance(record.payload, journal.CallReceived)
                args = record.payload.arguments
                seen.setdefault((record.session_id, args["task"]), []).append(args["k"])
            for ks in seen.values():
                assert ks == list(range(len(ks)))
    assert total_promised > 0  # the kills did land while writing
