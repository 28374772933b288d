"""A mixed, seeded workload over one stdio session, with many calls in flight.

Mutations carry the run's marker and are unique (a title or summary per call), so that the
runtime's side effects can be matched one to one with journaled upstream requests. Used by the
load run (thousands of calls: nothing lost, no protocol error, flat memory) and by the crash loop
(the same traffic, SIGKILLed at a random moment).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tools.bench.procs import rss_kib

from .audit import JournalAudit, audit_journal
from .stand import MARKER, Stand
from .wire import BridgeGone, RawBridge


class Workload:
    """The next call to make: reads, creates, checkpoints, updates and claims, seeded."""

    def __init__(self, rng: random.Random, tag: str, numbers: list[int]) -> None:
        self._rng = rng
        self._tag = tag
        self.numbers = numbers  # tasks known to exist on `general`

    def call(self, i: int) -> tuple[str, dict[str, Any]]:
        rng, mark = self._rng, f"{MARKER}{self._tag}"
        number = rng.choice(self.numbers)
        roll = rng.random()
        if roll < 0.30:
            return "task_create", {"channel": "general", "tasks": [{"title": f"{mark}-c{i}"}]}
        if roll < 0.45:
            summary = f"{mark}-k{i}"
            return "task_checkpoint", {"channel": "general", "number": number, "summary": summary}
        if roll < 0.55:
            patch = {"title": f"{mark}-u{i}"}
            return "task_update", {"channel": "general", "number": number, "patch": patch}
        if roll < 0.60:
            claim = {"channel": "general", "numbers": [number], "claimed": rng.random() < 0.5}
            return "task_set_claim", claim
        if roll < 0.80:
            return "task_get", {"channel": "general", "number": number}
        return "task_list", {"channel": "general", "limit": rng.choice((1, 5, 20))}

    def learn(self, tool: str, answer: dict[str, Any]) -> None:
        if tool != "task_create":
            return
        data = (answer.get("result", {}).get("structuredContent") or {}).get("data") or {}
        self.numbers += [t["number"] for t in data.get("tasks", [])]


@dataclass
class DriveStats:
    sent: int = 0
    ok: int = 0
    tool_errors: Counter[str] = field(default_factory=Counter)
    protocol_errors: list[dict[str, Any]] = field(default_factory=list)
    cut_off: int = 0  # calls the bridge never answered because it went away
    rss_kib: list[tuple[int, int]] = field(default_factory=list)  # (calls done, VmRSS)

    @property
    def answered(self) -> int:
        return self.ok + sum(self.tool_errors.values()) + len(self.protocol_errors)


async def drive(
    raw: RawBridge,
    workload: Workload,
    *,
    calls: int,
    in_flight: int,
    sample_every: int = 0,
    stats: DriveStats | None = None,
) -> DriveStats:
    """Make `calls` calls with `in_flight` at a time; stop quietly when the bridge goes away.

    `stats`: the counters to update as calls are answered (a caller can watch them live)."""
    stats = stats if stats is not None else DriveStats()
    counter = iter(range(calls))
    done = 0

    async def worker() -> None:
        nonlocal done
        for i in counter:
            tool, arguments = workload.call(i)
            stats.sent += 1
            try:
                answer = await raw.call(tool, arguments)
            except (BridgeGone, trio.BrokenResourceError, trio.ClosedResourceError):
                stats.cut_off += 1
                return
            result = answer.get("result")
            if not isinstance(result, dict) or "isError" not in result:
                stats.protocol_errors.append(answer)
            elif result["isError"]:
                stats.tool_errors[result["structuredContent"]["error"]["code"]] += 1
            else:
                stats.ok += 1
                workload.learn(tool, answer)
            done += 1
            if sample_every and done % sample_every == 0 and raw.process.returncode is None:
                stats.rss_kib.append((done, rss_kib(raw.pid)[0]))

    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    return stats


async def seed_tasks(raw: RawBridge, count: int = 5) -> list[int]:
    """Tasks for the workload to read and change (created through the bridge, unmarked)."""
    answer = await raw.call(
        "task_create",
        {"channel": "general", "tasks": [{"title": f"seed {i}"} for i in range(count)]},
    )
    return [t["number"] for t in answer["result"]["structuredContent"]["data"]["tasks"]]


@dataclass
class LoadReport:
    calls: int
    in_flight: int
    stats: DriveStats
    audit: JournalAudit
    violations: int

    @property
    def lost(self) -> int:
        """Calls sent without an answer, or answered without a journaled outcome."""
        unanswered = self.stats.sent - self.stats.answered
        return unanswered + self.audit.incomplete + len(self.audit.findings)

    @property
    def rss_growth(self) -> float:
        """RSS at the end over RSS at a quarter of the run, minus one."""
        samples = self.stats.rss_kib
        base = samples[len(samples) // 4][1]
        return samples[-1][1] / base - 1


async def load_run(
    stand: Stand, journal: Path, *, calls: int, in_flight: int, seed: int
) -> LoadReport:
    async with stand.bridge(journal, client_name="load") as raw:
        workload = Workload(random.Random(seed), "load", await seed_tasks(raw))
        stats = await drive(
            raw, workload, calls=calls, in_flight=in_flight, sample_every=max(1, calls // 20)
        )
    audit = audit_journal(
        journal,
        answers={"load": raw.transcript.answers},
        runtime_db=stand.runtime_db,
        marker=f"{MARKER}load",
    )
    return LoadReport(calls, in_flight, stats, audit, len(raw.transcript.violations))
