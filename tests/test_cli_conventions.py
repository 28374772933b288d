"""What every command of both CLIs keeps: no abbreviated options, `--version` everywhere, numbers
checked at start, one-line usage errors, a help that lists every command, owner-only files
whatever the umask, `--json` on the local runtime commands, and the log switches of `serve`."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentteam_task_bridge import bridge
from agentteam_task_bridge.cli import build_parser as bridge_cli_parser
from agentteam_task_bridge.replay._cli_parser import build_parser as replay_parser

PARSERS = {"agentteam-bridge": bridge_cli_parser, "agentteam-replay": replay_parser}
MODULES = {
    "agentteam-bridge": "agentteam_task_bridge.cli",
    "agentteam-replay": "agentteam_task_bridge.replay._cli",
}


def _walk(parser: argparse.ArgumentParser) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """(the words that reach it, parser) for a parser and every subcommand under it."""
    stack: list[tuple[list[str], argparse.ArgumentParser]] = [([], parser)]
    while stack:
        words, p = stack.pop()
        yield words, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    stack.append(([*words, name], child))


def _every_command() -> Iterator[tuple[str, list[str], argparse.ArgumentParser]]:
    for program, build in PARSERS.items():
        for words, parser in _walk(build()):
            yield program, words, parser


def _cli(program: str, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULES[program], *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )


def test_no_command_takes_an_abbreviated_option() -> None:
    checked = 0
    for _program, words, parser in _every_command():
        for option in parser._option_string_actions:
            if not option.startswith("--") or option in ("--help", "--version"):
                continue
            prefix = option[:-1]
            if any(o != option and o.startswith(prefix) for o in parser._option_string_actions):
                continue  # ambiguous anyway
            matched = parser._parse_optional(prefix)
            assert matched is None or matched[0] is None, (words, prefix)
            checked += 1
    assert checked >= 40  # serve, ship, calls, audit... each with several options


def test_every_command_and_subcommand_answers_version(capsys: pytest.CaptureFixture[str]) -> None:
    for program, words, parser in _every_command():
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["--version"])
        assert exit_.value.code == 0, words
        assert capsys.readouterr().out == f"{program} {bridge.__version__}\n", words


def test_serve_version_as_readme_shows_it() -> None:
    done = _cli("agentteam-bridge", "serve", "--version")
    assert (done.returncode, done.stdout) == (0, f"agentteam-bridge {bridge.__version__}\n")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["serve", "--upstream-timeout", "0"], "--upstream-timeout"),
        (["serve", "--upstream-timeout", "-1"], "--upstream-timeout"),
        (["serve", "--upstream-timeout", "nan"], "--upstream-timeout"),
        (["serve", "--upstream-timeout", "inf"], "--upstream-timeout"),
        (["serve", "--upstream-keepalive", "0"], "--upstream-keepalive"),
        (["serve", "--journal-max-bytes", "0"], "--journal-max-bytes"),
        (["serve", "--journal-max-bytes", "1.5"], "--journal-max-bytes"),
        (["runtime", "--port", "70000"], "--port"),
        (["runtime", "--port", "-1"], "--port"),
        (["runtime", "--token-ttl", "nan"], "--token-ttl"),
        (["serve", "--statu"], "--statu"),
        (["serve", "--log-level", "loud"], "--log-level"),
        (["serve", "--log-format", "xml"], "--log-format"),
    ],
)
def test_a_bad_number_or_flag_is_one_line_and_exit_2(args: list[str], named: str) -> None:
    done = _cli("agentteam-bridge", *args, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("program", "args", "named", "value"),
    [
        ("agentteam-bridge", ["serve", "--retain-payloads", "-1"], "--retain-payloads", "-1"),
        ("agentteam-bridge", ["serve", "--upstream-timeout", "0"], "--upstream-timeout", "0"),
        ("agentteam-replay", ["calls", "j.db", "--limit", "0"], "--limit", "0"),
        ("agentteam-replay", ["deprecations", "j.db", "--gate-days", "x"], "--gate-days", "x"),
        ("agentteam-replay", ["report", "j.db", "--stories", "100001"], "--stories", "100001"),
        (
            "agentteam-replay",
            ["erase", "j.db", "--older-than", "-2", "--reason", "r"],
            "--older",
            "-2",
        ),
        ("agentteam-replay", ["prune", "j.db", "--older-than", "1e9"], "--older-than", "1e9"),
        (
            "agentteam-replay",
            ["ship", "--to", "postgresql://h/d", "--interval", "0"],
            "--interval",
            "0",
        ),
        (
            "agentteam-replay",
            ["ship", "--to", "postgresql://h/d", "--batch-size", "0"],
            "--batch",
            "0",
        ),
    ],
)
def test_every_bad_number_names_its_option_and_the_value_given(
    program: str, args: list[str], named: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One number type for both commands (`bridge.number_type`): the refusal is one line that
    names the option and the value, whichever option and whichever way the value is wrong."""
    with pytest.raises(SystemExit) as stopped:
        PARSERS[program]().parse_args(args)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2
    assert named in err and repr(value) in err, err


def test_a_bad_log_setting_in_the_environment_is_refused_at_start() -> None:
    env = {**os.environ, "AGENTTEAM_LOG_LEVEL": "chatty"}
    done = _cli("agentteam-bridge", "serve", "--embedded", env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "'chatty' is not a log level" in done.stderr


@pytest.mark.parametrize("program", list(PARSERS))
def test_help_lists_every_command(program: str) -> None:
    text = _cli(program, "--help").stdout
    commands = [words[0] for _p, words, _ in _every_command() if _p == program and len(words) == 1]
    assert len(commands) >= 3
    for name in commands:
        assert f"\n    {name}" in text, name


def test_every_file_a_command_creates_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    """Each command that writes, run under umask 0 into folders that do not exist yet; then
    every folder below tmp_path is 0700 and every file 0600."""
    root = tmp_path / "made"
    env = {
        **os.environ,
        "HOME": str(root / "home"),
        "XDG_DATA_HOME": str(root / "data" / "x"),
        "XDG_CONFIG_HOME": str(root / "config" / "x"),
        "PATH": "/usr/bin:/bin",  # no `claude`: install writes the file itself
    }
    journal = root / "demo" / "x" / "journal.db"
    commands = [
        ("agentteam-bridge", "demo", "--journal", str(journal)),
        ("agentteam-bridge", "runtime", "board", "list", "--db", str(root / "rt" / "x" / "r.db")),
        ("agentteam-bridge", "install", "cursor"),
        ("agentteam-replay", "key", "--create"),
        ("agentteam-replay", "audit", str(journal), "--csv", str(root / "csv" / "x")),
        ("agentteam-replay", "export", str(journal), "--output", str(root / "out" / "x" / "o")),
    ]
    for program, *args in commands:
        done = _cli(program, *args, env=env, preexec_fn=lambda: os.umask(0))
        assert done.returncode == 0, (args, done.stderr[-800:])
    serve = _cli(
        "agentteam-bridge",
        "serve",
        "--embedded",
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: os.umask(0),
    )
    assert serve.returncode == 0, serve.stderr
    seen = 0
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
        seen += 1
    assert seen > 20


def test_local_runtime_commands_print_json(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "runtime.db"), "--json"]

    def run(*args: str) -> object:
        done = _cli("agentteam-bridge", "runtime", *args, *db)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    added = run("board", "add", "ops", "--name", "Opérations 🛠")
    assert added == {"slug": "ops", "name": "Opérations 🛠", "members": 3, "tasks": 0}
    assert {b["slug"] for b in run("board", "list")} == {"eng", "general", "ops"}  # type: ignore[attr-defined,index]
    opened = run("callback", "open", "run_1", "cb_1")
    assert opened == {
        "_meta": {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}
    }
    assert run("callback", "list") == [
        {
            "run_id": "run_1",
            "callback_effect_id": "cb_1",
            "responder": "agt_local",
            "state": "active",
        }
    ]
    done = run("callback", "complete", "run_1", "cb_1")
    assert done == {"run_id": "run_1", "callback_effect_id": "cb_1", "state": "completed"}


def _serve_stderr(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    home = {
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    done = _cli(
        "agentteam-bridge",
        "serve",
        "--embedded",
        "--journal",
        str(tmp_path / "j.db"),
        *args,
        env={**os.environ, **home, **(env or {})},
        stdin=subprocess.DEVNULL,  # EOF at once: the session starts and ends
    )
    assert done.returncode == 0 and done.stdout == "", done.stderr
    return done.stderr


def test_serve_logs_json_lines_when_asked(tmp_path: Path) -> None:
    _serve_stderr(tmp_path)  # the first start announces the new signing key; not a log line
    for args, env in ((["--log-format", "json", "-v"], {}), ([], {"AGENTTEAM_LOG_FORMAT": "json"})):
        lines = [json.loads(line) for line in _serve_stderr(tmp_path, *args, env=env).splitlines()]
        assert lines and all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
        start = [line for line in lines if line["logger"] == "agentteam.bridge.start"]
        assert len(start) == 1 and "journals to" in start[0]["message"]


def test_serve_log_level_sets_what_reaches_stderr(tmp_path: Path) -> None:
    _serve_stderr(tmp_path)
    default = _serve_stderr(tmp_path)
    assert default.startswith("agentteam-bridge serve: session s") and "journals to" in default
    assert len(default.splitlines()) == 1
    assert _serve_stderr(tmp_path, "--log-level", "error") == ""
    verbose = _serve_stderr(tmp_path, "-vv")
    assert " DEBUG " in verbose


# --- shell completion --------------------------------------------------------------------------


@pytest.mark.parametrize("program", list(PARSERS))
def test_bash_completes_every_command_of_both_clis(program: str) -> None:
    script = _cli(program, "completion", "bash")
    assert script.returncode == 0, script.stderr
    commands = sorted(w[0] for p, w, _ in _every_command() if p == program and len(w) == 1)
    # Source it in a real bash, ask the function `complete -p` names for the first word's
    # completions, as bash does on TAB after `PROGRAM `.
    probe = f"""
source /dev/stdin
function=$(complete -p {program} | sed -E 's/.* -F ([^ ]+) .*/\\1/')
COMP_WORDS=({program} ""); COMP_CWORD=1; COMP_LINE="{program} "; COMP_POINT=${{#COMP_LINE}}
"$function" {program} "" {program}
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(
        ["bash", "-c", probe], input=script.stdout, capture_output=True, text=True, timeout=30
    )
    offered = set(done.stdout.split())
    assert set(commands) <= offered, (done.stderr, sorted(offered))


@pytest.mark.parametrize("shell", ["zsh", "fish"])
@pytest.mark.parametrize("program", list(PARSERS))
def test_zsh_and_fish_read_the_completion_script(program: str, shell: str, tmp_path: Path) -> None:
    import shutil

    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (.ci/run installs it)")
    script = _cli(program, "completion", shell)
    assert script.returncode == 0 and program in script.stdout
    path = tmp_path / f"completion.{shell}"
    path.write_text(script.stdout)
    check = [shell, "-n", str(path)] if shell == "zsh" else [shell, "--no-execute", str(path)]
    done = subprocess.run(check, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    for name in (
        ("serve", "install", "doctor") if program == "agentteam-bridge" else ("verify", "ship")
    ):
        assert name in script.stdout


def test_writing_to_a_device_leaves_its_mode_alone(tmp_path: Path) -> None:
    """Owner-only applies to files a command creates: ``export -o /dev/null`` writes there and
    never chmods it (a 0600 /dev/null breaks every other user of the machine)."""
    journal = tmp_path / "j.db"
    assert _cli("agentteam-bridge", "demo", "--journal", str(journal)).returncode == 0
    before = os.stat("/dev/null").st_mode
    done = _cli("agentteam-replay", "export", str(journal), "--output", "/dev/null")
    assert done.returncode == 0, done.stderr
    assert os.stat("/dev/null").st_mode == before
