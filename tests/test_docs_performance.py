"""docs/performance.md stays true: every command it shows parses with that tool's own parser, every
section it names exists (that the README links it: test_readme)."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.bench import _cli as bench_cli

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "performance.md").read_text()
SH = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
# `python -m <module>` -> the module that builds its parser
PARSERS = {
    "tools.bench": "tools.bench._cli",
    "tools.reliability": "tools.reliability._cli",
    "tools.bench.profile_bridge": "tools.bench.profile_bridge",
    "tools.bench.bench_journal": "tools.bench.bench_journal",
    "tools.bench.bench_replay": "tools.bench.bench_replay",
    "tools.bench.instructions": "tools.bench.instructions",
    "tools.bench.bench_fleet": "tools.bench.bench_fleet",
    "tools.bench.bench_tlog": "tools.bench.bench_tlog",
    "tools.bench.bench_ingest": "tools.bench.bench_ingest",
    "tools.bench.bench_witness": "tools.bench.bench_witness",
}


def _tool_runs() -> Iterator[tuple[str, list[str]]]:
    for body in SH.findall(PAGE):
        for line in body.splitlines():
            tokens = shlex.split(line, comments=True)
            if "-m" in tokens:
                at = tokens.index("-m")
                yield tokens[at + 1], tokens[at + 2 :]


def _parser(module: str) -> argparse.ArgumentParser:
    built: argparse.ArgumentParser = importlib.import_module(PARSERS[module]).build_parser()
    return built


RUNS = list(_tool_runs())


def test_the_page_shows_every_tool() -> None:
    assert {module for module, _ in RUNS} == set(PARSERS)


@pytest.mark.parametrize(("module", "arguments"), RUNS, ids=[shlex.join(a) for _, a in RUNS])
def test_every_command_shown_parses(module: str, arguments: list[str]) -> None:
    try:
        _parser(module).parse_args(arguments)
    except SystemExit as exc:
        shown = f"python -m {module} {shlex.join(arguments)}"
        raise AssertionError(f"`{shown}` does not parse") from exc


def test_the_sections_named_are_the_benchmarks() -> None:
    part = PAGE.split("Sections (`--only`")[1].split("\n\n")[1]
    assert re.findall(r"^\| `(\w+)` \|", part, re.M) == [*bench_cli.SECTIONS, *bench_cli.EXTERNAL]


def test_the_reliability_sections_named_are_the_suites() -> None:
    from tools.reliability._cli import SECTIONS

    part = PAGE.split("## The reliability and security suite")[1].split("| section |")[1]
    first_table = part.split("\n\n")[0]
    assert re.findall(r"^\| `(\w+)` \|", first_table, re.M) == list(SECTIONS)
