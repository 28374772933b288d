"""A second, independent MCP client: the official MCP Inspector in CLI mode against the bridge.

It runs when `npx` is on PATH (skipped otherwise). The Inspector is fetched by npx into npx's own
cache on first use (or into `$AGENTTEAM_NPM_CACHE` when set); that first download can take a
minute, so it has a generous timeout and the test reports how long it took. npx is asked once per
session where the pinned package's command is (each npx start costs 2-4 s of npm, most of it
waiting on the registry); every launch then runs that command, the Inspector itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal

from .bridge_harness import assert_journal_sound

# Pinned, so that an Inspector release cannot change the test under us; upgrade deliberately.
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
FIRST_LAUNCH_TIMEOUT = 300.0
LAUNCH_TIMEOUT = 90.0
CANONICAL = [
    "task_list",
    "task_get",
    "task_create",
    "task_update",
    "task_set_claim",
    "task_checkpoint",
    "task_delete",
]

pytestmark = pytest.mark.skipif(
    shutil.which("npx") is None, reason="npx (Node.js) is not installed: no MCP Inspector"
)


def _npm_env() -> dict[str, str]:
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
    if os.environ.get("AGENTTEAM_NPM_CACHE"):
        env["npm_config_cache"] = os.environ["AGENTTEAM_NPM_CACHE"]
    return env


@pytest.fixture(scope="session")
def inspector_command() -> tuple[str, float]:
    """The pinned Inspector's command, fetched by npx on first use; how long npx took."""
    script = "command -v mcp-inspector"
    started = time.perf_counter()
    try:
        done = subprocess.run(
            ["npx", "--yes", f"--package={INSPECTOR}", "-c", script],
            env=_npm_env(),
            capture_output=True,
            text=True,
            timeout=FIRST_LAUNCH_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"npx did not fetch the Inspector within {FIRST_LAUNCH_TIMEOUT:.0f} s")
    command = done.stdout.strip()
    if done.returncode != 0 or not Path(command).is_file():
        pytest.fail(f"npx found no Inspector (exit {done.returncode}): {done.stderr}")
    return command, time.perf_counter() - started


class Inspector:
    """`mcp-inspector --cli` (the package npx fetched) launching `serve --embedded` on one
    journal."""

    def __init__(self, command: str, tmp_path: Path) -> None:
        self.command = command
        self.journal = tmp_path / "journal.db"
        self.env = {**_npm_env(), "MCP_CATALOG_PATH": str(tmp_path / "inspector-catalog.json")}
        self.server_env = ["-e", f"XDG_CONFIG_HOME={tmp_path / 'config'}"]
        self.launches: list[float] = []

    def run(self, *options: str) -> tuple[int, Any, str]:
        server = [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", "--embedded"]
        command = [
            self.command,
            "--cli",
            *self.server_env,
            *options,
            "--",  # the options above are variadic: the server command follows the separator
            *server,
            "--journal",
            str(self.journal),
        ]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=LAUNCH_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Inspector did not finish within {LAUNCH_TIMEOUT:.0f} s")
        self.launches.append(time.perf_counter() - started)
        try:
            output = json.loads(done.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"the Inspector printed no JSON (exit {done.returncode}): {done.stderr}")
        return done.returncode, output, done.stderr

    def call(self, tool: str, *arguments: str) -> tuple[int, Any]:
        code, output, _ = self.run(
            "--method", "tools/call", "--tool-name", tool, "--tool-arg", *arguments
        )
        return code, output


@pytest.fixture
def inspector(
    inspector_command: tuple[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Any:
    command, fetched = inspector_command
    client = Inspector(command, tmp_path)
    yield client
    if client.launches:
        each = sum(client.launches) / len(client.launches)
        with capsys.disabled():
            print(
                f"\n[inspector] npx found it in {fetched:.1f} s (with any download); "
                f"{len(client.launches)} launch(es), {each:.1f} s each"
            )


def test_the_inspector_lists_the_seven_tools_with_portable_schemas(inspector: Inspector) -> None:
    # --strict: exit 6 on any error-severity tool-schema portability problem.
    code, output, stderr = inspector.run("--method", "tools/list", "--strict")
    assert code == 0, stderr
    tools = output["tools"]
    assert [t["name"] for t in tools] == CANONICAL
    for tool in tools:
        assert tool["inputSchema"]["type"] == "object"
        assert tool["outputSchema"]["type"] == "object"
        assert set(tool["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}


def test_the_inspector_calls_tools_and_the_journal_records_it(inspector: Inspector) -> None:
    code, created = inspector.call(
        "task_create", "channel=general", 'tasks=[{"title": "from the inspector"}]'
    )
    assert code == 0, created
    assert created["isError"] is False
    (task,) = created["structuredContent"]["data"]["tasks"]
    assert task["title"] == "from the inspector"

    # A second launch: the embedded runtime keeps its database beside the journal.
    code, listed = inspector.call("task_list", "channel=general")
    assert code == 0, listed
    assert [t["number"] for t in listed["structuredContent"]["data"]["items"]] == [task["number"]]

    code, missing = inspector.call("task_get", "channel=general", "number=99")
    assert code != 0 and missing["isError"] is True
    error = missing["structuredContent"]["error"]
    assert error["code"] == "task_not_found"
    assert error["candidates"][0]["title"] == "from the inspector"
    assert json.loads(missing["content"][0]["text"]) == missing["structuredContent"]

    assert_journal_sound(inspector.journal)
    with journal.open_reader(inspector.journal) as reader:
        sessions = [r.payload for r in reader.events(kind="session_started")]
        handshakes = [r.payload for r in reader.events(kind="session_handshake")]
    assert len(sessions) == len(handshakes) == 3  # the client is named by its handshake
    assert {h.client_name for h in handshakes} == {"inspector-cli"}  # type: ignore[union-attr]
