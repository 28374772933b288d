"""Bad input and upstream faults become classified tool errors; nothing crashes or leaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import BridgeSession, open_bridge
from .bridge_inprocess import inprocess_session


def _schema(bridge: BridgeSession, tool: str) -> dict[str, Any]:
    schema = next(t.output_schema for t in bridge.tools if t.name == tool)
    assert schema is not None
    return schema


@pytest.mark.parametrize(
    ("tool", "args", "code", "path"),
    [
        ("task_get", {"channel": "general", "number": "1"}, "invalid_arguments", "$.number"),
        ("task_get", {"channel": "general"}, "invalid_arguments", "$.number"),
        ("task_get", {"channel": "general", "number": 0}, "invalid_arguments", "$.number"),
        (
            "task_get",
            {"channel": "general", "number": 1, "bogus": 1},
            "invalid_arguments",
            "$.bogus",
        ),
        (
            "task_get",
            {"channel": "general", "number": 1, "workspace_id": "ws_evil"},
            "hidden_context_field",
            "$.workspace_id",
        ),
        (
            "task_update",
            {"channel": "general", "number": 1, "patch": {"agentId": "agt_helper"}},
            "hidden_context_field",
            "$.patch.agentId",
        ),
        (
            "task_create",
            {"channel": "general", "tasks": [{"title": "x"}], "token": "t"},
            "hidden_context_field",
            "$.token",
        ),
        (
            "task_create",
            {
                "channel": "general",
                "parent_task_scope": {"kind": "task", "scope_id": "tsk_1"},
                "tasks": [{"title": "x"}],
            },
            "invalid_arguments",
            "$.parent_task_scope",
        ),
        (
            "task_create",
            {"channel": "general", "tasks": [{"title": "a"}, {"title": "b", "labels": ["x"]}]},
            "invalid_arguments",
            "$.tasks[1].labels",
        ),
        ("task_create", {"channel": "general", "tasks": []}, "invalid_arguments", "$.tasks"),
        (
            "task_create",
            {"channel": "general", "tasks": [{"title": "x" * 300}]},
            "invalid_arguments",
            "$.tasks[0].title",
        ),
        ("task_list", {"channel": "general", "status": "all"}, "invalid_arguments", "$.status"),
        ("task_list", {"channel": "general", "limit": 101}, "invalid_arguments", "$.limit"),
        (
            "task_update",
            {"channel": "general", "number": 1, "patch": {}},
            "invalid_arguments",
            "$.patch",
        ),
        (
            "task_update",
            {"channel": "general", "number": 1, "patch": {"number": 3}},
            "invalid_arguments",
            "$.patch.number",
        ),
        (
            "task_set_claim",
            {"channel": "general", "numbers": [1, 1], "claimed": True},
            "invalid_arguments",
            "$.numbers[1]",
        ),
        (
            "task_checkpoint",
            {"channel": "general", "number": 1, "summary": "   "},
            "invalid_arguments",
            "$.summary",
        ),
        (
            "task_delete",
            {"channel": "general", "number": 1, "subtask_mode": "orphan"},
            "invalid_arguments",
            "$.subtask_mode",
        ),
    ],
)
async def test_invalid_arguments_are_refused_before_any_upstream_request(
    bridge: BridgeSession, tool: str, args: dict[str, Any], code: str, path: str
) -> None:
    await _refused(bridge, tool, args, code, path)


@pytest.mark.wire
async def test_arguments_are_refused_over_the_wire(bridge: BridgeSession) -> None:
    """The table above runs in-process; one row of each code proves it through stdio."""
    await _refused(
        bridge,
        "task_update",
        {"channel": "general", "number": 1, "patch": {"agentId": "agt_helper"}},
        "hidden_context_field",
        "$.patch.agentId",
    )
    await _refused(
        bridge,
        "task_create",
        {"channel": "general", "tasks": [{"title": "a"}, {"title": "b", "labels": ["x"]}]},
        "invalid_arguments",
        "$.tasks[1].labels",
    )


async def _refused(
    bridge: BridgeSession, tool: str, args: dict[str, Any], code: str, path: str
) -> None:
    result = await bridge.call(tool, args)
    assert result.is_error
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["code"] == code and path in error["field_errors"], error
    assert error["retryable"] is False
    jsonschema.validate(result.structured_content, _schema(bridge, tool))
    assert bridge.runtime is not None
    assert bridge.runtime.store.stats()["tasks"] == 0


async def test_unknown_tools_fail_closed(bridge: BridgeSession) -> None:
    error = await bridge.fails("task_explode", {}, code="unknown_tool")
    assert error["retryable"] is False


async def test_product_errors_carry_candidates_and_suggested_actions(bridge: BridgeSession) -> None:
    error = await bridge.fails("task_list", {"channel": "genral"}, code="channel_not_found")
    assert error["candidates"][0]["channel"] == "general"
    assert error["suggested_action"] == {"tool": "task_list", "arguments": {"channel": "general"}}
    error = await bridge.fails(
        "task_get", {"channel": "general", "number": 4}, code="task_not_found"
    )
    assert error["suggested_action"]["tool"] == "task_list"


async def test_stale_update_suggests_a_refresh_and_recovers(bridge: BridgeSession) -> None:
    created = await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
    seen = created["data"]["tasks"][0]["updated_at"]
    await bridge.ok("task_update", {"channel": "general", "number": 1, "patch": {"title": "t2"}})
    error = await bridge.fails(
        "task_update",
        {"channel": "general", "number": 1, "expected_updated_at": seen, "patch": {"title": "t3"}},
        code="stale_update",
    )
    assert error["suggested_action"] == {
        "tool": "task_get",
        "arguments": {"channel": "general", "number": 1},
    }
    fresh = await bridge.ok(
        error["suggested_action"]["tool"], error["suggested_action"]["arguments"]
    )
    await bridge.ok(
        "task_update",
        {
            "channel": "general",
            "number": 1,
            "patch": {"title": "t3"},
            "expected_updated_at": fresh["data"]["task"]["updated_at"],
        },
    )


@pytest.mark.parametrize(
    ("spec", "tool", "args", "code", "retryable"),
    [
        (
            FaultSpec(kind="status", status=503),
            "task_list",
            {"channel": "general"},
            "upstream_unavailable",
            True,
        ),
        (
            FaultSpec(kind="status", status=500),
            "task_list",
            {"channel": "general"},
            "upstream_failure",
            True,
        ),
        (
            FaultSpec(kind="status", status=500),
            "task_checkpoint",
            {"channel": "general", "number": 1, "summary": "s"},
            "outcome_unknown",
            False,
        ),
        (
            FaultSpec(kind="status", status=429, retry_after_seconds=3),
            "task_list",
            {"channel": "general"},
            "rate_limited",
            True,
        ),
        (FaultSpec(kind="drop"), "task_list", {"channel": "general"}, "upstream_failure", True),
        (
            FaultSpec(kind="drop_after_commit"),
            "task_create",
            {"channel": "general", "tasks": [{"title": "maybe"}]},
            "outcome_unknown",
            False,
        ),
        (
            FaultSpec(kind="malformed"),
            "task_list",
            {"channel": "general"},
            "upstream_malformed",
            True,
        ),
        (
            FaultSpec(kind="malformed"),
            "task_create",
            {"channel": "general", "tasks": [{"title": "m"}]},
            "outcome_unknown",
            False,
        ),
        (
            FaultSpec(kind="latency", delay_ms=3000),
            "task_get",
            {"channel": "general", "number": 1},
            "upstream_timeout",
            True,
        ),
        (
            FaultSpec(kind="latency", delay_ms=3000),
            "task_update",
            {"channel": "general", "number": 1, "patch": {"title": "slow"}},
            "outcome_unknown",
            False,
        ),
    ],
)
async def test_upstream_faults_are_classified(
    runtime: Runtime,
    tmp_path: Path,
    spec: FaultSpec,
    tool: str,
    args: dict[str, Any],
    code: str,
    retryable: bool,
) -> None:
    async with inprocess_session(runtime, tmp_path / "j.db", upstream_timeout=1) as bridge:
        await _classified(bridge, spec, tool, args, code, retryable)


async def test_an_upstream_fault_is_classified_over_the_wire(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    """The table above runs in-process; its timeout row proves `--upstream-timeout` and stdio."""
    async with open_bridge(
        file_runtime.bridge_env(),
        tmp_path / "j.db",
        "--upstream-timeout",
        "1",
        runtime=file_runtime,
    ) as bridge:
        await _classified(
            bridge,
            FaultSpec(kind="latency", delay_ms=3000),
            "task_get",
            {"channel": "general", "number": 1},
            "upstream_timeout",
            True,
        )


async def _classified(
    bridge: BridgeSession,
    spec: FaultSpec,
    tool: str,
    args: dict[str, Any],
    code: str,
    retryable: bool,
) -> None:
    assert bridge.runtime is not None
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "seed"}]})
    bridge.runtime.faults.arm(spec)
    result = await bridge.call(tool, args)
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]  # type: ignore[index]
    assert (error["code"], error["retryable"]) == (code, retryable), error
    if code == "rate_limited":
        assert error["retry_after_seconds"] == 3
    jsonschema.validate(result.structured_content, _schema(bridge, tool))
    await bridge.ok("task_list", {"channel": "general"})  # the bridge is fine afterwards


async def test_outcome_unknown_with_an_idempotency_key_is_retryable(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    file_runtime.store.open_callback(
        file_runtime.workspace_id, "run_1", "cb_1", file_runtime.agent_id
    )
    meta = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}
    args = {"channel": "general", "tasks": [{"title": "once"}], "idempotency_key": "k1"}
    async with open_bridge(
        file_runtime.bridge_env(), tmp_path / "j.db", runtime=file_runtime
    ) as bridge:
        file_runtime.faults.arm(FaultSpec(kind="drop_after_commit", op="create"))
        error = await bridge.fails("task_create", args, code="outcome_unknown", meta=meta)
        assert error["retryable"] is True
        again = await bridge.ok("task_create", args, meta=meta)
        assert again["data"]["reused"] is True
        assert file_runtime.store.stats()["tasks"] == 1


async def test_unreachable_upstream_is_retryable_and_sends_nothing(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_the_probe() -> None:  # its one request, then nothing listens any more
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(30)
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 404 Not Found\r\nconnection: close\r\n\r\n")
        listener.close()

    threading.Thread(target=answer_the_probe, daemon=True).start()
    env = {**file_runtime.bridge_env(), "AGENTTEAM_API_URL": f"http://127.0.0.1:{port}"}
    async with open_bridge(env, tmp_path / "j.db") as bridge:
        error = await bridge.fails(
            "task_get", {"channel": "general", "number": 1}, code="upstream_unreachable"
        )
        assert error["retryable"] is True


async def test_a_full_journal_fails_mutations_closed_and_lets_reads_say_so(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    async with open_bridge(
        file_runtime.bridge_env(),
        tmp_path / "j.db",
        "--journal-max-bytes",
        "200000",
        runtime=file_runtime,
        check_journal=False,
    ) as bridge:
        big = {"channel": "general", "tasks": [{"title": "t" * 200} for _ in range(50)]}
        for _ in range(40):
            result = await bridge.call("task_create", big)
            if result.is_error:
                break
        error = result.structured_content["error"]  # type: ignore[index]
        assert (error["code"], error["retryable"]) == ("journal_unavailable", True)
        created = file_runtime.store.stats()["tasks"]
        again = await bridge.call("task_create", {"channel": "general", "tasks": [{"title": "x"}]})
        assert again.structured_content["error"]["code"] == "journal_unavailable"  # type: ignore[index]
        assert file_runtime.store.stats()["tasks"] == created  # nothing sent without a record
        read = await bridge.ok("task_list", {"channel": "general", "limit": 1})
        note = read["meta"].get("journal")
        if note is None:
            # The writer re-probes by itself (from 0.05 s) and a small row fits under the cap
            # again: then the journal holds the gap before anything later, and the read is in it.
            with journal.open_reader(bridge.journal) as reader:
                assert any(True for _ in reader.events(kind="journal_gap"))
        else:
            assert note == {"recorded": False, "reason": "disk_full"}


IMPOSSIBLE_INSTANTS = [
    "2026-02-30T00:00:00Z",
    "2026-13-45T99:99:99Z",
    "2025-02-29T12:00:00.5Z",
    "2026-04-31T00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-01-01T00:60:00Z",
]


async def test_an_impossible_expected_updated_at_is_invalid_not_stale(
    bridge: BridgeSession,
) -> None:
    # The audit's C4: answered `stale_update`, it sent the model to read the task again.
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
    for instant in IMPOSSIBLE_INSTANTS:
        args = {"channel": "general", "number": 1, "patch": {"title": "x"}}
        error = await bridge.fails(
            "task_update", {**args, "expected_updated_at": instant}, code="invalid_arguments"
        )
        assert list(error["field_errors"]) == ["$.expected_updated_at"], error
        assert "suggested_action" not in error


@pytest.mark.parametrize("extra", ["000", "0", "00"])
async def test_a_revision_is_compared_as_an_instant_not_a_spelling(
    bridge: BridgeSession, extra: str
) -> None:
    # The audit's C5: the same instant with more fraction digits was `stale_update`.
    created = await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "t"}]})
    seen: str = created["data"]["tasks"][0]["updated_at"]
    assert seen.endswith("Z") and "." in seen
    longer = seen[:-1] + extra + "Z"
    args = {"channel": "general", "number": 1, "patch": {"title": "t2"}}
    await bridge.ok("task_update", {**args, "expected_updated_at": longer})
    # A later instant is still stale, however it is spelled.
    await bridge.fails(
        "task_update",
        {**args, "patch": {"title": "t3"}, "expected_updated_at": longer},
        code="stale_update",
    )
