"""The HTTP boundary: routes, malformed bodies, size limits and fault injection."""

from __future__ import annotations

import httpx
import pytest
import trio

from agentteam_task_bridge.runtime import Runtime

from .conftest import Api, admin


async def test_only_the_seven_routes_exist(api: Api) -> None:
    headers = {"authorization": f"Bearer {api.token}"}
    base = api.path("list")
    for method, suffix, status in (
        ("GET", "/get", 405),
        ("POST", "/resolve", 404),
        ("DELETE", "", 405),
        ("GET", "/search", 404),
    ):
        response = await api.http.request(method, base + suffix, headers=headers)
        assert response.status_code == status, (method, suffix)
    response = await api.http.get("/api/v1/workspaces/ws_local/channels/general/tasks")
    assert response.status_code == 404


async def test_malformed_json_is_a_classified_400(api: Api) -> None:
    response = await api.http.post(
        api.path("get"), content=b'{"channel": ', headers={"authorization": f"Bearer {api.token}"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


async def test_wrong_types_name_the_path(api: Api) -> None:
    error = await api.fails(
        "get", {"channel": "general", "number": "1"}, expect=422, code="validation_failed"
    )
    assert error["fieldErrors"] == {"$.number": "Expected `int`, got `str`"}
    error = await api.fails("get", {"channel": "general"}, expect=422, code="validation_failed")
    assert error["fieldErrors"] == {"$.number": "required"}


async def test_oversized_bodies_are_refused(api: Api) -> None:
    big = {"channel": "general", "tasks": [{"title": "x", "description": "y" * (2 << 20)}]}
    response = await api.call("create", big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    await api.ok("list", channel="general")  # the server is fine


async def _arm(http: httpx.AsyncClient, runtime: Runtime, **spec: object) -> None:
    await admin(http, runtime, "faults", spec)


@pytest.mark.parametrize(
    ("status", "code"), [(500, "upstream_failure"), (503, "service_unavailable")]
)
async def test_injected_5xx(
    http: httpx.AsyncClient, runtime: Runtime, api: Api, status: int, code: str
) -> None:
    await _arm(http, runtime, kind="status", op="get", status=status)
    await api.fails("get", {"channel": "general", "number": 1}, expect=status, code=code)
    await api.fails("get", {"channel": "general", "number": 1}, expect=404, code="task_not_found")


async def test_injected_429_carries_retry_after(
    http: httpx.AsyncClient, runtime: Runtime, api: Api
) -> None:
    await _arm(http, runtime, kind="status", status=429, retryAfterSeconds=7)
    response = await api.call("list", channel="general")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"


async def test_injected_latency(http: httpx.AsyncClient, runtime: Runtime, api: Api) -> None:
    await _arm(http, runtime, kind="latency", op="list", delayMs=300)
    with pytest.raises(httpx.ReadTimeout):
        await api.http.get(
            api.path("list"),
            params={"channel": "general"},
            headers={"authorization": f"Bearer {api.token}"},
            timeout=0.1,
        )
    with trio.fail_after(30):  # the timed-out request took the fault (bounds a hang only)
        while runtime.faults.fired < 1:  # noqa: ASYNC110 - the runtime's own counter
            await trio.sleep(0.01)
    await api.ok("list", channel="general")
    assert runtime.faults.fired == 1  # consumed once: the next request was not delayed


async def test_injected_drop_before_and_after_commit(
    http: httpx.AsyncClient, runtime: Runtime, api: Api
) -> None:
    await _arm(http, runtime, kind="drop", op="create")
    with pytest.raises(httpx.RemoteProtocolError):
        await api.call("create", {"channel": "general", "tasks": [{"title": "lost"}]})
    assert runtime.store.stats()["tasks"] == 0
    await _arm(http, runtime, kind="drop_after_commit", op="create")
    with pytest.raises(httpx.RemoteProtocolError):
        await api.call("create", {"channel": "general", "tasks": [{"title": "committed"}]})
    assert runtime.store.stats()["tasks"] == 1


async def test_injected_malformed_body_and_forced_401(
    http: httpx.AsyncClient, runtime: Runtime, api: Api
) -> None:
    await _arm(http, runtime, kind="malformed", op="list")
    response = await api.call("list", channel="general")
    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()
    await _arm(http, runtime, kind="unauthorized", times=2)
    await api.fails("list", expect=401, code="token_expired", channel="general")
    await api.fails("get", {"channel": "general", "number": 1}, expect=401, code="token_expired")
    await api.ok("list", channel="general")
    stats = await admin(http, runtime, "stats")
    assert stats["faults"] == [] and stats["faultsFired"] == 3


async def test_faults_can_be_cleared_and_unknown_ops_refused(
    http: httpx.AsyncClient, runtime: Runtime, api: Api
) -> None:
    await _arm(http, runtime, kind="drop", times=5)
    await admin(http, runtime, "faults/clear", {})
    await api.ok("list", channel="general")
    response = await http.post(
        "/_admin/faults",
        json={"kind": "drop", "op": "search"},
        headers={"x-admin-token": runtime.admin_token or ""},
    )
    assert response.status_code == 422
