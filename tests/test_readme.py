"""README.md and docs/clients.md stay true: commands parse, names exist, samples hold."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import POLICIES, TOOL_MIGRATIONS
from agentteam_task_bridge.cli import _cli as bridge_cli
from agentteam_task_bridge.journal import META_CALLBACK, META_RUN
from agentteam_task_bridge.replay import _cli as replay_cli

from .bridge_harness import BridgeSession

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CLIENTS = (ROOT / "docs" / "clients.md").read_text()
DOCS = {"README.md": README, "docs/clients.md": CLIENTS}

INSTALL_AND_DEMO = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/agentteam-bridge demo"
)
INSTALL_AND_TEST = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
)
PARSERS = {"agentteam-bridge": bridge_cli.build_parser, "agentteam-replay": replay_cli.build_parser}
# Flags of other programs the docs show (pip, sqlite-utils, the MCP Inspector, Claude Code).
FOREIGN_FLAGS = {"--cli", "--method", "--tool-name", "--tool-arg", "--strict", "--table", "--scope"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(text: str, *languages: str) -> Iterator[str]:
    for language, body in FENCE.findall(text):
        if language in languages:
            yield body


def _command_lines(text: str) -> Iterator[str]:
    """Shell lines of `sh` blocks, and `$ ` lines of `text` blocks; continuations joined."""
    for language, body in FENCE.findall(text):
        joined = body.replace("\\\n", " ")
        for line in joined.splitlines():
            if language == "sh":
                yield line
            elif language == "text" and line.startswith("$ "):
                yield line[2:]


def _invocations(text: str) -> Iterator[tuple[str, list[str]]]:
    """(program, arguments) of every agentteam-bridge / agentteam-replay run the docs show."""
    for line in _command_lines(text):
        for segment in re.split(r"&&|\|", line):
            tokens = shlex.split(segment, comments=True)
            for i, token in enumerate(tokens):
                program = os.path.basename(token)
                if program in PARSERS:
                    yield program, tokens[i + 1 :]
                    break


def _parse(program: str, arguments: list[str]) -> argparse.Namespace:
    try:
        return PARSERS[program]().parse_args(arguments)
    except SystemExit as exc:
        raise AssertionError(f"`{program} {shlex.join(arguments)}` does not parse") from exc


def _known_flags() -> set[str]:
    flags: set[str] = set()
    for build in PARSERS.values():
        parsers = [build()]
        while parsers:
            parser = parsers.pop()
            for action in parser._actions:
                flags.update(action.option_strings)
                if isinstance(action, argparse._SubParsersAction):
                    parsers.extend(action.choices.values())
    return flags


def test_the_two_set_up_commands_are_exactly_these() -> None:
    sh = list(_blocks(README, "sh"))
    assert sh[0].strip() == INSTALL_AND_DEMO
    assert sh[1].strip() == INSTALL_AND_TEST
    assert README.index("## Set-up in two commands") < README.index(INSTALL_AND_DEMO)


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_command_shown_parses(name: str) -> None:
    shown = list(_invocations(DOCS[name]))
    assert shown, "the page shows no command"
    for program, arguments in shown:
        args = _parse(program, arguments)
        assert callable(getattr(args, "run", None)) or program == "agentteam-replay", arguments


def test_the_readme_runs_every_subcommand() -> None:
    shown = {(program, arguments[0]) for program, arguments in _invocations(README) if arguments}
    for sub in ("demo", "serve", "runtime"):
        assert ("agentteam-bridge", sub) in shown, sub
    for sub in (
        "verify",
        "calls",
        "show",
        "idempotency",
        "deprecations",
        "audit",
        "rerun",
        "export",
        "key",
        "prune",
        "prove",
        "check-proof",
    ):
        assert ("agentteam-replay", sub) in shown, sub


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_flag_mentioned_exists(name: str) -> None:
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", DOCS[name]))
    assert mentioned - _known_flags() - FOREIGN_FLAGS == set()


def _client_configs() -> Iterator[tuple[str, list[str], dict[str, str]]]:
    for body in _blocks(README + CLIENTS, "json"):
        document = json.loads(body)
        for server in document.get("mcpServers", {}).values():
            yield server["command"], server["args"], server.get("env", {})
    for body in _blocks(CLIENTS, "toml"):
        for server in tomllib.loads(body)["mcp_servers"].values():
            yield server["command"], server["args"], server.get("env", {})


def test_client_configurations_launch_serve_with_known_variables() -> None:
    configs = list(_client_configs())
    assert len(configs) == 4
    for command, arguments, env in configs:
        assert os.path.basename(command) == "agentteam-bridge"
        assert _parse("agentteam-bridge", arguments).command == "serve"
        assert set(env) <= set(_variables_the_bridge_reads())


def _variables_the_bridge_reads() -> set[str]:
    source = "\n".join(p.read_text() for p in (ROOT / "bridge").glob("*.py"))
    return set(re.findall(r"AGENTTEAM_[A-Z_]+", source))


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_environment_variable_named_is_read_by_the_bridge(name: str) -> None:
    named = set(re.findall(r"AGENTTEAM_[A-Z_]*[A-Z]", DOCS[name])) - {"AGENTTEAM_"}
    assert named - _variables_the_bridge_reads() == set()


def test_the_meta_keys_are_the_bridges() -> None:
    for text in DOCS.values():
        assert set(re.findall(r"[`\"](agentteam/[a-z_]+)[`\"]", text)) <= {
            META_RUN,
            META_CALLBACK,
            "agentteam/task",
        }
    assert f"`{META_RUN}`" in README and f"`{META_CALLBACK}`" in README


def test_the_compat_section_matches_the_migration_table() -> None:
    section = README.split("## Compatibility policies")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)`", section, re.MULTILINE)
    assert tuple(rows) == POLICIES
    assert "`hint` (default)" in section
    named = re.findall(r"`(\w+)`", section.split("and old argument spellings")[0])
    assert set(named) == set(TOOL_MIGRATIONS)


def test_files_the_docs_point_to_exist() -> None:
    for path in (
        "docs/runtime.md",
        "docs/clients.md",
        "docs/performance.md",
        "docs/protocol.md",
        "docs/transparency.md",
        "journal/datasette-metadata.json",
    ):
        assert (ROOT / path).exists(), path
        assert path in README or path.split("/")[-1] in README


KEY_FILE = "{home}/.config/agentteam-bridge/journal-signing.key"


def test_the_start_error_quoted_is_what_serve_says(tmp_path: Path) -> None:
    quoted = re.search(r"^\$ agentteam-bridge serve\n(.+)$", README, re.MULTILINE)
    assert quoted
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    # One line, even on a first start that created the journal signing key: a start names the
    # key it created only once it has started; `agentteam-replay key` names it at any time.
    assert done.stderr.strip().splitlines() == [quoted.group(1)]
    assert Path(KEY_FILE.format(home=tmp_path)).exists()


def test_the_append_only_refusal_quoted_is_the_schemas() -> None:
    schema = (ROOT / "journal" / "_schema.py").read_text()
    assert "journal is append-only: {} on " in schema
    assert "journal is append-only: DELETE on events refused" in README


def test_both_clis_print_their_version() -> None:
    from agentteam_task_bridge.bridge import __version__

    for program in PARSERS:
        module = (
            "agentteam_task_bridge.cli"
            if program == "agentteam-bridge"
            else "agentteam_task_bridge.replay._cli"
        )
        done = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout) == (0, f"{program} {__version__}\n"), done.stderr


def _help_examples() -> Iterator[tuple[str, str]]:
    """(program, line) of every example in the `--help` epilogs of both CLIs."""
    for program, build in PARSERS.items():
        parsers = [build()]
        while parsers:
            parser = parsers.pop()
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    parsers.extend(action.choices.values())
            examples = (parser.epilog or "").partition("examples:\n")[2]
            for line in examples.replace("\\\n", " ").splitlines():
                if line.startswith("  ") and not line.strip().startswith("#"):
                    yield program, line.strip()


def test_every_help_example_parses_and_none_waits_on_a_background_server() -> None:
    shown = list(_help_examples())
    assert len(shown) > 10
    for _, line in shown:
        assert not re.search(r"\$\([^)]*&\s*\)", line), f"hangs: {line}"  # $(server &) waits
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token in PARSERS:
                rest = tokens[i + 1 :]
                end = next((j for j, t in enumerate(rest) if set(t) <= set("();<>|&")), len(rest))
                _parse(token, rest[:end])


def test_the_runtime_in_the_background_example_exports_the_environment(tmp_path: Path) -> None:
    lines = [line for p, line in _help_examples() if "runtime.env" in line]
    assert lines and any(line.endswith("> runtime.env &") for line in lines), lines
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = "\n".join(line.replace("8765", str(port)) for line in dict.fromkeys(lines))
    script = script.replace(
        "agentteam-bridge", f"{shlex.quote(sys.executable)} -m agentteam_task_bridge.cli"
    )
    script += '\necho "$AGENTTEAM_API_URL"\nkill %1\n'
    done = subprocess.run(
        ["bash", "-ec", script],
        cwd=tmp_path,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=120,  # bounds a hang: the example must return on its own
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"http://127.0.0.1:{port}"


def test_the_docs_name_the_inspector_version_the_tests_run() -> None:
    from .test_inspector import INSPECTOR

    commands = [line for line in _command_lines(CLIENTS) if line.startswith("npx ")]
    assert commands and all(line.split()[1] == INSPECTOR for line in commands), commands
    assert "Node.js 22.19 or later" in CLIENTS


def _datasette(path: Path) -> int:
    """The README's Datasette command on path, asked for the highest sequence number."""
    (command,) = [line for line in _command_lines(README) if line.startswith("datasette ")]
    args = shlex.split(command)[1:]
    args = [
        str(path) if a == "journal.db" else str(ROOT / a) if a.endswith(".json") else a
        for a in args
    ]
    datasette = Path(sys.executable).with_name("datasette")
    done = subprocess.run(
        [str(datasette), *args, "--get", "/journal.json?sql=select+max(seq)+m+from+events"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)["rows"]
    return int(rows[0][0])


def test_the_datasette_command_reads_an_uncleanly_closed_journal(tmp_path: Path) -> None:
    """A writer killed mid-stream leaves its newest events in the WAL; -i would miss them."""
    path = tmp_path / "journal.db"
    writer = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "journal_helpers" / "crash_writer.py"),
            str(path),
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "ready\n"
    promised = [int(writer.stdout.readline().split()[0]) for _ in range(50)]
    writer.send_signal(signal.SIGKILL)
    writer.communicate(timeout=30)
    assert path.with_name("journal.db-wal").stat().st_size > 0
    assert _datasette(path) >= max(promised)


async def test_the_datasette_command_reads_a_live_journal(bridge: BridgeSession) -> None:
    for _ in range(3):
        await bridge.ok("task_list", {"channel": "general"})
    with journal.open_reader(bridge.journal) as reader:
        head = max(record.seq for record in reader.events())
    assert await trio.to_thread.run_sync(_datasette, bridge.journal) == head
