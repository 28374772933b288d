"""The instruction-count guard's verdict and its slowed call path (valgrind runs in .ci/run)."""

from __future__ import annotations

from pathlib import Path

from tools.bench import instructions

BASE = {"task_get": 1000.0, "task_create": 2000.0, "task_list": 3000.0, "task_get rejected": 500.0}


def test_growth_up_to_the_tolerance_passes_and_beyond_it_fails() -> None:
    within = {**BASE, "task_get": 1150.0}
    assert instructions.compare(within, BASE).ok
    over = {**BASE, "task_create": 2301.0}
    verdict = instructions.compare(over, BASE)
    assert not verdict.ok
    assert any(line.startswith("task_create:") and "FAIL" in line for line in verdict.lines)


def test_a_drop_passes_with_a_note_to_refresh_the_baseline() -> None:
    verdict = instructions.compare({**BASE, "task_list": 1000.0}, BASE)
    assert verdict.ok
    assert any("refresh" in line for line in verdict.lines)


def test_a_changed_sequence_fails_until_the_baseline_is_updated() -> None:
    fewer = {k: v for k, v in BASE.items() if k != "task_list"}
    assert not instructions.compare(fewer, BASE).ok
    assert not instructions.compare(BASE, fewer).ok


def test_the_committed_baseline_covers_the_sequence_and_says_why() -> None:
    data = instructions.read_baseline()
    assert data["reason"].strip()
    assert set(data["per_call"]) == {phase for phase, _ in instructions.PHASES}
    assert all(value > 0 for value in data["per_call"].values())


def test_update_round_trips_and_the_slowed_path_is_valid_python(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    instructions.write_baseline(BASE, "because", path)
    assert instructions.read_baseline(path)["per_call"] == BASE
    source = instructions._SITECUSTOMIZE.format(loops=3)
    compile(source, "sitecustomize.py", "exec")
    assert "Bridge" in source and "answer" in source
