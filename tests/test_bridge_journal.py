"""The journal a real bridge session leaves: it verifies, and every call tells its whole story."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import CALL_GRAMMAR, journal_calls, open_bridge


async def test_every_call_is_journaled_in_order_and_the_journal_verifies(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    async with open_bridge(file_runtime.bridge_env(), path, runtime=file_runtime) as bridge:
        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "a"}]})
        await bridge.ok("task_get", {"channel": "general", "number": 1})
        await bridge.fails(
            "task_get", {"channel": "general", "number": "x"}, code="invalid_arguments"
        )
        await bridge.fails("task_get", {"channel": "general", "number": 9}, code="task_not_found")
        file_runtime.faults.arm(FaultSpec(kind="unauthorized"))
        await bridge.ok("task_list", {"channel": "general"})
        file_runtime.faults.arm(FaultSpec(kind="latency", op="get", delay_ms=3000))
        await bridge.cancel_in_flight("task_get", {"channel": "general", "number": 1})
        await bridge.fails("nope", {}, code="unknown_tool")
    calls = journal_calls(path)
    assert len(calls) == 7
    for call_id, kinds in calls.items():
        assert CALL_GRAMMAR.match(" ".join(kinds)), (call_id, kinds)
    stories = [" ".join(k) for k in calls.values()]
    assert any("token_refreshed" in s for s in stories)
    assert any(s.endswith("call_cancelled") for s in stories)
    with journal.open_reader(path) as reader:
        kinds = [r.kind for r in reader.events()]
        key = path.parent / "config" / "agentteam-bridge" / "journal-signing.key"
        report = journal.verify(reader, key=journal.load_key(key, create=False))
    assert report.ok, report.findings
    assert kinds[0] == "session_started" and kinds[-1] == "session_ended"


async def test_session_start_records_client_protocol_and_policy(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    async with open_bridge(file_runtime.bridge_env(), path, "--compat", "strict"):
        pass
    with journal.open_reader(path) as reader:
        started = next(iter(reader.events(kind="session_started"))).payload
        hello = next(iter(reader.events(kind="session_handshake"))).payload
    assert isinstance(started, journal.SessionStarted)
    assert isinstance(hello, journal.SessionHandshake)  # the client, once it said who it is
    assert (hello.client_name, hello.client_version) == ("agentteam-tests", "9.9.9")
    assert hello.protocol_version == "2025-11-25" and started.compat_policy == "strict"
    assert started.agent_id == file_runtime.agent_id


async def test_no_bearer_token_reaches_results_stderr_or_journal_bytes(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-yet")
    env = {**file_runtime.bridge_env(), "AGENTTEAM_TOKEN_FILE": str(token_file)}
    del env["AGENTTEAM_TOKEN_COMMAND"]
    path = tmp_path / "journal.db"
    seen: list[str] = []
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        first = file_runtime.mint_token()  # read at the first call
        second = file_runtime.mint_token()
        token_file.write_text(first)
        seen.append(
            str(await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "a"}]}))
        )
        token_file.write_text(second)
        file_runtime.faults.arm(FaultSpec(kind="unauthorized"))  # the first token "expired"
        seen.append(str(await bridge.ok("task_list", {"channel": "general"})))
        seen.append(
            str(
                await bridge.fails(
                    "task_get",
                    {"channel": "general", "number": 1, "token": first},
                    code="hidden_context_field",
                )
            )
        )
        stderr = bridge.stderr()
    blobs = [p.read_bytes() for p in tmp_path.glob("journal.db*")]
    for token in (first, second):
        assert all(token not in text for text in seen)
        assert token not in stderr
        assert all(token.encode() not in blob for blob in blobs)
    with journal.open_reader(path) as reader:
        assert any(r.kind == "token_refreshed" for r in reader.events())


async def test_the_journal_file_is_owner_only(file_runtime: Runtime, tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with open_bridge(file_runtime.bridge_env(), path) as bridge:
        await bridge.ok("task_list", {"channel": "general"})
    for file in tmp_path.glob("journal.db*"):
        assert stat.S_IMODE(os.stat(file).st_mode) & 0o077 == 0, file
