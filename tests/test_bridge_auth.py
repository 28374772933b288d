"""Credentials through the real bridge: refresh-once on 401, no fallback, start-up errors.

The token command's refresh and one start-up error run `serve` as a subprocess; the other token
sources and start-up errors run in-process, from the same environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentteam_task_bridge.runtime import (
    OTHER_AGENT_ID,
    FaultSpec,
    Runtime,
    RuntimeConfig,
    open_runtime,
)

from .bridge_harness import bridge_command, open_bridge
from .bridge_inprocess import inprocess_session, serve_inprocess


async def test_expired_tokens_are_refreshed_by_the_token_command(tmp_path: Path) -> None:
    async with open_runtime(RuntimeConfig(db_path=str(tmp_path / "rt.db"))) as rt:
        async with open_bridge(rt.bridge_env(), tmp_path / "j.db", runtime=rt) as bridge:
            await bridge.ok("task_list", {"channel": "general"})
            # The runtime answers the next request `token_expired` (as it would once the TTL
            # ran out; a fault instead of a sleep, so no clock decides the outcome).
            rt.faults.arm(FaultSpec(kind="unauthorized"))
            await bridge.ok("task_list", {"channel": "general"})
        assert rt.faults.fired == 1


async def test_token_file_is_reread_on_401(tmp_path: Path) -> None:
    async with open_runtime(RuntimeConfig(db_path=str(tmp_path / "rt.db"))) as rt:
        token_file = tmp_path / "token"
        token_file.write_text("not-yet")
        env = {**rt.bridge_env(), "AGENTTEAM_TOKEN_FILE": str(token_file)}
        del env["AGENTTEAM_TOKEN_COMMAND"]
        async with inprocess_session(rt, tmp_path / "j.db", env=env) as bridge:
            token_file.write_text(rt.mint_token())  # read at the first call
            await bridge.ok("task_list", {"channel": "general"})
            token_file.write_text(rt.mint_token())
            rt.faults.arm(FaultSpec(kind="unauthorized"))  # the first token "expired"
            await bridge.ok("task_list", {"channel": "general"})
        assert rt.faults.fired == 1


async def test_a_static_token_is_not_replayed_after_a_401(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    env = {**file_runtime.bridge_env(), "AGENTTEAM_TOKEN": file_runtime.mint_token()}
    del env["AGENTTEAM_TOKEN_COMMAND"]
    async with inprocess_session(file_runtime, tmp_path / "j.db", env=env) as bridge:
        file_runtime.faults.arm(FaultSpec(kind="unauthorized", times=5))
        error = await bridge.fails("task_list", {"channel": "general"}, code="unauthorized")
        assert error["retryable"] is False
        assert file_runtime.faults.fired == 1


async def test_a_401_storm_ends_in_unauthorized_after_one_replay(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    async with inprocess_session(file_runtime, tmp_path / "j.db") as bridge:
        file_runtime.faults.arm(FaultSpec(kind="unauthorized", times=50))
        await bridge.fails(
            "task_create", {"channel": "general", "tasks": [{"title": "x"}]}, code="unauthorized"
        )
        assert file_runtime.faults.fired == 2
        assert file_runtime.store.stats()["tasks"] == 0


async def test_a_token_of_another_agent_is_refused_not_swapped(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    env = {**file_runtime.bridge_env(), "AGENTTEAM_TOKEN": file_runtime.mint_token(OTHER_AGENT_ID)}
    del env["AGENTTEAM_TOKEN_COMMAND"]
    async with inprocess_session(file_runtime, tmp_path / "j.db", env=env) as bridge:
        await bridge.fails("task_list", {"channel": "general"}, code="credential_mismatch")


def _serve(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bridge_command("--journal", str(tmp_path / "j.db")),
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "XDG_CONFIG_HOME": str(tmp_path),
            **env,
        },
        input="",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


MISSING = [
    ({}, "AGENTTEAM_API_URL"),
    ({"AGENTTEAM_API_URL": "http://127.0.0.1:9"}, "AGENTTEAM_WORKSPACE_ID"),
    (
        {
            "AGENTTEAM_API_URL": "http://127.0.0.1:9",
            "AGENTTEAM_WORKSPACE_ID": "ws",
            "AGENTTEAM_AGENT_ID": "agt",
        },
        "AGENTTEAM_TOKEN_COMMAND",
    ),
    (
        {
            "AGENTTEAM_API_URL": "http://127.0.0.1:9",
            "AGENTTEAM_WORKSPACE_ID": "ws",
            "AGENTTEAM_AGENT_ID": "agt",
            "AGENTTEAM_TOKEN": "t",
        },
        "cannot reach",
    ),
]


@pytest.mark.parametrize(("env", "mentioned"), MISSING, ids=[m for _, m in MISSING])
def test_missing_context_fails_at_start_in_one_clear_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], env: dict[str, str], mentioned: str
) -> None:
    """In-process through the CLI's `main`; the last case also as the console script."""
    runs = [serve_inprocess(tmp_path, capfd, "--journal", str(tmp_path / "j.db"), env=env)]
    if mentioned == "cannot reach":
        runs.append(_serve(env, tmp_path))
    for done in runs:
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        if lines[0].startswith("agentteam: created the journal signing key"):
            lines = lines[1:]  # the first start on this machine announces its key, once
        assert len(lines) == 1 and mentioned in lines[0], done.stderr


def test_an_unwritable_journal_fails_at_start_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run(
        [*bridge_command("--journal", str(blocker / "j.db")), "--embedded"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        input="",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "journal" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_serve_help_has_examples() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "examples:" in done.stdout and "--embedded" in done.stdout
