"""``python -m tools.reliability [--long] [--seed N] [--only ...]``: the whole suite, counted.

The fast, seeded portion of the same checks runs in CI as ``tests/test_reliability_*.py``; this
runs them at length (``--long``: 5,000 fuzzed calls, 25 kills, 10,000 load calls, three fault
rounds) and prints what was tried: inputs, faults injected, kills survived, events lost,
findings, and the known bugs still open. Exit status 1 when anything failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, seed, settings

from . import crash, faults, fuzz, load, secrets
from .audit import audit_journal
from .portal import background
from .stand import MARKER, Stand, open_stand
from .wire import RawBridge

SECTIONS = ("fuzz", "faults", "crash", "secrets", "load")


@dataclass
class Line:
    section: str
    inputs: int = 0
    faults: int = 0
    kills: int = 0
    lost: int = 0
    findings: list[str] = field(default_factory=list)
    known_bugs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""


def run_fuzz(directory: Path, *, examples: int, seed_value: int) -> Line:
    line = Line("fuzz")
    journal = directory / "journal.db"
    cases = fuzz.frame_cases()

    @asynccontextmanager
    async def setup() -> AsyncIterator[tuple[Stand, RawBridge]]:
        async with open_stand(directory) as stand, stand.bridge(journal, client_name="fuzz") as raw:
            raw.answer_timeout = 20.0
            yield stand, raw

    with background(setup) as ((_stand, raw), portal):
        for case in cases:
            portal.run(raw.send, case.frame)
            portal.run(raw.request, "ping")
        portal.run(trio.sleep, 1.0)
        for case in cases:
            if case.request_id is None:
                continue
            problems = fuzz.check_frame_answer(case, raw.transcript.answers.get(case.request_id))
            if problems and case.known_bug:
                line.known_bugs.append(f"frame {case.name!r}: {case.known_bug}")
            elif problems:
                line.findings.append(f"frame {case.name!r}: {problems}")
            elif case.known_bug:
                line.findings.append(f"frame {case.name!r}: fixed? ({case.known_bug})")
        tried = 0

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @seed(seed_value)
        @given(call=fuzz.tool_calls())
        def property_holds(call: fuzz.ToolCall) -> None:
            nonlocal tried
            tried += 1
            answer = portal.run(partial(raw.call, call.name, call.arguments, meta=call.meta))
            assert fuzz.check_tool_answer(call, answer) == []

        try:
            property_holds()
        except Exception as exc:  # hypothesis re-raises the shrunk failing example
            notes = " ".join(getattr(exc, "__notes__", []))
            line.findings.append(f"property: {type(exc).__name__} {str(exc)[:1500]} {notes}")
        line.inputs = len(cases) + tried
        if raw.transcript.violations:
            line.findings.append(f"{len(raw.transcript.violations)} non-JSON-RPC stdout lines")
    report = audit_journal(journal, answers={"fuzz": raw.transcript.answers})
    line.findings += report.findings
    line.note = f"{len(cases)} frames + {tried} hypothesis calls; {report.events} events journaled"
    return line


async def run_faults(directory: Path, *, rounds: int) -> Line:
    line = Line("faults")
    journal = directory / "journal.db"
    async with open_stand(directory) as stand:
        timeout = ("--upstream-timeout", str(faults.UPSTREAM_TIMEOUT_S))
        async with stand.bridge(journal, *timeout, client_name="faults") as raw:
            outcomes = []
            for r in range(rounds):
                outcomes += await faults.run_scenarios(stand, raw, f"fault{r}")
                line.findings += await faults.storm_401(stand, raw)
        await faults.check_effects_and_attempts(outcomes, journal, stand.runtime_db, "faults")
        line.faults = stand.faults_fired
        report = audit_journal(
            journal,
            answers={"faults": raw.transcript.answers},
            runtime_db=stand.runtime_db,
            marker=MARKER,
        )
    line.inputs = len(outcomes)
    line.findings += [f"{o.scenario.name}: {o.problems}" for o in outcomes if o.problems]
    line.findings += report.findings
    line.note = f"{len(faults.SCENARIOS)} scenarios x {rounds} + 401 storms; effects matched"
    return line


async def run_crash(directory: Path, *, kills: int, seed_value: int) -> Line:
    line = Line("crash")
    async with open_stand(directory) as stand:
        report = await crash.crash_loop(
            stand, directory / "journal.db", seed=seed_value, kills=kills
        )
    audit = report.audit
    assert audit is not None
    line.kills = report.kills
    line.inputs = sum(d.sent for d in report.drives)
    line.findings += audit.findings
    line.findings += [str(p) for d in report.drives for p in d.protocol_errors]
    if audit.in_doubt_replay != len(audit.in_doubt):
        line.findings.append(
            f"in doubt: {len(audit.in_doubt)} here, {audit.in_doubt_replay} per replay.verify"
        )
    line.note = (
        f"{report.answered} answered, all journaled; {audit.incomplete} calls cut short, "
        f"{len(audit.in_doubt)} in doubt ({report.in_doubt_applied} took effect upstream); "
        f"{audit.effects_checked} side effects matched; {report.killed_before_session} "
        "kills before the session started"
    )
    return line


async def run_secrets(directory: Path) -> Line:
    line = Line("secrets")
    async with open_stand(directory / "canary") as stand:
        canary = await secrets.canary_run(stand, directory / "canary" / "journal.db")
        workspace, agent = stand.runtime.workspace_id, stand.runtime.agent_id
    async with open_stand(directory / "foreign") as stand:
        foreign = await secrets.foreign_token_run(stand, directory / "foreign" / "journal.db")
    line.inputs = len(canary.codes) + sum(len(a) for a in foreign.answers.values())
    line.findings += canary.leaks + foreign.leaks + canary.audit.findings
    if canary.owners != {(workspace, agent)}:
        line.findings.append(f"tasks owned by {canary.owners}")
    if any(i["workspace_id"] != workspace or i["agent_id"] != agent for i in canary.injected):
        line.findings.append("injected context changed")
    if foreign.tasks_created:
        line.findings.append(f"{foreign.tasks_created} tasks created with a foreign token")
    codes = {e.get("code") for errors in foreign.answers.values() for e in errors}
    if codes != {"credential_mismatch"}:
        line.findings.append(f"foreign tokens answered {codes}")
    line.note = "3 canary tokens, 5 hidden-context attempts, 2 foreign credentials"
    return line


async def run_load(directory: Path, *, calls: int, seed_value: int) -> Line:
    line = Line("load")
    async with open_stand(directory) as stand:
        report = await load.load_run(
            stand, directory / "journal.db", calls=calls, in_flight=32, seed=seed_value
        )
    line.inputs = report.stats.sent
    line.lost = report.lost
    line.findings += report.audit.findings
    line.findings += [f"protocol error {p}" for p in report.stats.protocol_errors[:5]]
    if report.violations:
        line.findings.append(f"{report.violations} non-JSON-RPC stdout lines")
    if report.rss_growth > 0.15:
        line.findings.append(f"RSS grew {report.rss_growth:.0%}: {report.stats.rss_kib}")
    samples = report.stats.rss_kib
    line.note = (
        f"32 in flight; tool errors {dict(report.stats.tool_errors) or 0}; RSS "
        f"{samples[len(samples) // 4][1] / 1024:.1f} -> {samples[-1][1] / 1024:.1f} MiB "
        f"({report.rss_growth:+.1%})"
    )
    return line


def render(lines: list[Line]) -> str:
    header = ("section", "inputs", "faults", "kills", "lost", "findings", "known bugs", "s", "")
    rows = [
        (
            line.section,
            f"{line.inputs:,}",
            str(line.faults),
            str(line.kills),
            str(line.lost),
            str(len(line.findings)),
            str(len(line.known_bugs)),
            f"{line.seconds:.0f}",
            line.note,
        )
        for line in lines
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in [header, *rows]]
    out.insert(1, "-" * len(out[0]))
    for line in lines:
        out += [f"FINDING [{line.section}] {f}" for f in line.findings]
    for line in lines:
        out += [f"known bug [{line.section}] {b}" for b in line.known_bugs]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability", description=__doc__)
    parser.add_argument("--long", action="store_true", help="the long version of every check")
    parser.add_argument("--seed", type=int, default=20251202)
    parser.add_argument("--only", default=",".join(SECTIONS), help=", ".join(SECTIONS))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    asked = {name.strip() for name in args.only.split(",") if name.strip()}
    if unknown := sorted(asked - set(SECTIONS)):
        parser.error(f"unknown sections: {', '.join(unknown)}")
    wanted = [s for s in SECTIONS if s in asked]
    long = args.long
    lines: list[Line] = []
    with tempfile.TemporaryDirectory(prefix="agentteam-reliability-") as tmp:
        runs: dict[str, Callable[[Path], Any]] = {
            "fuzz": lambda d: run_fuzz(d, examples=5000 if long else 300, seed_value=args.seed),
            "faults": lambda d: trio.run(partial(run_faults, d, rounds=3 if long else 1)),
            "crash": lambda d: trio.run(
                partial(run_crash, d, kills=25 if long else 4, seed_value=args.seed)
            ),
            "secrets": lambda d: trio.run(run_secrets, d),
            "load": lambda d: trio.run(
                partial(run_load, d, calls=10_000 if long else 2_000, seed_value=args.seed)
            ),
        }
        for name in wanted:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            line: Line = runs[name](Path(tmp) / name)
            line.seconds = time.perf_counter() - started
            lines.append(line)
    print(f"reliability suite ({'long' if long else 'short'}, seed {args.seed})")
    print(render(lines))
    return 1 if any(line.findings for line in lines) else 0
