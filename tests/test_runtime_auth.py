"""Bearer tokens are bound to one workspace and agent, expire, and can be minted afresh."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
import trio

from agentteam_task_bridge.runtime import OTHER_AGENT_ID, Runtime, RuntimeConfig, open_runtime

from .conftest import Api, admin


async def test_missing_token_is_unauthorized(api: Api) -> None:
    response = await api.http.post(api.path("get"), json={"channel": "general", "number": 1})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


async def test_unknown_token_is_unauthorized(api: Api) -> None:
    api.token = "atk_not-a-real-token"
    await api.fails("list", expect=401, code="unauthorized", channel="general")


async def test_token_of_another_agent_is_refused(api: Api) -> None:
    other = api.as_agent(OTHER_AGENT_ID)
    api.token = other.token
    await api.fails("list", expect=403, code="token_scope_mismatch", channel="general")


async def test_token_of_another_workspace_is_refused(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    await admin(http, runtime, "workspaces", {"id": "ws_other", "name": "Other"})
    await admin(
        http,
        runtime,
        "members",
        {"workspaceId": "ws_other", "id": "agt_x", "handle": "@x", "kind": "agent"},
    )
    foreign = Api(http, runtime, "agt_x", "ws_other")
    mine = Api(http, runtime)
    mine.token = foreign.token
    await mine.fails("list", expect=403, code="token_scope_mismatch", channel="general")


class _ShiftedClock:
    """The runtime store's `time`, moved forward on demand: expiry without a sleep or a race."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead


async def test_token_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentteam_task_bridge.runtime import _tokens

    clock = _ShiftedClock()
    monkeypatch.setattr(_tokens, "time", clock)
    async with open_runtime(RuntimeConfig(token_ttl_seconds=60)) as rt:
        async with httpx.AsyncClient(base_url=rt.url) as http:
            api = Api(http, rt)
            await api.ok("list", channel="general")
            clock.ahead = 61
            await api.fails("list", expect=401, code="token_expired", channel="general")
            api.token = rt.mint_token()
            await api.ok("list", channel="general")


async def test_admin_mints_tokens(http: httpx.AsyncClient, runtime: Runtime) -> None:
    minted = await admin(
        http,
        runtime,
        "tokens",
        {"workspaceId": runtime.workspace_id, "agentId": runtime.agent_id, "ttlSeconds": 60},
    )
    api = Api(http, runtime, token=minted["token"])
    await api.ok("list", channel="general")


async def test_admin_surface_is_hidden_without_the_admin_token(http: httpx.AsyncClient) -> None:
    response = await http.get("/_admin/stats")
    assert response.status_code == 404
    response = await http.get("/_admin/stats", headers={"x-admin-token": "guess"})
    assert response.status_code == 404


async def test_token_command_mints_a_token_the_server_accepts(tmp_path: object) -> None:
    db = f"{tmp_path}/rt.db"
    async with open_runtime(RuntimeConfig(db_path=db)) as rt:
        command = rt.bridge_env()["AGENTTEAM_TOKEN_COMMAND"]
        done = await trio.run_process(command, shell=True, capture_stdout=True)
        token = done.stdout.decode().strip()
        assert token.startswith("atk_")
        async with httpx.AsyncClient(base_url=rt.url) as http:
            await Api(http, rt, token=token).ok("list", channel="general")


def test_token_command_fails_in_one_line_for_an_unknown_agent(tmp_path: object) -> None:
    db = f"{tmp_path}/rt.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentteam_task_bridge.runtime",
            "mint-token",
            "--db",
            db,
            "--workspace",
            "ws_local",
            "--agent",
            "agt_nobody",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
