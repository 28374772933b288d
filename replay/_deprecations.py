"""``deprecations``: who still uses old names, and whether each name's removal gate is met.

Built from ``deprecated_usage`` events. A name is the old tool name, the old argument spelling
(its JSON path with array indices folded, ``$.tasks[].mediaType``) or the deprecated upstream
route. The removal gate is "no use for N consecutive days": it is met at ``last use + N days``
(for a name never used in the journals, ``first journal event + N days``), judged at ``as_of``
(default now). Memory: one entry per (name, client, agent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import msgspec

from agentteam_task_bridge.journal import DeprecatedUsage, Record

from ._calls import wall
from ._source import Progress, open_journals
from ._story import parse_wall

__all__ = [
    "DeprecatedName",
    "DeprecatedUser",
    "DeprecationReport",
    "Gate",
    "Tally",
    "deprecations",
]

DEFAULT_GATE_DAYS: Final = 30
_INDEX: Final = re.compile(r"\[\d+\]")


class DeprecatedUser(msgspec.Struct, kw_only=True):
    """One client and agent still using a name."""

    client_name: str | None
    client_version: str | None
    agent_id: str | None
    count: int = 0
    first_seen: str = ""
    last_seen: str = ""


class Gate(msgspec.Struct, frozen=True, kw_only=True):
    """The removal gate of one name: met or not, and since (or from) when."""

    days: int
    met: bool
    since: str  # when it was (or will be) met

    @property
    def text(self) -> str:
        """``met since DAY``, or ``not before DAY`` (the earliest day it can be met)."""
        return f"met since {self.since[:10]}" if self.met else f"not before {self.since[:10]}"


class DeprecatedName(msgspec.Struct, kw_only=True):
    """One deprecated name: its uses, users, and removal gate."""

    use_kind: str
    old_name: str
    replacement: str | None
    tools: list[str]
    count: int
    first_seen: str | None
    last_seen: str | None
    users: list[DeprecatedUser]
    gate: Gate


class DeprecationReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every deprecated name used (or asked about) and the window the journals cover."""

    names: list[DeprecatedName]
    gate_days: int
    as_of: str
    window_start: str | None
    window_end: str | None
    uses: int

    @property
    def ok(self) -> bool:
        """Whether every name's removal gate is met."""
        return all(n.gate.met for n in self.names)


def fold_name(use_kind: str, old_name: str) -> str:
    return _INDEX.sub("[]", old_name) if use_kind == "argument" else old_name


class _Acc:
    __slots__ = ("count", "first", "last", "replacement", "tools", "users")

    def __init__(self) -> None:
        self.count = 0
        self.first = ""
        self.last = ""
        self.replacement: str | None = None
        self.tools: set[str] = set()
        self.users: dict[tuple[str | None, str | None, str | None], DeprecatedUser] = {}


def deprecations(
    paths: Sequence[str | Path],
    *,
    gate_days: int = DEFAULT_GATE_DAYS,
    as_of: datetime | None = None,
    names: Sequence[str] = (),
    progress: Progress | None = None,
) -> DeprecationReport:
    """Deprecated usage by name, replacement, client and agent, with each name's removal gate.

    ``names``: restrict the report to these names, and report them even when never used.
    """
    tally = Tally()
    with open_journals(paths) as journals:
        for record in journals.records(progress):
            tally.add(record)
    return tally.report(gate_days=gate_days, as_of=as_of, names=names)


class Tally:
    """Deprecated usage as records are fed (any subset, in any order): what ``deprecations``
    reports, so that one pass can feed it alongside other checks (``report`` does)."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], _Acc] = {}
        self.window_start: str | None = None
        self.window_end: str | None = None
        self.uses = 0

    def add(self, record: Record) -> None:
        if self.window_start is None or record.ts_wall < self.window_start:
            self.window_start = record.ts_wall
        if self.window_end is None or record.ts_wall > self.window_end:
            self.window_end = record.ts_wall
        p = record.payload
        if not isinstance(p, DeprecatedUsage):
            return
        self.uses += 1
        key = (p.use_kind, fold_name(p.use_kind, p.old_name))
        acc = self.found.get(key)
        if acc is None:
            acc = self.found[key] = _Acc()
        at = record.ts_wall
        acc.count += 1
        acc.first = min(acc.first, at) if acc.first else at
        acc.last = max(acc.last, at)
        acc.replacement = acc.replacement or p.replacement
        if record.gen_ai_tool_name:
            acc.tools.add(record.gen_ai_tool_name)
        who = (p.client_name, p.client_version, p.agent_id)
        user = acc.users.get(who)
        if user is None:
            user = acc.users[who] = DeprecatedUser(
                client_name=p.client_name, client_version=p.client_version, agent_id=p.agent_id
            )
        user.count += 1
        user.first_seen = min(user.first_seen, at) if user.first_seen else at
        user.last_seen = max(user.last_seen, at)

    def report(
        self,
        *,
        gate_days: int = DEFAULT_GATE_DAYS,
        as_of: datetime | None = None,
        names: Sequence[str] = (),
    ) -> DeprecationReport:
        moment = as_of or datetime.now(UTC)
        wanted = set(names)
        report: list[DeprecatedName] = []
        for (use_kind, old_name), acc in self.found.items():
            if wanted and old_name not in wanted:
                continue
            wanted.discard(old_name)
            report.append(
                DeprecatedName(
                    use_kind=use_kind,
                    old_name=old_name,
                    replacement=acc.replacement,
                    tools=sorted(acc.tools),
                    count=acc.count,
                    first_seen=acc.first,
                    last_seen=acc.last,
                    users=sorted(acc.users.values(), key=lambda u: (-u.count, str(u.client_name))),
                    gate=_gate(acc.last, gate_days, moment),
                )
            )
        return _report(
            report, wanted, gate_days, moment, self.window_start, self.window_end, self.uses
        )


def _report(
    names: list[DeprecatedName],
    wanted: Iterable[str],
    gate_days: int,
    moment: datetime,
    window_start: str | None,
    window_end: str | None,
    uses: int,
) -> DeprecationReport:
    """The report over the names used (``names``, extended in place), the names asked about
    but never used in the window, in the report's order (gate not met first, most used first).
    Shared by the local report and ``--from`` a fleet store."""
    for old_name in sorted(wanted):  # asked about, never used in the window
        names.append(
            DeprecatedName(
                use_kind="unknown",
                old_name=old_name,
                replacement=None,
                tools=[],
                count=0,
                first_seen=None,
                last_seen=None,
                users=[],
                gate=_gate(window_start, gate_days, moment),
            )
        )
    names.sort(key=lambda n: (n.gate.met, -n.count, n.old_name))
    return DeprecationReport(
        names=names,
        gate_days=gate_days,
        as_of=wall(moment),
        window_start=window_start,
        window_end=window_end,
        uses=uses,
    )


def _gate(last_use: str | None, days: int, moment: datetime) -> Gate:
    """No use for ``days`` consecutive days: met from ``last_use + days`` on."""
    if last_use is None:  # no journal event at all: nothing shows the name unused
        return Gate(days=days, met=False, since=wall(moment + timedelta(days=days)))
    met_at = parse_wall(last_use) + timedelta(days=days)
    return Gate(days=days, met=met_at <= moment, since=wall(met_at))
