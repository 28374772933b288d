"""Issue 19's targets table: each ratio read back from the rows of one run, with its verdict."""

from __future__ import annotations

import pytest

from tools.bench import peer_server, targets
from tools.bench._report import Row


def _by_label(rows: list[Row]) -> dict[str, Row]:
    return {row.label: row for row in rows}


def test_each_target_is_judged_on_its_bound_and_direction() -> None:
    rows = [
        Row("latency", "get", metrics={"latency task_get": 1.2, "cpu task_get": 2.1}),
        Row("throughput", "get 32", metrics={"throughput task_get": 3.0}),
        Row("throughput", "create 32", metrics={"throughput task_create": 2.9}),
        Row("replay", "verify", metrics={"replay verify": 1.3}),
    ]
    judged = _by_label(targets.evaluate(rows))
    assert judged["p50 task_get durable vs SDK stdio floor + direct HTTP"].ok is True
    assert judged["server CPU/call, task_get durable vs trio floor, sized result"].ok is False
    assert judged["32 in flight, task_get: bridge vs FastMCP peer"].ok is True
    assert judged["32 in flight, task_create: bridge vs FastMCP peer"].ok is False
    assert judged["replay verify: worse of CPU/event and peak RSS, 4N vs N"].ok is False
    unmeasured = judged["spawn -> first tools/list: bridge vs SDK one-tool floor"]
    assert unmeasured.ok is None and "not measured" in unmeasured.compare


def test_without_the_bench_extra_the_peer_targets_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peer_server, "available", lambda: False)
    judged = _by_label(targets.evaluate([]))
    row = judged["32 in flight, task_get: bridge vs FastMCP peer"]
    assert row.ok is None and "[bench] extra" in row.compare
    assert "not measured" in judged["replay commands linear in events, flat memory"].compare
