"""The CI guard on the bridge's own cost: instructions per call, counted by valgrind's callgrind.

``python -m tools.bench.instructions [--check] [--self-test] [--update --reason TEXT] [--floor]
[--keep DIR]``

The bridge runs under ``valgrind --tool=callgrind --instr-atstart=no`` (start-up is not counted),
launched through the SDK's stdio client like any server; the reference runtime runs outside
valgrind, in its own process. After a warm-up (connections open, caches and the journal's
statements hot) instrumentation is switched on with ``callgrind_control -i on`` for one fixed
sequence of calls per phase, switched off, and the phase's counters are dumped and read back. A
phase's instructions divided by its calls is the bridge process's own cost per call: its Python,
the SDK, SQLite, the HTTP client; not the kernel (fsync, sockets), not the client, not the
runtime. Instruction counts do not depend on the machine's load, so the check cannot flake the way
a timing can; ``PYTHONHASHSEED`` is fixed and the calls are sent one at a time.

``--check`` compares each phase with the committed baseline (``instructions-baseline.json``
beside this file) and exits 1 when any grows more than 15%; a drop only prints a note (refresh
the baseline to lock the gain in). ``--update --reason TEXT`` rewrites the baseline from this run
with the reason, to be committed with the change that moved it. ``--self-test`` proves the guard
bites: it runs the sequence a second time with a deliberately slowed call path (a
``sitecustomize`` on the bridge's ``PYTHONPATH`` wraps ``Bridge.answer`` and ``Bridge.call``;
nothing in
the bridge's code), compares it with the first run, and exits 1 unless it fails. ``--floor`` also
counts the floor server (the SDK's low-level server over the bridge's stdio) answering the
bridge's own answers, the same way, and prints the bridge's ratio to it (issue 19's CPU targets,
in instructions); ``--keep DIR`` keeps each phase's dump for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
import trio

from . import procs

BASELINE = Path(__file__).with_name("instructions-baseline.json")
TOLERANCE = 0.15
WARMUP = 8  # calls of each phase before counting
# The fixed sequence: (phase, tool, arguments kind, calls counted).
PHASES: tuple[tuple[str, int], ...] = (
    ("task_get", 20),
    ("task_create", 10),
    ("task_list", 10),
    ("task_get rejected", 10),
)
UPDATE_COMMAND = "python -m tools.bench.instructions --update --reason '...'"
SLOWDOWN_LOOPS = 3_000  # Python loop iterations added to every call by --self-test (~+30%)
_SITECUSTOMIZE = """\
# Written by tools.bench.instructions --self-test: a deliberately slowed call path.
import functools

from agentteam_task_bridge.bridge import _call as _call


def _slowed(original):
    @functools.wraps(original)
    async def slowed(self, *args, **kwargs):
        total = 0
        for i in range({loops}):
            total += i
        return await original(self, *args, **kwargs)

    return slowed


# The entries of a tools/call: the direct path's (Bridge.answer) and the SDK's (Bridge.call).
for _name in ("answer", "call"):
    if hasattr(_call.Bridge, _name):
        setattr(_call.Bridge, _name, _slowed(getattr(_call.Bridge, _name)))
"""
# Always on the measured bridge's PYTHONPATH: the journal's time-based checkpoint (every 30 s)
# would land in a phase or not depending on how fast valgrind ran; the count-based ones stay.
# Likewise the linger of non-durable rows (5 ms): a call takes longer than that under valgrind,
# so the rows went to the writer on their own in some calls and not in others (task_get moved
# by +-4% from run to run); at full speed they travel with the call's durable outcome.
_STEADY = """\
# Written by tools.bench.instructions: no time-based journal checkpoints while counting.
import functools

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import _async_writer

_async_writer.LINGER_S = 60.0

_open_writer = journal.open_writer


@functools.wraps(_open_writer)
def _steady(*args, **kwargs):
    kwargs.setdefault("checkpoint_interval", 1e9)
    return _open_writer(*args, **kwargs)


journal.open_writer = _steady
"""
_TOTALS = re.compile(r"^totals: (\d+)", re.MULTILINE)


def arguments(phase: str, i: int, number: int) -> tuple[str, dict[str, Any]]:
    """The tool and arguments of call `i` of `phase` (`number`: an existing task)."""
    if phase == "task_create":
        return phase, {"channel": "general", "tasks": [{"title": f"counted task {i}"}]}
    if phase == "task_list":
        return phase, {"channel": "general", "limit": 5}
    if phase == "task_get rejected":
        return "task_get", {"channel": "general", "number": -1}
    return "task_get", {"channel": "general", "number": number}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    lines: list[str]


def compare(measured: Mapping[str, float], baseline: Mapping[str, float]) -> Verdict:
    """Each phase's instructions per call against the baseline's: more than TOLERANCE above
    fails; a phase missing from either side fails (the sequence changed: update the baseline)."""
    lines, ok = [], True
    for phase in sorted({*measured, *baseline}, key=[p for p, _ in PHASES].index):
        have, want = measured.get(phase), baseline.get(phase)
        if have is None or want is None:
            ok = False
            lines.append(f"{phase}: not in {'this run' if have is None else 'the baseline'}")
            continue
        ratio = have / want
        grew = ratio > 1 + TOLERANCE
        ok = ok and not grew
        note = "FAIL" if grew else "ok"
        if ratio < 1 - TOLERANCE:
            note = "ok (well below the baseline: refresh it to lock the gain in)"
        lines.append(
            f"{phase}: {have:,.0f} instructions/call, baseline {want:,.0f}: {ratio:.3f}x"
            f" (limit {1 + TOLERANCE:.2f}x) {note}"
        )
    return Verdict(ok, lines)


def read_baseline(path: Path = BASELINE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write_baseline(measured: Mapping[str, float], reason: str, path: Path = BASELINE) -> None:
    data = {
        "reason": reason,
        "update_with": UPDATE_COMMAND,
        "tolerance": TOLERANCE,
        "python": platform.python_version(),
        "valgrind": _valgrind_version(),
        "per_call": {phase: round(value) for phase, value in measured.items()},
    }
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _valgrind_version() -> str:
    if shutil.which("valgrind") is None:
        return "(not found)"
    done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _callgrind_control(pid: int, *flags: str) -> None:
    subprocess.run(
        ["callgrind_control", *flags, str(pid)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def _dumped(directory: Path, seen: set[Path]) -> int:
    """The instructions of the dump callgrind wrote since the last call (one new file)."""
    new = sorted(p for p in directory.glob("callgrind.out.*") if p not in seen)
    if len(new) != 1:
        raise RuntimeError(f"expected one new callgrind dump, found {[p.name for p in new]}")
    seen.add(new[0])
    found = _TOTALS.search(new[0].read_text())
    if found is None:
        raise RuntimeError(f"no totals in {new[0]}")
    return int(found[1])


async def measure(slowdown_loops: int = 0, keep: Path | None = None) -> dict[str, float]:
    """Instructions per call of each phase of the fixed sequence, in the bridge's process;
    `keep`: a directory to copy the phases' callgrind dumps into (for `callgrind_annotate`)."""
    with tempfile.TemporaryDirectory(prefix="agentteam-instructions-") as tmp:
        work = Path(tmp)
        site = work / "site"
        site.mkdir()
        slowed = _SITECUSTOMIZE.format(loops=slowdown_loops) if slowdown_loops else ""
        (site / "sitecustomize.py").write_text(_STEADY + slowed)
        env_path = f"{site}{os.pathsep}{Path.cwd()}"
        (work / "runtime").mkdir()
        out = work / "callgrind"
        out.mkdir()
        async with procs.open_runtime_process(work / "runtime") as runtime:
            env = runtime.bridge_env(
                XDG_CONFIG_HOME=str(work / "config"),
                XDG_DATA_HOME=str(work / "data"),
                PYTHONHASHSEED="0",
                PYTHONPATH=env_path,
            )
            command = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out / 'callgrind.out'}",
                "--log-file=" + str(work / "valgrind.log"),
                *procs.bridge_command(work / "journal.db"),
            ]
            with trio.fail_after(900):
                async with procs.open_mcp(command, env) as bridge:
                    per_call = await _sequence(bridge, out)
            if keep is not None:
                _keep_dumps(out, keep)
            return per_call
    raise AssertionError("unreachable")  # pragma: no cover


def _keep_dumps(out: Path, keep: Path) -> None:
    """Copy each phase's dump to `keep` as callgrind.<n>.<phase> (in phase order)."""
    keep.mkdir(parents=True, exist_ok=True)
    dumps = sorted(out.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
    for (phase, _calls), dump in zip(PHASES, dumps, strict=False):
        shutil.copyfile(dump, keep / f"callgrind.{phase.replace(' ', '-')}")


async def _sequence(bridge: procs.McpProcess, out: Path) -> dict[str, float]:
    seed = await bridge.call("task_create", {"channel": "general", "tasks": [{"title": "read"}]})
    assert seed.structured_content is not None, seed
    number = int(seed.structured_content["data"]["tasks"][0]["number"])
    seen: set[Path] = set()
    per_call: dict[str, float] = {}
    for phase, calls in PHASES:
        for i in range(WARMUP):
            await bridge.call(*arguments(phase, -1 - i, number))
        await trio.to_thread.run_sync(_callgrind_control, bridge.pid, "--zero")
        await trio.to_thread.run_sync(_callgrind_control, bridge.pid, "--instr=on")
        for i in range(calls):
            result = await bridge.call(*arguments(phase, i, number))
            if result.is_error != (phase == "task_get rejected"):
                raise RuntimeError(f"{phase}: unexpected answer {result.structured_content}")
        await trio.to_thread.run_sync(_callgrind_control, bridge.pid, "--instr=off")
        await trio.to_thread.run_sync(_callgrind_control, bridge.pid, "--dump")
        per_call[phase] = _dumped(out, seen) / calls
    return per_call


FLOOR_PHASES: tuple[tuple[str, int], ...] = (("task_get", 20), ("task_create", 10))


async def measure_floor() -> dict[str, float]:
    """Instructions per call of the floor server (the SDK's low-level server over the bridge's
    stdio) answering a captured bridge answer of each tool, counted as the bridge's phases are:
    the yardstick of issue 19's CPU targets, in instructions."""
    with tempfile.TemporaryDirectory(prefix="agentteam-instructions-floor-") as tmp:
        work = Path(tmp)
        out = work / "callgrind"
        out.mkdir()
        canned: dict[str, tuple[Path, dict[str, Any]]] = {}
        async with procs.open_runtime_process(work) as runtime:
            env = runtime.bridge_env(
                XDG_CONFIG_HOME=str(work / "config"), XDG_DATA_HOME=str(work / "data")
            )
            async with procs.open_mcp(procs.bridge_command(work / "journal.db"), env) as bridge:
                seed = await bridge.call(
                    "task_create", {"channel": "general", "tasks": [{"title": "read"}]}
                )
                assert seed.structured_content is not None, seed
                number = int(seed.structured_content["data"]["tasks"][0]["number"])
                for phase, _calls in FLOOR_PHASES:
                    tool, args = arguments(phase, 0, number)
                    sample = await bridge.call(tool, args)
                    first = sample.content[0]
                    text = first.text if isinstance(first, types.TextContent) else ""
                    path = work / f"canned-{phase}.json"
                    answer = {"structured": sample.structured_content, "text": text}
                    path.write_text(json.dumps(answer))
                    canned[phase] = (path, args)
        per_call: dict[str, float] = {}
        for phase, calls in FLOOR_PHASES:
            path, args = canned[phase]
            dumps = out / phase  # one server per phase: each writes its own callgrind.out.<n>
            dumps.mkdir()
            command = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={dumps / 'callgrind.out'}",
                "--log-file=" + str(work / "valgrind.log"),
                *procs.floor_command("--trio-stdio", "--canned", str(path)),
            ]
            floor_env = {"PYTHONHASHSEED": "0", "PYTHONPATH": str(Path.cwd())}
            with trio.fail_after(900):
                async with procs.open_mcp(command, floor_env) as floor:
                    for _ in range(WARMUP):
                        await floor.call("echo", args)
                    for flags in (("--zero",), ("--instr=on",)):
                        await trio.to_thread.run_sync(_callgrind_control, floor.pid, *flags)
                    for _ in range(calls):
                        await floor.call("echo", args)
                    for flags in (("--instr=off",), ("--dump",)):
                        await trio.to_thread.run_sync(_callgrind_control, floor.pid, *flags)
                    per_call[phase] = _dumped(dumps, set()) / calls
        return per_call


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.instructions",
        description="Count the bridge's own instructions per call with callgrind; compare with "
        "the committed baseline.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 on growth over 15%%")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="also run with a deliberately slowed call path and exit 1 unless that run fails",
    )
    parser.add_argument("--update", action="store_true", help="rewrite the baseline from this run")
    parser.add_argument("--reason", default="", help="why the baseline moves (with --update)")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each phase's callgrind dump in DIR (read them with callgrind_annotate)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also count the floor server answering the bridge's answers; print the ratios",
    )
    parser.add_argument("--baseline", type=Path, default=BASELINE, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.update and not args.reason.strip():
        parser.error("--update needs --reason: say why the bridge's cost per call moved")
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        print(f"instructions: {', '.join(missing)} not found (apt-get install valgrind)")
        return 2
    measured = trio.run(measure, 0, args.keep)
    print("bridge instructions per call (callgrind, the bridge's process only):")
    for phase, value in measured.items():
        print(f"  {phase}: {value:,.0f}")
    status = 0
    if args.floor:
        floor = trio.run(measure_floor)
        print("floor server (trio-native stdio, the bridge's answer) instructions per call:")
        for phase, value in floor.items():
            print(f"  {phase}: {value:,.0f}; the bridge {measured[phase] / value:.2f}x")
    if args.update:
        write_baseline(measured, args.reason.strip(), args.baseline)
        print(f"baseline written to {args.baseline}: commit it with the change that moved it")
    elif args.check or args.self_test:
        verdict = compare(measured, read_baseline(args.baseline)["per_call"])
        print("\n".join(f"  {line}" for line in verdict.lines))
        if not verdict.ok:
            print(f"instructions: FAIL (more than {TOLERANCE:.0%} over the baseline); if the")
            print(f"growth is deliberate, update the baseline with: {UPDATE_COMMAND}")
            status = 1
        else:
            print("instructions: PASS")
    if args.self_test:
        # Against this run, not the committed baseline: whether the guard would catch the
        # slowdown does not depend on how fresh the baseline is.
        slowed = trio.run(measure, SLOWDOWN_LOOPS)
        verdict = compare(slowed, measured)
        print(
            f"self-test: the same sequence with {SLOWDOWN_LOOPS:,} loop iterations added to every"
            " call, against the run above:"
        )
        print("\n".join(f"  {line}" for line in verdict.lines))
        if verdict.ok:
            print("self-test: FAIL (the slowed call path passed the check)")
            status = 1
        else:
            print("self-test: PASS (the slowed call path fails the check)")
    return status


if __name__ == "__main__":
    sys.exit(main())
