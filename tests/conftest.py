"""Shared fixtures: a fresh reference runtime on loopback and an HTTP client for its API."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import settings

from agentteam_task_bridge.runtime import AGENT_ID, Runtime, RuntimeConfig, open_runtime

from .bridge_harness import BridgeSession, open_bridge
from .bridge_inprocess import inprocess_session
from .pg_cluster import Cluster, ClusterUnavailable, start_cluster

# In CI a run checks a commit, so hypothesis draws the same examples every time there (a failure
# is the commit's, and reproduces); elsewhere every run explores new ones, and keeps what failed
# in .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

_SUFFIX = {
    "list": "",
    "create": "",
    "get": "/get",
    "update": "/update",
    "checkpoint": "/add-checkpoint",
    "set-claim": "/set-claim",
    "delete": "/delete",
}


class Api:
    """The seven routes of one agent, spoken over real HTTP."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        runtime: Runtime,
        agent_id: str = AGENT_ID,
        workspace_id: str | None = None,
        token: str | None = None,
    ) -> None:
        self.http = http
        self.runtime = runtime
        self.agent_id = agent_id
        self.workspace_id = workspace_id or runtime.workspace_id
        self.token = token or runtime.mint_token(agent_id, workspace_id=self.workspace_id)

    def path(self, op: str) -> str:
        return (
            f"/api/v1/workspaces/{self.workspace_id}/agents/{self.agent_id}"
            f"/runtime/tasks{_SUFFIX[op]}"
        )

    async def call(self, op: str, body: Any = None, **params: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.token}"}
        if op == "list":
            return await self.http.get(self.path(op), params=params, headers=headers)
        return await self.http.post(self.path(op), json=body, headers=headers)

    async def ok(self, op: str, body: Any = None, **params: Any) -> dict[str, Any]:
        response = await self.call(op, body, **params)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def fails(
        self, op: str, body: Any = None, *, expect: int, code: str, **params: Any
    ) -> dict[str, Any]:
        response = await self.call(op, body, **params)
        assert response.status_code == expect, response.text
        error: dict[str, Any] = response.json()["error"]
        assert error["code"] == code, error
        return error

    async def create(
        self,
        channel: str = "general",
        *titles: str,
        **extra: Any,
    ) -> list[dict[str, Any]]:
        body = {"channel": channel, "tasks": [{"title": t} for t in titles or ("a task",)], **extra}
        tasks: list[dict[str, Any]] = (await self.ok("create", body))["tasks"]
        return tasks

    def as_agent(self, agent_id: str) -> Api:
        return Api(self.http, self.runtime, agent_id, self.workspace_id)


async def admin(
    http: httpx.AsyncClient, runtime: Runtime, path: str, body: Any = None
) -> dict[str, Any]:
    assert runtime.admin_token is not None
    headers = {"x-admin-token": runtime.admin_token}
    if body is None:
        response = await http.get(f"/_admin/{path}", headers=headers)
    else:
        response = await http.post(f"/_admin/{path}", json=body, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    async with open_runtime(RuntimeConfig()) as rt:
        yield rt


@pytest.fixture
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=runtime.url, timeout=10) as client:
        yield client


@pytest.fixture
def api(http: httpx.AsyncClient, runtime: Runtime) -> Api:
    return Api(http, runtime)


@pytest.fixture
async def file_runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A runtime on a database file, so that its token command works from a subprocess."""
    async with open_runtime(RuntimeConfig(db_path=str(tmp_path / "runtime.db"))) as rt:
        yield rt


@pytest.fixture
async def bridge(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BridgeSession]:
    """A bridge session on a fresh runtime (`bridge.runtime`): the MCP session `serve` runs,
    in-process (see tests/bridge_inprocess.py); a test marked `wire` gets `agentteam-bridge
    serve` as a subprocess over stdio instead, to prove its behaviour on the wire."""
    path = tmp_path / "journal.db"
    if request.node.get_closest_marker("wire") is None:
        async with open_runtime(RuntimeConfig()) as rt, inprocess_session(rt, path) as session:
            yield session
        return
    config = RuntimeConfig(db_path=str(tmp_path / "runtime.db"))  # its token command reads it
    async with (
        open_runtime(config) as rt,
        open_bridge(rt.bridge_env(), path, runtime=rt) as session,
    ):
        yield session


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One PostgreSQL server for the session (tests/pg_cluster.py); CI fails without one."""
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL for the fleet tests: {exc}")
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A fresh, empty database on the session's server: its superuser URL."""
    return pg_cluster.create_database()


@pytest.fixture
def shipping_login(pg_url: str) -> Iterator[Callable[[], tuple[str, str]]]:
    """New shipping logins (members of ``agentteam_ship``) on a store its owner set up, each
    ``(name, URL)``; dropped with what they own after the test."""
    import psycopg

    from agentteam_task_bridge import replay

    replay.ship([], pg_url)
    made: list[str] = []

    def make() -> tuple[str, str]:
        name = f"ship_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE agentteam_ship")
        made.append(name)
        return name, pg_url.replace("postgresql://postgres@", f"postgresql://{name}@")

    yield make
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


@pytest.fixture
def mallory(shipping_login: Callable[[], tuple[str, str]]) -> str:
    """The URL of a new shipping login on a store its owner set up (the insider)."""
    return shipping_login()[1]
