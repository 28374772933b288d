"""A journal writer rolling over segments, to be killed: prints each durable append's seq.

Usage: python segment_crash_writer.py JOURNAL SEED [CRASH_AT]. Prints ``ready`` once open, then
``<seq> <task> <k>`` per durable append that returned (a promise: it is on disk). CRASH_AT makes
the process SIGKILL itself at the third roll-over: ``before_publish`` when the new segment is
complete under its temporary name (the old one has its closing checkpoint), ``after_publish``
once it is renamed into place, before the old one is sealed. Without it the test kills it.
"""

from __future__ import annotations

import os
import signal
import sys

import trio

import journal

KEY = bytes(range(32))
TASKS = 8
SEGMENT_BYTES = 256 * 1024
# 4-byte and 3-byte UTF-8 text: sizes are bytes.
PAD = "𝄞漢" * 300


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


async def main(path: str, seed: int) -> None:
    async with journal.open_writer(path, key=KEY, segment_bytes=SEGMENT_BYTES) as w:
        print("ready", flush=True)

        async def task(i: int) -> None:
            k = 0
            while True:
                durable = k % 3 != 1
                event = journal.Event(
                    session_id=f"s{seed}",
                    call_id=f"c{i}-{k}",
                    gen_ai_tool_name="task_create",
                    payload=journal.CallReceived(arguments={"task": i, "k": k, "pad": PAD}),
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
    if len(sys.argv) > 3:
        crash_at_third_rollover(sys.argv[3])
    trio.run(main, sys.argv[1], int(sys.argv[2]))
