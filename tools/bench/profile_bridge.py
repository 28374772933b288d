"""Where a bridge call's CPU goes: py-spy sampling the bridge subprocess under a steady load.

``python -m tools.bench.profile_bridge [--tool task_get] [--calls 3000] [--in-flight 1]
[--no-durable] [--top 25] [--raw PATH]`` launches the reference runtime and the bridge, attaches
``py-spy record`` (``pip install py-spy``; sampling, so the bridge runs at full speed) to the
bridge's pid, drives the calls through the SDK client, and prints the bridge's CPU per call, the
share of samples per layer (inclusive: a sample counts for every layer on its stack) and the
functions with the most self time.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import trio

from . import procs

# (layer, substring of a frame's file) in match order; a frame's first match names its layer.
LAYERS: tuple[tuple[str, str], ...] = (
    ("bridge: call flow", "bridge/_call"),  # _call.py and its stages, _call_*.py
    ("bridge: validation", "bridge/_validate.py"),
    ("bridge: budgets", "bridge/_budget.py"),
    ("bridge: rendering", "bridge/_render.py"),
    ("bridge: upstream adapter", "bridge/_upstream.py"),
    ("bridge: HTTP/1.1 pool", "bridge/_http11.py"),
    ("bridge: stdio", "bridge/_stdio.py"),
    ("journal", "journal/"),
    ("mcp SDK", "/mcp/"),
    ("pydantic", "pydantic"),
    ("httpx + httpcore", "http"),
    ("h11", "/h11/"),
    ("anyio", "/anyio/"),
    ("trio", "/trio/"),
    ("sqlite3", "sqlite3"),
)


@dataclass(frozen=True)
class Profile:
    samples: int
    layers: list[tuple[str, float]]  # (layer, share of samples)
    self_time: list[tuple[str, float]]  # (function (file:line), share of samples)
    cpu_ms_per_call: float
    calls: int
    # (thread name, user ms per call, system ms per call), from /proc/<pid>/task/*/stat
    threads: list[tuple[str, float, float]]


def _layer(frame: str) -> str | None:
    for name, needle in LAYERS:
        if needle in frame:
            return name
    return None


def parse_collapsed(lines: Iterable[str]) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, inclusive samples per layer, self samples per frame) of py-spy raw output."""
    total = 0
    layers: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in lines:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaves[frames[-1]] += count
        for name in {layer for frame in frames if (layer := _layer(frame)) is not None}:
            layers[name] += count
    return total, layers, leaves


async def profile(
    tool: str, calls: int, in_flight: int, durable: bool, raw_path: Path | None
) -> Profile:
    spy = shutil.which("py-spy") or str(Path(trio.__file__).parents[4] / "bin" / "py-spy")
    with tempfile.TemporaryDirectory(prefix="bridge-profile-") as tmp:
        directory = Path(tmp)
        out = raw_path or directory / "profile.txt"
        async with procs.open_runtime_process(directory) as runtime:
            env = runtime.bridge_env(
                XDG_CONFIG_HOME=str(directory / "config"), XDG_DATA_HOME=str(directory / "data")
            )
            extra = () if durable else ("--no-durable",)
            command = procs.bridge_command(directory / "journal.db", *extra)
            async with procs.open_mcp(command, env) as bridge:
                created = await bridge.call(
                    "task_create", {"channel": "general", "tasks": [{"title": "profiled"}]}
                )
                assert not created.is_error, created.structured_content
                for i in range(200):  # warm up caches and the HTTP pool before sampling
                    await bridge.call(*_arguments(tool, i))
                sampling = [
                    "--rate",
                    "1000",
                    "--gil",
                    "--threads",
                    "--format",
                    "raw",
                    "--nonblocking",
                ]
                recorder = await trio.lowlevel.open_process(
                    [spy, "record", "--pid", str(bridge.pid), *sampling, "--output", str(out)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await trio.sleep(0.5)  # py-spy attaches
                cpu_before = procs.cpu_seconds(bridge.pid)
                threads_before = procs.thread_cpu_seconds(bridge.pid)
                counter = iter(range(calls))

                async def worker() -> None:
                    for i in counter:
                        result = await bridge.call(*_arguments(tool, i))
                        assert not result.is_error, result.structured_content

                async with trio.open_nursery() as nursery:
                    for _ in range(in_flight):
                        nursery.start_soon(worker)
                cpu = procs.cpu_seconds(bridge.pid) - cpu_before
                threads_after = procs.thread_cpu_seconds(bridge.pid)
                recorder.send_signal(signal.SIGINT)
                with trio.fail_after(30):
                    await recorder.wait()
        text = out.read_text().splitlines() if out.exists() else []
    total, layers, leaves = parse_collapsed(text)
    share = (lambda n: n / total) if total else (lambda n: 0.0)
    return Profile(
        samples=total,
        layers=[(name, share(n)) for name, n in layers.most_common()],
        self_time=[(frame, share(n)) for frame, n in leaves.most_common()],
        cpu_ms_per_call=cpu * 1000 / calls,
        calls=calls,
        threads=_per_call(threads_before, threads_after, calls),
    )


def _per_call(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], calls: int
) -> list[tuple[str, float, float]]:
    """Each thread's (user, system) ms per call between two readings, busiest first."""
    rows = []
    for name, (user, system) in after.items():
        user0, system0 = before.get(name, (0.0, 0.0))
        rows.append((name, (user - user0) * 1000 / calls, (system - system0) * 1000 / calls))
    return sorted(rows, key=lambda row: -(row[1] + row[2]))


def _arguments(tool: str, i: int) -> tuple[str, dict[str, object]]:
    if tool == "task_create":
        return tool, {"channel": "general", "tasks": [{"title": f"profiled {i}"}]}
    if tool == "task_list":
        return tool, {"channel": "general"}
    return "task_get", {"channel": "general", "number": 1}


def render(result: Profile, top: int) -> str:
    lines = [
        f"bridge CPU per call: {result.cpu_ms_per_call:.3f} ms over {result.calls} calls "
        f"({result.samples} samples)",
        "",
        "CPU per call by thread (user / system ms):",
    ]
    lines += [f"  {user:6.3f} / {system:6.3f}  {name}" for name, user, system in result.threads]
    lines += ["", "inclusive share of samples per layer:"]
    lines += [f"  {share:6.1%}  {name}" for name, share in result.layers]
    lines += ["", f"top {top} functions by self time:"]
    lines += [f"  {share:6.1%}  {frame}" for frame, share in result.self_time[:top]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.profile_bridge",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--tool", choices=("task_get", "task_create", "task_list"))
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--no-durable", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--raw", type=Path, default=None, help="keep py-spy's collapsed stacks")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    result = trio.run(
        profile, args.tool or "task_get", args.calls, args.in_flight, not args.no_durable, args.raw
    )
    print(render(result, args.top))


if __name__ == "__main__":
    main()
