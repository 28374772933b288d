"""Representative cells of the retryability table through the real bridge, over real HTTP, with
the reference runtime injecting the fault; in-doubt answers are listed by `agentteam-replay`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge.testing import bridge_over
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import BridgeSession, open_bridge
from .bridge_inprocess import minted_tokens

META = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}


async def _error(bridge: BridgeSession, tool: str, args: dict[str, Any], **kw: Any) -> Any:
    result = await bridge.call(tool, args, kw.get("meta"))
    assert result.is_error, result.structured_content
    schema = next(t.output_schema for t in bridge.tools if t.name == tool)
    assert schema is not None
    jsonschema.validate(result.structured_content, schema)
    return result.structured_content["error"]  # type: ignore[index]


async def test_faults_answer_their_cells_and_in_doubt_calls_are_listed(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    rt = file_runtime
    rt.store.open_callback(rt.workspace_id, "run_1", "cb_1", rt.agent_id)
    path = tmp_path / "j.db"
    async with open_bridge(rt.bridge_env(), path, runtime=rt) as bridge:
        created = await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "a"}]})
        seen = created["data"]["tasks"][0]["updated_at"]

        # A 403 naming the bridge's own retryable code is not passed through as retryable.
        rt.faults.arm(FaultSpec(kind="status", status=403, op="list"))
        error = await _error(bridge, "task_list", {"channel": "general"})
        assert (error["code"], error["retryable"]) == ("upstream_rejected", False)

        # A 504 on a mutation may have committed: in doubt, not "not processed".
        rt.faults.arm(FaultSpec(kind="status", status=504, op="update"))
        update = {"channel": "general", "number": 1, "patch": {"title": "b"}}
        error = await _error(bridge, "task_update", update)
        assert (error["code"], error["retryable"]) == ("outcome_unknown", False)
        assert error["suggested_action"]["tool"] == "task_get"

        # The desired-state setter after a lost answer is safe to repeat, and repeating works.
        claim = {"channel": "general", "numbers": [1], "claimed": True}
        rt.faults.arm(FaultSpec(kind="drop_after_commit", op="set-claim"))
        error = await _error(bridge, "task_set_claim", claim)
        assert (error["code"], error["retryable"]) == ("outcome_unknown", True)
        assert error["suggested_action"] == {"tool": "task_set_claim", "arguments": claim}
        await bridge.ok("task_set_claim", claim)

        # A keyed create after a 500: in doubt, and retrying with the same key is safe.
        keyed = {"channel": "general", "tasks": [{"title": "once"}], "idempotency_key": "k1"}
        rt.faults.arm(FaultSpec(kind="status", status=500, op="create"))
        error = await _error(bridge, "task_create", keyed, meta=META)
        assert (error["code"], error["retryable"]) == ("outcome_unknown", True)
        assert error["suggested_action"] == {"tool": "task_create", "arguments": keyed}
        await bridge.ok("task_create", keyed, meta=META)

        # A 429: whole seconds.
        rt.faults.arm(FaultSpec(kind="status", status=429, retry_after_seconds=2, op="get"))
        error = await _error(bridge, "task_get", {"channel": "general", "number": 1})
        assert error["retry_after_seconds"] == 2 and type(error["retry_after_seconds"]) is int

        # stale_update names the fields as the model knows them.
        stale = {**update, "expected_updated_at": seen}
        error = await _error(bridge, "task_update", stale)
        assert error["code"] == "stale_update"
        assert error["field_errors"] == {
            "$.expected_updated_at": "does not match the task's updated_at"
        }
        assert "updatedAt" not in json.dumps(error)

    # The key of the bridge that wrote it (open_bridge gives it this XDG_CONFIG_HOME).
    signing_key = path.parent / "config" / "agentteam-bridge" / "journal-signing.key"
    verified = replay.verify([path], key=journal.load_key(signing_key, create=False))
    assert verified.ok, verified.findings
    doubtful = {(c.tool, c.reason) for c in verified.in_doubt}
    assert doubtful == {
        ("task_update", "outcome_unknown"),
        ("task_set_claim", "outcome_unknown"),
        ("task_create", "outcome_unknown"),
    }
    listed = replay.list_calls([path], replay.CallFilter(status="in_doubt"))
    assert sorted(c.tool or "" for c in listed.calls) == [
        "task_create",
        "task_set_claim",
        "task_update",
    ]


async def test_a_static_token_echoed_back_by_the_upstream_never_reaches_the_model(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    token = file_runtime.mint_token()
    env = {**file_runtime.bridge_env(), "AGENTTEAM_TOKEN": token}
    del env["AGENTTEAM_TOKEN_COMMAND"]
    path = tmp_path / "j.db"
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        file_runtime.faults.arm(FaultSpec(kind="echo_credentials", op="list"))
        result = await bridge.call("task_list", {"channel": "general"})
        assert result.is_error
        assert token not in json.dumps(result.structured_content)
        assert token not in result.content[0].text  # type: ignore[union-attr]
        error = result.structured_content["error"]  # type: ignore[index]
        assert error["code"] == "not_a_member" and "[REDACTED]" in error["message"]
        assert error["candidates"] == [{"channel": "general", "note": "[REDACTED]"}]

        # The fixed token refused: no refresh happened, and the message does not claim one.
        file_runtime.faults.arm(FaultSpec(kind="unauthorized", op="list"))
        error = await _error(bridge, "task_list", {"channel": "general"})
        assert (error["code"], error["retryable"]) == ("unauthorized", False)
        assert "after one refresh" not in error["message"]
        assert "cannot refresh" in error["message"]
    with journal.open_reader(path) as reader:
        for record in reader.events():
            assert token not in msgspec.json.encode(record.payload).decode()


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (503, {"retry-after": "5"}, b"<html>busy</html>"),
        (429, {"retry-after": "5"}, b"<html>slow down</html>"),
        (429, {}, b""),
    ],
)
async def test_a_proxys_429_or_503_after_a_commit_leaves_the_create_in_doubt(
    runtime: Runtime, status: int, headers: dict[str, str], body: bytes
) -> None:
    # The audit's F16: an intermediary that passes the create on, then answers 503 +
    # Retry-After or 429 itself. `retryable: true` there made a retry duplicate the task.
    async with httpx.AsyncClient(base_url=runtime.url) as upstream:

        async def proxy(request: httpx.Request) -> httpx.Response:
            passed = await upstream.request(
                request.method,
                request.url.raw_path.decode(),
                headers={"authorization": request.headers["authorization"]},
                content=request.content,
            )
            if request.method == "POST" and request.url.path.endswith("/tasks"):
                return httpx.Response(status, headers=headers, content=body)  # after the commit
            return httpx.Response(passed.status_code, content=passed.content)

        bridge = bridge_over(
            httpx.MockTransport(proxy),
            tokens=minted_tokens(runtime),
            workspace_id=runtime.workspace_id,
            agent_id=runtime.agent_id,
        )
        args = {"channel": "general", "tasks": [{"title": "once"}]}
        result = await bridge.call("task_create", args, {}, 1)
        error = result.structured_content["error"]  # type: ignore[index]
        assert (error["code"], error["retryable"]) == ("outcome_unknown", False), error
        assert "may have taken effect" in error["message"]
        assert error["suggested_action"]["tool"] == "task_list"  # look, do not repeat
        found = await bridge.call("task_list", error["suggested_action"]["arguments"], {}, 2)
        titles = [t["title"] for t in found.structured_content["data"]["items"]]  # type: ignore[index]
        assert titles == ["once"]  # it was committed, exactly once
