"""Rows of the benchmark table, percentiles, and the plain-text rendering."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Row:
    """One measured line: latency columns in ms, a rate, a comparison and a target verdict."""

    section: str
    label: str
    p50_ms: float | None = None
    p99_ms: float | None = None
    rate: float | None = None  # calls (or requests) per second
    compare: str = ""  # e.g. "+1.93 ms, 1.95x of floors"
    target: str = ""
    ok: bool | None = None
    # Named figures the targets section reads (see targets.py), e.g. {"latency task_get": 1.7}.
    metrics: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank method; samples need not be sorted."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: Sequence[float], q: float) -> float:
    return percentile(seconds, q) * 1000


def render(rows: Sequence[Row]) -> str:
    header = ("benchmark", "p50 ms", "p99 ms", "per s", "comparison", "target", "")
    body: list[tuple[str, ...]] = []
    section = None
    for row in rows:
        if row.section != section:
            section = row.section
            body.append((f"[{section}]", "", "", "", "", "", ""))
        body.append(
            (
                "  " + row.label,
                _num(row.p50_ms, 3),
                _num(row.p99_ms, 3),
                _num(row.rate, 0),
                row.compare,
                row.target,
                "" if row.ok is None else ("PASS" if row.ok else "MISS"),
            )
        )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    right = {1, 2, 3}

    def fmt(line: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        return "  ".join(cells).rstrip()

    rule = "-" * len(fmt(header))
    return "\n".join([fmt(header), rule, *(fmt(line) for line in body)])


def _num(value: float | None, digits: int) -> str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:,.{digits}f}"
