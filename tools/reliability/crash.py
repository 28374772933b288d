"""SIGKILL the bridge at random moments under concurrent load, then audit what is left.

Each round launches a bridge on the same journal, drives the mixed workload with 4 to 32 calls in
flight, and SIGKILLs it a seeded delay after its first answer (sometimes before the session even
starts): counted from an event, not from the launch, so a loaded machine moves the kill points
but never leaves a round without answers. A final
clean session ends the run. The audit (``tools.reliability.audit``) then proves: the journal
verifies; every answer any round received is journaled with the same outcome; every marked side
effect in the runtime has a journaled upstream request and happened once; calls cut short are
incomplete only in killed sessions, and the mutations among them that were sent are in doubt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .audit import JournalAudit, audit_journal, read_journal, runtime_marked
from .load import DriveStats, Workload, drive, seed_tasks
from .stand import MARKER, Stand
from .wire import BridgeGone, RawBridge


@dataclass
class CrashReport:
    kills: int = 0
    killed_before_session: int = 0
    answers: dict[str, dict[int | str, dict[str, Any]]] = field(default_factory=dict)
    drives: list[DriveStats] = field(default_factory=list)
    audit: JournalAudit | None = None
    in_doubt_applied: int = 0  # in-doubt mutations that did take effect upstream

    @property
    def answered(self) -> int:
        return sum(d.answered for d in self.drives)


async def _round(
    stand: Stand, journal: Path, rng: random.Random, name: str, numbers: list[int], tag: str
) -> tuple[RawBridge, DriveStats, bool]:
    early = rng.random() < 0.2
    delay = rng.uniform(0.0, 0.6) if early else rng.uniform(0.05, 0.8)
    in_flight = rng.choice((4, 8, 16, 32))
    stats = DriveStats()
    started = trio.Event()
    async with stand.bridge(journal, client_name=name, initialize=False) as raw:
        async with trio.open_nursery() as nursery:

            async def load() -> None:
                try:
                    await raw.initialize()
                except (BridgeGone, trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                started.set()
                workload = Workload(rng, tag, numbers)
                await drive(raw, workload, calls=10**9, in_flight=in_flight, stats=stats)

            nursery.start_soon(load)
            if not early:
                with trio.move_on_after(60):  # bounds a hang only
                    await started.wait()
                    while stats.answered == 0:  # noqa: ASYNC110 - counters of the drive
                        await trio.sleep(0.005)
            await trio.sleep(delay)
            raw.kill()
    return raw, stats, not started.is_set()


async def crash_loop(
    stand: Stand, journal: Path, *, seed: int, kills: int, tag: str = "crash"
) -> CrashReport:
    rng = random.Random(seed)
    report = CrashReport()
    async with stand.bridge(journal, client_name=f"{tag}-seed") as raw:
        numbers = await seed_tasks(raw)
    report.answers[raw.client_name] = raw.transcript.answers
    for k in range(kills):
        name = f"{tag}-{k}"
        # Titles are unique across rounds (`crash3-c11`), the marker still covers them all.
        killed, stats, before = await _round(stand, journal, rng, name, numbers, f"{tag}{k}")
        report.kills += 1
        report.killed_before_session += before
        report.answers[name] = killed.transcript.answers
        report.drives.append(stats)
    async with stand.bridge(journal, client_name=f"{tag}-final") as raw:
        listed = await raw.call("task_list", {"channel": "general", "limit": 1})
        assert listed["result"]["isError"] is False, listed
    report.answers[raw.client_name] = raw.transcript.answers
    report.audit = audit_journal(
        journal, answers=report.answers, runtime_db=stand.runtime_db, marker=f"{MARKER}{tag}"
    )
    report.in_doubt_applied = _applied(report.audit, journal, stand.runtime_db, tag)
    return report


def _applied(audit: JournalAudit, journal: Path, runtime_db: Path, tag: str) -> int:
    """How many in-doubt calls did take effect (their marked text is in the runtime)."""
    effects = set(runtime_marked(runtime_db, f"{MARKER}{tag}"))
    calls = read_journal(journal).calls
    applied = 0
    for call_id in audit.in_doubt:
        texts = [str(b) for b in calls[call_id].request_bodies]
        applied += any(effect in text for effect in effects for text in texts)
    return applied
