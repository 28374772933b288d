"""Concurrent creates never share a number; two runtime processes on one database agree."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from agentteam_task_bridge.runtime import RuntimeConfig, open_runtime

from .conftest import Api


async def test_concurrent_creates_on_one_board_get_distinct_numbers(api: Api) -> None:
    numbers: list[int] = []

    async def create(i: int) -> None:
        numbers.extend(t["number"] for t in await api.create("general", f"a{i}", f"b{i}"))

    async with trio.open_nursery() as nursery:
        for i in range(30):
            nursery.start_soon(create, i)
    assert sorted(numbers) == list(range(1, 61))


def _start_cli_runtime(db: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentteam_task_bridge.cli",
            "runtime",
            "--port",
            "0",
            "--db",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    env: dict[str, str] = {}
    while len(env) < 4:
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else "runtime exited"
        key, _, value = line.removeprefix("export ").strip().partition("=")
        env[key] = shlex.split(value)[0]
    return process, env


@pytest.fixture
def cli_runtime(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    db = tmp_path / "shared.db"
    process, env = _start_cli_runtime(db)
    try:
        yield db, env
    finally:
        # SIGTERM, not SIGINT: a suite started in the background inherits SIGINT ignored, and
        # Python then never raises KeyboardInterrupt (the runtime stopped only on Ctrl-C).
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0  # bounds a hang only


async def test_runtime_command_prints_a_working_bridge_environment(
    cli_runtime: tuple[Path, dict[str, str]],
) -> None:
    _, env = cli_runtime
    assert set(env) == {
        "AGENTTEAM_API_URL",
        "AGENTTEAM_WORKSPACE_ID",
        "AGENTTEAM_AGENT_ID",
        "AGENTTEAM_TOKEN_COMMAND",
    }
    token = (
        (await trio.run_process(env["AGENTTEAM_TOKEN_COMMAND"], shell=True, capture_stdout=True))
        .stdout.decode()
        .strip()
    )
    route = (
        f"{env['AGENTTEAM_API_URL']}/api/v1/workspaces/{env['AGENTTEAM_WORKSPACE_ID']}"
        f"/agents/{env['AGENTTEAM_AGENT_ID']}/runtime/tasks"
    )
    async with httpx.AsyncClient() as http:
        response = await http.get(
            route, params={"channel": "general"}, headers={"authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200
    assert os.stat(cli_runtime[0]).st_size > 0


async def test_two_processes_on_one_database_never_share_a_number(
    cli_runtime: tuple[Path, dict[str, str]],
) -> None:
    db, env = cli_runtime
    numbers: list[int] = []
    async with open_runtime(RuntimeConfig(db_path=str(db))) as local:
        async with (
            httpx.AsyncClient(base_url=local.url) as near,
            httpx.AsyncClient(base_url=env["AGENTTEAM_API_URL"]) as far,
        ):
            apis = [Api(near, local), Api(far, local)]  # one token table, two servers

            async def create(api: Api, i: int) -> None:
                numbers.extend(t["number"] for t in await api.create("eng", f"t{i}"))

            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(create, apis[i % 2], i)
    assert sorted(numbers) == list(range(1, 41))


def test_runtime_command_reports_a_busy_port_in_one_line(tmp_path: Path) -> None:
    with open_port() as port:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentteam_task_bridge.cli",
                "runtime",
                "--port",
                str(port),
                "--db",
                str(tmp_path / "x.db"),
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "--port" in done.stderr


class open_port:
    """Hold a listening loopback port so another process cannot bind it."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        port: int = self.sock.getsockname()[1]
        return port

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
