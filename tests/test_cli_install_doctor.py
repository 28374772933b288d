"""`agentteam-bridge install CLIENT` against a temporary HOME, and `doctor` on a good and a
broken set-up (the reference runtime over real HTTP, the real token command)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

CLIENTS = {  # client: (its file under HOME, the key holding its servers)
    "claude-code": (".claude.json", "mcpServers"),
    "claude-desktop": (".config/Claude/claude_desktop_config.json", "mcpServers"),
    "cursor": (".cursor/mcp.json", "mcpServers"),
    "vscode": (".config/Code/User/mcp.json", "servers"),
    "codex": (".codex/config.toml", "mcp_servers"),
}
BRIDGE = [sys.executable, "-m", "agentteam_task_bridge.cli"]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTTEAM_", "XDG_"))}
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    # No `claude` on PATH unless a test puts one in home/bin.
    env |= {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", **extra}
    env.pop("CODEX_HOME", None)
    return env


def _install(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BRIDGE, "install", *args],
        env=_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.umask(0),
    )


def _servers(path: Path, key: str) -> dict[str, Any]:
    text = path.read_text()
    document = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    servers: dict[str, Any] = document[key]
    return servers


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_dry_run_prints_the_change_and_writes_nothing(tmp_path: Path, client: str) -> None:
    done = _install(tmp_path, client, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"+++ {tmp_path / CLIENTS[client][0]}" in done.stdout
    assert "serve" in done.stdout and "--embedded" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


@pytest.mark.parametrize("client", list(CLIENTS))
def test_install_merges_refuses_a_different_server_and_forces(tmp_path: Path, client: str) -> None:
    relative, key = CLIENTS[client]
    path = tmp_path / relative
    done = _install(tmp_path, client)
    assert done.returncode == 0, done.stderr
    (entry,) = _servers(path, key).values()
    assert Path(entry["command"]).is_absolute() and entry["args"][-2:] == ["serve", "--embedded"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # whatever the umask (0 here)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # The same again changes nothing, byte for byte.
    written = path.read_bytes()
    again = _install(tmp_path, client)
    assert again.returncode == 0 and "already registered" in again.stdout
    assert path.read_bytes() == written
    # Another server of the same name is refused, unless --force; other servers are kept.
    other = {"command": "/opt/other/server", "args": ["--x"]}
    if client == "codex":
        path.write_text(
            'model = "o3"\n\n[mcp_servers.keep]\ncommand = "keep"\nargs = []\n\n'
            '[mcp_servers.agentteam-tasks]\ncommand = "/opt/other/server"\nargs = ["--x"]\n'
        )
    else:
        path.write_text(json.dumps({"theme": "dark", key: {"keep": {}, "agentteam-tasks": other}}))
    before = path.read_text()
    refused = _install(tmp_path, client, "--compat", "strict")  # a different entry
    assert refused.returncode == 1 and "--force" in refused.stderr and path.read_text() == before
    refused = _install(tmp_path, client)
    assert refused.returncode == 1 and path.read_text() == before
    forced = _install(tmp_path, client, "--force")
    assert forced.returncode == 0, forced.stderr
    servers = _servers(path, key)
    assert set(servers) == {"keep", "agentteam-tasks"}
    assert servers["agentteam-tasks"]["args"][-1] == "--embedded"
    document = path.read_text()
    assert ('model = "o3"' in document) if client == "codex" else ('"theme": "dark"' in document)


def test_install_from_env_writes_the_real_servers_environment_never_a_token(
    tmp_path: Path,
) -> None:
    real = {
        "AGENTTEAM_API_URL": "https://agentteam.example.com",
        "AGENTTEAM_WORKSPACE_ID": "ws_1",
        "AGENTTEAM_AGENT_ID": "agt_1",
        "AGENTTEAM_TOKEN_COMMAND": "agentteam auth token --agent agt_1",
    }
    done = _install(tmp_path, "codex", "--from-env", **real)
    assert done.returncode == 0, done.stderr
    (entry,) = _servers(tmp_path / CLIENTS["codex"][0], "mcp_servers").values()
    assert entry["env"] == real and "--embedded" not in entry["args"]
    token = "atk_" + "x" * 40
    refused = _install(tmp_path, "cursor", "--from-env", **real, AGENTTEAM_TOKEN=token)
    assert refused.returncode == 1 and "AGENTTEAM_TOKEN_COMMAND" in refused.stderr
    assert token[:12] not in refused.stderr and not (tmp_path / ".cursor").exists()


def test_install_claude_code_runs_claude_mcp_add_when_it_is_on_path(tmp_path: Path) -> None:
    log = tmp_path / "claude.args"
    claude = tmp_path / "bin" / "claude"
    _env(tmp_path)  # makes bin/
    claude.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    claude.chmod(0o755)
    shown = _install(tmp_path, "claude-code", "--dry-run")
    assert shown.returncode == 0 and "mcp add --scope user agentteam-tasks --" in shown.stdout
    assert not log.exists()
    done = _install(tmp_path, "claude-code")
    assert done.returncode == 0, done.stderr
    (line,) = log.read_text().splitlines()
    assert line.startswith("mcp add --scope user agentteam-tasks -- /")
    assert line.endswith("serve --embedded")


def test_the_registered_command_starts_the_bridge(tmp_path: Path) -> None:
    assert _install(tmp_path, "cursor").returncode == 0
    (entry,) = _servers(tmp_path / CLIENTS["cursor"][0], "mcpServers").values()
    data = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    done = subprocess.run(
        [entry["command"], *entry["args"]],
        env=_env(tmp_path, **data),
        stdin=subprocess.DEVNULL,  # EOF: the session starts and ends
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "journals to" in done.stderr, done.stderr


async def _doctor(home: Path, env: dict[str, str], *args: str) -> tuple[int, list[str]]:
    data = {"XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "cfg")}
    done = await trio.run_process(
        [*BRIDGE, "doctor", *args],
        env=_env(home, **data, **env),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode().splitlines()


async def test_doctor_passes_a_good_set_up_and_journals_nothing(
    tmp_path: Path, file_runtime: Runtime
) -> None:
    code, lines = await _doctor(tmp_path, file_runtime.bridge_env())
    assert code == 0, lines
    assert [line.split(":")[0] for line in lines] == [
        "ok   configuration",
        "ok   credential",
        "ok   API",
        "ok   journal",
        "ok   signing key",
    ]
    assert not (tmp_path / "data").exists() and not (tmp_path / "cfg").exists()
    token = file_runtime.mint_token(file_runtime.agent_id)
    assert token[:12] not in "\n".join(lines)
    embedded_code, embedded = await _doctor(tmp_path, {}, "--embedded")
    assert embedded_code == 0 and embedded[0].startswith("ok   configuration: --embedded")


async def test_doctor_names_each_broken_piece_and_exits_1(
    tmp_path: Path, file_runtime: Runtime
) -> None:
    key = tmp_path / "cfg" / "agentteam-bridge" / "journal-signing.key"
    journal.load_key(key)  # created 0600 ...
    key.chmod(0o644)  # ... and opened up by someone
    env = file_runtime.bridge_env() | {"AGENTTEAM_API_URL": "http://127.0.0.1:1"}
    env["AGENTTEAM_TOKEN_COMMAND"] = "false"
    code, lines = await _doctor(tmp_path, env)
    assert code == 1
    failed = {line.split(":")[0].removeprefix("FAIL ") for line in lines if line.startswith("FAIL")}
    assert failed == {"credential", "API", "signing key"}, lines
    assert any("chmod 600" in line for line in lines)
    assert any("Connection refused" in line or "cannot connect" in line for line in lines)
