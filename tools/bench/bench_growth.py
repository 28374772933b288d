"""Growth: what a bigger journal costs the bridge and what bigger journals cost replay.

Two halves, one section each:

- the bridge on an empty journal beside one of a million events (``--quick``: 100,000), written
  with the journal's own writer and the bridge's key: the p50 of a durable append through the
  journal's async writer (what every call pays, twice or more), measured in alternating blocks on
  both files, and spawn to the first ``tools/list`` answer of a bridge serving each file.
  Issue 19's target: both within 1.1x.
- every ``agentteam-replay`` command that reads a whole journal (``verify``, ``calls``, ``show``,
  ``idempotency``, ``deprecations``, ``audit``, ``export``) run as a process on journals of N and
  4N events, each also with no path over the default multi-journal pool (four journals of N/4,
  then of N): the CPU seconds per event and the peak resident set of each run,
  read by the command's own process (``measured_run``). Linear in events with flat memory:
  per-event CPU at 4N within 1.25x of that at N, peak RSS at 4N within 1.25x of that at N.
  (``rerun`` re-drives calls through a bridge against a runtime: its cost is those calls', and
  it is not measured here.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import trio

from agentteam_task_bridge import journal

from . import bench_replay, procs
from ._report import Row, ms
from .bench_coldstart import spawn_once

SECTION = "growth: empty journal vs 1M events"
REPLAY_SECTION = "growth: replay commands, N vs 4N events (CPU per event, peak RSS)"
TARGET_RATIO = 1.1
Key = journal.SigningKey | bytes  # what the journal's writers sign checkpoints with
LINEAR_RATIO = 1.25
POOL_FILES = 4
# The bridge's own file names (bridge/_paths.py, bridge/_journaling.py; not public names): a pool
# journal, and the signed checkpoint exported beside each journal.
POOL_FILE = "journal-{number}.db"
WARM_APPENDS = 400
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("verify",),
    ("calls",),
    ("show",),  # + a call id
    ("idempotency",),
    ("deprecations",),
    ("audit",),
    ("export", "--format", "jsonl"),
)


def _event(i: int) -> journal.Event:
    return journal.Event(
        session_id="growth",
        call_id=f"growth.{i}",
        mcp_method_name="tools/call",
        gen_ai_tool_name="task_get",
        jsonrpc_request_id=i,
        payload=journal.CallReceived(
            arguments={"channel": "general", "number": i}, jsonrpc_request_id=i
        ),
    )


async def append_latency(
    paths: dict[str, Path], key: Key, *, rounds: int, block: int
) -> dict[str, list[float]]:
    """Durable append latencies (seconds) on each journal, in alternating blocks."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    async with AsyncExitStack() as stack:
        writers = {
            name: await stack.enter_async_context(
                journal.open_writer(path, key=key, checkpoint_path=checkpoint_path(path))
            )
            for name, path in paths.items()
        }
        counter = 0
        # Warm: statements prepared, pages cached, and the WAL grown to its working size (on a
        # new file the first ~150 durable appends also extend the WAL, at 2-5x the cost).
        for writer in writers.values():
            for _ in range(WARM_APPENDS):
                counter += 1
                await writer.append(_event(counter), durable=True)
        for r in range(rounds):
            names = list(writers)
            for name in names[r % 2 :] + names[: r % 2]:
                for _ in range(block):
                    counter += 1
                    start = time.perf_counter()
                    await writers[name].append(_event(counter), durable=True)
                    samples[name].append(time.perf_counter() - start)
    return samples


def _run_measured(args: list[str], env: dict[str, str], report: Path) -> tuple[float, int, int]:
    """(CPU seconds, peak RSS KiB, exit status) of one replay command, its output discarded."""
    command = [sys.executable, "-m", "tools.bench.measured_run", str(report), *args]
    with open(os.devnull, "wb") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.PIPE, env=env, check=False)
    if done.returncode not in (0, 1, 3):  # 1: findings, 3: in-doubt calls; 2 or a crash: not ok
        raise RuntimeError(f"replay {args[0]} exited {done.returncode}: {done.stderr[-400:]!r}")
    measured = json.loads(report.read_text())
    return float(measured["cpu_s"]), int(measured["max_rss_kib"]), done.returncode


def checkpoint_path(journal_path: Path) -> Path:
    return journal_path.with_name(journal_path.name + ".checkpoint.json")


def _generate(path: Path, events: int, key: Key, first_session: int = 0) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return bench_replay.generate(
        path, events, key=key, checkpoint_path=checkpoint_path(path), first_session=first_session
    )


async def run(runtime: procs.RuntimeProcess, workdir: Path, *, quick: bool) -> list[Row]:
    big_events = 100_000 if quick else 1_000_000
    small = 25_000 if quick else 100_000
    home = workdir / "growth"
    env = runtime.bridge_env(XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    key_path = home / "config" / "agentteam-bridge" / journal.default_key_path().name
    key = await trio.to_thread.run_sync(lambda: journal.load_key(key_path, announce=False))
    files = {"empty": home / "empty.db", "1M": home / "big.db"}
    print(f"  growth: writing a journal of {big_events:,} events", file=sys.stderr, flush=True)
    events = await trio.to_thread.run_sync(_generate, files["1M"], big_events, key)
    label = f"{events:,} events"
    rows = await _bridge_rows(files, env, key, label, quick=quick)
    rows += await _replay_rows(home, key, small, env)
    return rows


async def _bridge_rows(
    files: dict[str, Path], env: dict[str, str], key: Key, label: str, *, quick: bool
) -> list[Row]:
    rounds, block = (6, 25) if quick else (20, 50)
    latencies = await append_latency(files, key, rounds=rounds, block=block)
    spawns = 4 if quick else 10
    started: dict[str, list[float]] = {name: [] for name in files}
    for _ in range(spawns):
        for name, path in files.items():
            _, listed, _ = await spawn_once(procs.bridge_command(path), env)
            started[name].append(listed)
    rows = []
    for what, samples in (("durable append (journal writer)", latencies), ("start-up", started)):
        empty = ms(samples["empty"], 0.5)
        rows.append(
            Row(SECTION, f"{what}: empty journal", empty, ms(samples["empty"], 0.99)),
        )
        big = ms(samples["1M"], 0.5)
        ratio = big / empty
        key_name = "append" if what.startswith("durable") else "startup"
        rows.append(
            Row(
                SECTION,
                f"{what}: {label}",
                big,
                ms(samples["1M"], 0.99),
                compare=f"{ratio:.2f}x empty",
                target=f"<= {TARGET_RATIO}x empty",
                ok=ratio <= TARGET_RATIO,
                metrics={f"growth_{key_name}": ratio},
            )
        )
    return rows


async def _replay_rows(home: Path, key: Key, small: int, env: dict[str, str]) -> list[Row]:
    sizes = {"N": small, "4N": 4 * small}
    singles: dict[str, Path] = {}
    pools: dict[str, Path] = {}
    counts: dict[str, int] = {}
    for name, events in sizes.items():
        singles[name] = home / f"replay-{name}" / "journal.db"
        counts[name] = await trio.to_thread.run_sync(_generate, singles[name], events, key)
        pools[name] = home / f"pool-{name}"
        pool = pools[name] / "agentteam-bridge" / "journals"
        for number in range(1, POOL_FILES + 1):
            path = pool / POOL_FILE.format(number=number)
            counts[f"pool {name}"] = counts.get(f"pool {name}", 0) + await trio.to_thread.run_sync(
                _generate, path, events // POOL_FILES, key, (number - 1) * 1_000
            )
    cases: list[tuple[str, dict[str, list[str]], dict[str, dict[str, str]]]] = []
    pool_env = {name: {**env, "XDG_DATA_HOME": str(pools[name])} for name in sizes}
    for args in COMMANDS:
        extra = ["s00000000.5"] if args == ("show",) else []
        files = {name: [*args, str(path), *extra] for name, path in singles.items()}
        cases.append((" ".join(args), files, {name: env for name in sizes}))
        pooled = {name: [*args, *extra] for name in sizes}
        cases.append((f"{' '.join(args)} (no path: the pool of {POOL_FILES})", pooled, pool_env))
    rows = []
    for title, commands, envs in cases:
        measured = {}
        for name in sizes:
            events = counts[f"pool {name}"] if "pool" in title else counts[name]
            cpu, rss, _ = await trio.to_thread.run_sync(
                _run_measured, commands[name], envs[name], home / "measured.json"
            )
            measured[name] = (cpu / events, rss)
        per_event = measured["4N"][0] / measured["N"][0]
        memory = measured["4N"][1] / measured["N"][1]
        ok = per_event <= LINEAR_RATIO and memory <= LINEAR_RATIO
        rows.append(
            Row(
                REPLAY_SECTION,
                f"replay {title}",
                rate=1 / measured["4N"][0],
                compare=f"CPU/event {measured['N'][0] * 1e6:.1f} -> {measured['4N'][0] * 1e6:.1f}"
                f" us ({per_event:.2f}x); peak RSS {measured['N'][1] / 1024:.0f} ->"
                f" {measured['4N'][1] / 1024:.0f} MiB ({memory:.2f}x)",
                target=f"both <= {LINEAR_RATIO}x",
                ok=ok,
                metrics={f"replay {title}": max(per_event, memory)},
            )
        )
    return rows
