"""Issue 19's targets, each a ratio of two figures measured in the same run, with its verdict.

The sections put the figures on their rows (``Row.metrics``); this reads them back, so every
target is judged on one run of ``python -m tools.bench`` (full, not ``--quick``). A target whose
section did not run, or whose peer is missing (the ``[bench]`` extra), is printed as not measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import peer_server
from ._report import Row

SECTION = "issue 19 targets: ratios measured in this run"
# (metric, what it is, bound, at most (True) or at least (False))
TARGETS: tuple[tuple[str, str, float, bool], ...] = (
    ("cpu task_get", "server CPU/call, task_get durable vs trio floor, sized result", 2.0, True),
    ("cpu task_create", "server CPU/call, task_create vs trio floor, sized result", 2.5, True),
    ("latency task_get", "p50 task_get durable vs SDK stdio floor + direct HTTP", 1.25, True),
    ("latency task_create", "p50 task_create vs SDK stdio floor + direct HTTP", 1.35, True),
    ("throughput task_get", "32 in flight, task_get: bridge vs FastMCP peer", 3.0, False),
    ("throughput task_create", "32 in flight, task_create: bridge vs FastMCP peer", 3.0, False),
    ("coldstart", "spawn -> first tools/list: bridge vs SDK one-tool floor", 1.1, True),
    ("growth_append", "durable append: 1M-event journal vs empty", 1.1, True),
    ("growth_startup", "bridge start-up: 1M-event journal vs empty", 1.1, True),
)
REPLAY_PREFIX = "replay "
REPLAY_BOUND = 1.25


def evaluate(rows: Sequence[Row]) -> list[Row]:
    """One row per target: the measured ratio, the bound and PASS/MISS."""
    metrics: dict[str, float] = {}
    for row in rows:
        metrics.update(row.metrics)
    out: list[Row] = []
    for key, what, bound, at_most in TARGETS:
        target = f"{'<=' if at_most else '>='} {bound}x"
        value = metrics.get(key)
        if value is None:
            missing = "not measured (its section did not run)"
            if key.startswith("throughput") and not peer_server.available():
                missing = peer_server.EXTRA_MISSING
            out.append(Row(SECTION, what, compare=missing, target=target))
            continue
        ok = value <= bound if at_most else value >= bound
        out.append(Row(SECTION, what, compare=f"{value:.2f}x", target=target, ok=ok))
    replayed = {k: v for k, v in metrics.items() if k.startswith(REPLAY_PREFIX)}
    if not replayed:
        out.append(
            Row(
                SECTION,
                "replay commands linear in events, flat memory",
                compare="not measured (its section did not run)",
                target=f"<= {REPLAY_BOUND}x",
            )
        )
    for key, value in replayed.items():
        out.append(
            Row(
                SECTION,
                f"{key}: worse of CPU/event and peak RSS, 4N vs N",
                compare=f"{value:.2f}x",
                target=f"<= {REPLAY_BOUND}x",
                ok=value <= REPLAY_BOUND,
            )
        )
    return out
