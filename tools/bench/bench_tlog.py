"""Benchmark of the Merkle log: ``prove`` on a large journal, and the durable append before/after.

Run: ``python -m tools.bench.bench_tlog [--events N] [--quick] [--dir PATH] [--before DIR]``
(default 1,000,000 events; ``--quick`` 100,000). Printed, from one run:

* ``prove --seq`` and ``prove --consistency`` at random seqs and checkpoint pairs of a journal
  of N events written by the journal's own writer: CPU per proof (``time.process_time``, in the
  process, median and max) and the stored hashes read per proof beside ``2 * ceil(log2 N)``
  (O(log n) reads); and one ``agentteam-replay prove`` process's whole CPU (start-up included).
* With ``--before DIR`` (a checkout without the Merkle log, e.g. a git worktree of main): the
  p50 of a durable append through the sync writer, this checkout against that one, one child
  process each, their appends interleaved one by one (ABBA), as a ratio and the median of the
  blocks' ratios with its 95% interval (target: within 1.05x).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay import _prove

from .bench_latency import median_interval, round_ratios, spread

KEY = bytes(range(32))
ROOT = Path(__file__).resolve().parents[2]

# A child making durable appends with whatever agentteam_task_bridge its sys.path finds: after a
# warm-up (statements prepared, the WAL grown) it prints "ready", then makes one timed append per
# line read and prints its seconds, until its stdin closes.
_APPEND_CHILD = """
import sys, time, tempfile
from pathlib import Path
from agentteam_task_bridge import journal
with tempfile.TemporaryDirectory() as tmp:
    with journal.open_sync_writer(Path(tmp) / "j.db", key=bytes(range(32))) as writer:
        def event(i):
            return journal.Event(
                session_id="bench", call_id=f"c{i}", mcp_method_name="tools/call",
                gen_ai_tool_name="task_get", jsonrpc_request_id=i,
                payload=journal.CallReceived(arguments={"channel": "general", "number": i}),
            )
        for i in range(200):
            writer.append(event(i), durable=True)
        print("ready", flush=True)
        i = 200
        for _ in sys.stdin:
            start = time.perf_counter()
            writer.append(event(i), durable=True)
            print(f"{time.perf_counter() - start:.9f}", flush=True)
            i += 1
"""


def generate(path: Path, events: int) -> None:
    batch = 1_000
    with journal.open_sync_writer(path, key=KEY, synchronous_full=False) as writer:
        for start in range(0, events, batch):
            writer.append_many(
                [
                    journal.Event(
                        session_id=f"s{i // 2000}",
                        call_id=f"c{i}",
                        gen_ai_tool_name="task_get",
                        payload=journal.SessionEnded(reason="bench", calls=i),
                    )
                    for i in range(start, min(events, start + batch))
                ],
                durable=False,
            )


class _Counting:
    """Counts the stored-hash reads of every reader a prove opens."""

    def __init__(self) -> None:
        self.reads = 0
        self._original = journal.Reader.stored_hash

    def __enter__(self) -> _Counting:
        original, counter = self._original, self

        def counted(reader: journal.Reader, index: int) -> bytes | None:
            counter.reads += 1
            return original(reader, index)

        setattr(journal.Reader, "stored_hash", counted)  # noqa: B010 (a class attribute)
        return self

    def __exit__(self, *_: object) -> None:
        setattr(journal.Reader, "stored_hash", self._original)  # noqa: B010


def prove_rows(path: Path, events: int, samples: int, rng: random.Random) -> list[str]:
    with journal.open_reader(path) as reader:
        sizes = sorted(cp.seq for cp in reader.checkpoints() if cp.root_hash)
    bound = 2 * math.ceil(math.log2(events))
    rows: list[str] = []
    for what in ("seq", "consistency"):
        cpu: list[float] = []
        reads: list[int] = []
        for _ in range(samples):
            with _Counting() as counting:
                start = time.process_time()
                if what == "seq":
                    _prove.prove_seq(path, rng.randint(1, sizes[-1]))
                else:
                    old, new = sorted(rng.sample(sizes, 2))
                    _prove.prove_consistency(path, old, new)
                cpu.append(time.process_time() - start)
            reads.append(counting.reads)
        median = statistics.median(cpu) * 1e3
        rows.append(
            f"prove --{what:<11} {events:>10,} events: CPU median {median:.2f}"
            f" ms, max {max(cpu) * 1e3:.2f} ms (target < 50 ms); stored hashes read median "
            f"{statistics.median(reads):.0f}, max {max(reads)} (2*ceil(log2 n) = {bound}: O(log n))"
        )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "agentteam_task_bridge.replay._cli",
            "prove",
            str(path),
            "--seq",
            str(sizes[-1] // 2),
            "--json",
        ],
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rows.append(
        f"agentteam-replay prove --seq, whole process (imports included): {spent * 1e3:.0f} ms CPU"
    )
    return rows


def append_rows(before: Path, rounds: int, blocks: int) -> list[str]:
    """The durable append p50 of this checkout against ``before``: one child process each,
    their appends interleaved one by one, the order of each pair swapped every pair and every
    block (ABBA, so drift in the machine's load falls on both alike); ``blocks`` blocks of
    ``rounds`` appends each, a p50 ratio per block, summarised as their median with a
    distribution-free 95% interval (as the latency A/B does)."""
    checkouts = {"after": ROOT, "before": before.resolve()}
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", _APPEND_CHILD],
            env={**os.environ, "PYTHONPATH": str(path)},
            cwd=path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, path in checkouts.items()
    }
    samples: dict[str, list[list[float]]] = {name: [] for name in checkouts}
    try:
        for child in children.values():
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for block in range(blocks):
            out: dict[str, list[float]] = {name: [] for name in checkouts}
            for j in range(rounds):
                for name in ("after", "before") if (j + block) % 2 == 0 else ("before", "after"):
                    stdin, stdout = children[name].stdin, children[name].stdout
                    assert stdin is not None and stdout is not None
                    stdin.write("\n")
                    stdin.flush()
                    out[name].append(float(stdout.readline()))
            for name in checkouts:
                samples[name].append(out[name])
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=60)
    ratios = round_ratios(samples["after"], samples["before"])
    middle, _, _ = spread(ratios)
    low, high = median_interval(ratios)
    p50 = {name: statistics.median(x for chunk in v for x in chunk) for name, v in samples.items()}
    return [
        f"durable append p50 (sync writer, {rounds * blocks} appends each, interleaved one by"
        f" one, order swapped every pair): before {p50['before'] * 1e3:.3f} ms, after"
        f" {p50['after'] * 1e3:.3f} ms, ratio {p50['after'] / p50['before']:.3f}x; median of"
        f" {blocks} block ratios {middle:.3f}x (95% interval {low:.3f}-{high:.3f}x; target"
        " <= 1.05x)"
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.bench_tlog")
    parser.add_argument("--events", type=int, default=1_000_000, help="default 1,000,000")
    parser.add_argument("--quick", action="store_true", help="100,000 events")
    parser.add_argument("--samples", type=int, default=50, help="proofs of each kind")
    parser.add_argument("--dir", type=Path, default=None, help="directory for the temp files")
    parser.add_argument("--before", type=Path, default=None, help="a checkout to compare appends")
    parser.add_argument("--rounds", type=int, default=100, help="durable appends per block")
    parser.add_argument("--blocks", type=int, default=24, help="blocks (one ratio each)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    events = 100_000 if args.quick else args.events
    rows: list[str] = []
    if args.before is not None:
        rows += append_rows(args.before, args.rounds, args.blocks)
    with tempfile.TemporaryDirectory(prefix="bench-tlog-", dir=args.dir) as tmp:
        path = Path(tmp) / "journal.db"
        started = time.perf_counter()
        generate(path, events)
        rows.append(f"generated {events:,} events in {time.perf_counter() - started:.0f} s")
        rows += prove_rows(path, events, args.samples, random.Random(0))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
