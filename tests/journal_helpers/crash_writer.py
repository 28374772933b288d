"""A journal writer to be killed: concurrent tasks append until SIGKILL, printing durable seqs.

Usage: python crash_writer.py JOURNAL SEED [--segments [--crash-at WHEN]]. Prints ``ready`` once
the writer is open, then one ``<seq> <task> <k>`` line per durable append that returned (a
promise: it is on disk). Without ``--segments`` the seed also picks the padding and how often
checkpoints are signed. ``--segments`` rolls the journal over every 256 KiB (the padding is 4-
and 3-byte UTF-8 text: sizes are bytes); ``--crash-at`` makes the process SIGKILL itself at the
third roll-over: ``before_publish`` when the new segment is complete under its temporary name
(the old one has its closing checkpoint), ``after_publish`` once it is renamed into place,
before the old one is sealed. Otherwise the test kills it.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
from typing import Any

import trio

from agentteam_task_bridge import journal

KEY = bytes(range(32))
TASKS = 8
SEGMENT_BYTES = 256 * 1024
SEGMENT_PAD = "𝄞漢" * 300


def crash_at_third_rollover(when: str) -> None:
    real_rename = os.rename
    rollovers = 0

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        nonlocal rollovers
        segment = os.fspath(src).endswith(".tmp")
        rollovers += segment
        if segment and rollovers == 3 and when == "before_publish":
            os.kill(os.getpid(), signal.SIGKILL)
        real_rename(src, dst)
        if segment and rollovers == 3 and when == "after_publish":
            os.kill(os.getpid(), signal.SIGKILL)

    os.rename = rename  # type: ignore[assignment]


async def main(path: str, seed: int, segments: bool) -> None:
    rng = random.Random(seed)
    options: dict[str, Any]
    if segments:
        pad, options = SEGMENT_PAD, {"segment_bytes": SEGMENT_BYTES}
    else:
        pad = "x" * rng.randrange(10, 2000)
        options = {"checkpoint_every": rng.randrange(5, 50)}
    async with journal.open_writer(path, key=KEY, **options) as w:
        print("ready", flush=True)

        async def task(i: int) -> None:
            k = 0
            while True:
                durable = k % 3 != 1
                event = journal.Event(
                    session_id=f"s{seed}",
                    call_id=f"c{i}-{k}",
                    gen_ai_tool_name="task_create",
                    payload=journal.CallReceived(arguments={"task": i, "k": k, "pad": pad}),
                )
                seq = await w.append(event, durable=durable)
                if durable:
                    sys.stdout.write(f"{seq} {i} {k}\n")
                    sys.stdout.flush()
                k += 1

        async with trio.open_nursery() as nursery:
            for i in range(TASKS):
                nursery.start_soon(task, i)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("journal")
    parser.add_argument("seed", type=int)
    parser.add_argument("--segments", action="store_true")
    parser.add_argument("--crash-at", choices=("before_publish", "after_publish"))
    args = parser.parse_args()
    if args.crash_at:
        crash_at_third_rollover(args.crash_at)
    trio.run(main, args.journal, args.seed, args.segments)
