"""A journal writer to be killed: concurrent tasks append until SIGKILL, printing durable seqs.

Usage: python crash_writer.py JOURNAL SEED. Prints ``ready`` once the writer is open, then one
``<seq> <task> <k>`` line per durable append that returned (a promise: it is on disk).
"""

from __future__ import annotations

import random
import sys

import trio

import journal

KEY = bytes(range(32))
TASKS = 8


async def main(path: str, seed: int) -> None:
    rng = random.Random(seed)
    pad = "x" * rng.randrange(10, 2000)
    async with journal.open_writer(path, key=KEY, checkpoint_every=rng.randrange(5, 50)) as w:
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
    trio.run(main, sys.argv[1], int(sys.argv[2]))
