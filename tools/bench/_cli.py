"""Command line of ``python -m tools.bench``: run the sections, print one table."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from . import (
    bench_coldstart,
    bench_growth,
    bench_http,
    bench_latency,
    bench_memory,
    bench_throughput,
    peer_server,
    procs,
    targets,
)
from ._report import Row, render

SECTIONS = ("latency", "throughput", "http", "coldstart", "memory", "growth")
EXTERNAL = ("journal", "replay")  # tools.bench.bench_<name>, run in their own process


async def run_sections(
    names: list[str],
    *,
    quick: bool,
    memory_calls: int | None,
    workdir: Path,
    checkouts: dict[str, Path],
) -> list[Row]:
    """Each section against a fresh runtime process: the runtime slows as its tables grow, and
    no section should pay for the data another one wrote."""
    rows: list[Row] = []
    for name in names:
        started = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        home = workdir / name
        home.mkdir()
        async with procs.open_runtime_process(home) as runtime:
            if name == "latency":
                rows += await bench_latency.run(runtime, home, quick=quick, checkouts=checkouts)
            elif name == "throughput":
                rows += await bench_throughput.run(runtime, home, quick=quick, checkouts=checkouts)
            elif name == "http":
                rows += await bench_http.run(runtime, quick=quick)
            elif name == "coldstart":
                rows += await bench_coldstart.run(runtime, home, quick=quick, checkouts=checkouts)
            elif name == "memory":
                rows += await bench_memory.run(runtime, home, quick=quick, calls=memory_calls)
            elif name == "growth":
                rows += await bench_growth.run(runtime, home, quick=quick)
        print(f"  {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return rows


def run_external(name: str, *, quick: bool) -> str | None:
    """Run another owner's benchmark module if it exists; its output, or None when absent."""
    module = f"tools.bench.{name}"
    if importlib.util.find_spec(module) is None:
        return None
    command = [sys.executable, "-m", module]
    if quick:
        helped = subprocess.run(
            [*command, "--help"], capture_output=True, text=True, check=False, timeout=60
        )
        if "--quick" in helped.stdout:
            command.append("--quick")
    print(f"running {name} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    text = done.stdout.rstrip()
    if done.returncode != 0:
        text += f"\n({name} exited {done.returncode}: {done.stderr.strip()[-500:]})"
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description="Run the bridge's benchmarks; print one table."
    )
    parser.add_argument("--quick", action="store_true", help="short runs (about two minutes)")
    parser.add_argument(
        "--only",
        default=",".join((*SECTIONS, *EXTERNAL)),
        help="comma-separated sections (default: all): " + ", ".join((*SECTIONS, *EXTERNAL)),
    )
    parser.add_argument("--memory-calls", type=int, default=None, help="calls for the RSS run")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument(
        "--bridge-from",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also measure a bridge run from another checkout (e.g. a git worktree with a "
        "proposed change), beside this one in the latency, throughput and cold-start sections; "
        "repeatable",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(wanted) - {*SECTIONS, *EXTERNAL})
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    checkouts: dict[str, Path] = {}
    for spec in args.bridge_from:
        label, sep, directory = spec.partition("=")
        if not sep or not (Path(directory) / "bridge").is_dir():
            parser.error(f"--bridge-from {spec!r}: expected LABEL=DIR of a checkout")
        checkouts[label] = Path(directory).resolve()
    started = time.perf_counter()
    busy, ours = procs.machine_busy_seconds(), procs.own_tree_seconds()
    with tempfile.TemporaryDirectory(prefix="agentteam-bench-") as tmp:
        rows = trio.run(
            lambda: run_sections(
                [n for n in SECTIONS if n in wanted],
                quick=args.quick,
                memory_calls=args.memory_calls,
                workdir=Path(tmp),
                checkouts=checkouts,
            )
        )
    external = {
        name: run_external(f"bench_{name}", quick=args.quick) for name in EXTERNAL if name in wanted
    }
    elapsed = time.perf_counter() - started
    foreign = (procs.machine_busy_seconds() - busy) - (procs.own_tree_seconds() - ours)
    print(
        f"agentteam-task-bridge benchmarks ({'quick' if args.quick else 'full'}; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{elapsed:.0f} s; other processes used {max(0.0, foreign):.0f} CPU-s, "
        f"{max(0.0, foreign) / (elapsed * (os.cpu_count() or 1)):.0%} of the machine)"
    )
    if peer_server.available():
        print(f"peer: FastMCP {peer_server.fastmcp_version()} (peer_server.py)")
    else:
        print(f"peer: {peer_server.EXTRA_MISSING}")
    rows += targets.evaluate(rows)
    print(render(rows))
    if args.quick:
        print("(issue 19's targets are judged on a full run: --quick figures are indicative)")
    for name, text in external.items():
        print(f"\n[{name}: tools/bench/bench_{name}.py]")
        print(text if text is not None else "(not present)")
    if args.json is not None:
        args.json.write_text(json.dumps([row.as_json() for row in rows], indent=2))
    return 0
