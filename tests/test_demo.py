"""`agentteam-bridge demo` end to end: a subprocess, its output, its exit status, its journal."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agentteam_task_bridge import journal
from agentteam_task_bridge.cli import _demo, _journey

from .bridge_harness import assert_journal_sound

KEY_LINES = [
    "connected: agentteam-tasks",
    "ok seven canonical tools",
    "error stale_update",
    "ok sees the teammate's edit",
    "Reused 1 task(s) on #general: 6.",
    "ok reused: true, the same #6; 6 tasks before and after",
    "error deprecated_tool",
    "ok 6 tasks, subtasks included",
    "Deleted 1 on #general; promoted 4, 5",
    "ok verify: ",
    "deprecated: list_tasks -> task_list, 1x by agentteam-demo",
    "errors: deprecated_tool (list_tasks), stale_update (task_update)",
    "Demo passed: 17 steps",
]


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TMPDIR": str(tmp_path),
        "COLUMNS": "200",  # a wide terminal must still get at most 80 columns
    }


def _demo_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.cli", "demo", *args],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _printed_journal(stdout: str) -> Path:
    match = re.search(r"^  journal +(\S+)$", stdout, re.MULTILINE)
    assert match, stdout
    return Path(match.group(1))


def test_the_demo_walks_every_tool_and_verifies_its_journal(tmp_path: Path) -> None:
    done = _demo_run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in KEY_LINES:
        assert line in done.stdout, line
    path = _printed_journal(done.stdout)
    assert path.is_relative_to(tmp_path) and path.name == "journal.db"
    assert_journal_sound(path)
    assert (path.parent / "journal.db.checkpoint.json").exists()
    assert not (path.parent / "runtime.db").exists(), "the scratch runtime is cleaned up"
    assert "\x1b[" not in done.stdout, "no colours when stdout is not a terminal"
    # At most 80 columns, but for lines naming the journal: kept whole so they can be copied.
    long = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert all(str(path) in line for line in long), long
    assert done.stderr == ""


def test_every_tool_and_every_compat_path_is_in_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "j" / "journal.db"
    assert _demo_run(tmp_path, "--journal", str(path)).returncode == 0
    with journal.open_reader(path) as reader:
        tools = {r.gen_ai_tool_name for r in reader.events(kind="call_received")}
        injected = [
            f.name
            for r in reader.events(kind="context_injected")
            for f in r.payload.fields  # type: ignore[attr-defined]
        ]
        used = [r.payload.old_name for r in reader.events(kind="deprecated_usage")]  # type: ignore[attr-defined]
    assert tools >= {
        "task_list",
        "task_get",
        "task_create",
        "task_update",
        "task_set_claim",
        "task_checkpoint",
        "task_delete",
        "list_tasks",
    }
    assert injected.count("callback_effect_id") == 2
    assert "list_tasks" in used


def test_a_second_run_appends_to_the_same_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    for _ in range(2):
        done = _demo_run(tmp_path, "--journal", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
    with journal.open_reader(path) as reader:
        assert len(list(reader.events(kind="session_started"))) == 2
    assert_journal_sound(path)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("a-file/journal.db", "as the journal's directory"),
        (".", "is a directory"),
    ],
)
def test_an_unusable_journal_path_is_one_line_and_exit_2(
    tmp_path: Path, where: str, says: str
) -> None:
    (tmp_path / "a-file").write_text("")
    done = _demo_run(tmp_path, "--journal", str(tmp_path / where))
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("agentteam-bridge demo: ") and says in line
    assert "--journal PATH" in line


def test_a_bridge_that_cannot_start_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config").write_text("")  # the journal key cannot be created under a file
    done = _demo_run(tmp_path, "--journal", str(tmp_path / "journal.db"))
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("agentteam-bridge demo: the bridge did not start: ")
    assert "cannot create the key directory" in line and "Traceback" not in done.stdout


def test_a_step_that_breaks_the_contract_fails_with_what_was_expected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(_journey, "TOOLS", {"task_list": None})
    out = io.StringIO()
    code = _demo.run_demo(
        _demo.DemoConfig(journal_path=tmp_path / "journal.db"), Console(file=out, width=80)
    )
    assert code == 1
    text = out.getvalue()
    assert "FAIL at step 1: expected exactly the seven tools ['task_list']" in text
    assert "got: " in text and "Demo passed" not in text
    assert_journal_sound(tmp_path / "journal.db")
