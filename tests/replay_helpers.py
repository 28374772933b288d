"""Journals for the replay tests: built by the real bridge, hand-written, or hand-corrupted."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._cli import main as replay_cli_main
from agentteam_task_bridge.runtime import FaultSpec, Runtime, RuntimeConfig, open_runtime

from .bridge_harness import BridgeSession, bridge_command, open_bridge
from .bridge_inprocess import inprocess_session, key_path_for

META = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}
Script = Callable[[BridgeSession, Runtime], Awaitable[None]]


@dataclass(frozen=True)
class Built:
    """A journal the bridge wrote, and the files beside it."""

    path: Path
    key_path: Path
    runtime_db: Path

    @property
    def checkpoint_path(self) -> Path:
        return Path(f"{self.path}.checkpoint.json")

    @property
    def key(self) -> journal.SigningKey:
        return journal.load_key(self.key_path, create=False)

    @property
    def vkey(self) -> str:
        """The public key of the bridge that wrote it, as `agentteam-replay key` prints it."""
        return self.key.verifier.to_text()


async def drive(directory: Path, script: Script, *, wire: bool = False) -> Built:
    """Run a reference runtime and a bridge session, in-process (`wire`: a real bridge
    subprocess over stdio); let `script` drive them."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "runtime.db"
    path = directory / "journal.db"
    async with open_runtime(RuntimeConfig(db_path=str(db))) as rt:
        opened = (
            open_bridge(rt.bridge_env(), path, runtime=rt) if wire else inprocess_session(rt, path)
        )
        async with opened as bridge:
            await script(bridge, rt)
    return Built(path, key_path_for(path), db)


def build(directory: Path, script: Script, *, wire: bool = False) -> Built:
    """`drive` from synchronous code (module-scoped fixtures)."""

    async def run() -> Built:
        return await drive(directory, script, wire=wire)

    return trio.run(run)


async def everyday(bridge: BridgeSession, rt: Runtime) -> None:
    """A session of every kind of call: results, errors, rejections, a refresh-and-replay,
    repeats of idempotent calls, a keyed create replayed and conflicting, deprecated names."""
    await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "first"}]})
    await bridge.ok("task_create", {"channel": "eng", "tasks": [{"title": "second"}]})
    await bridge.ok("task_get", {"channel": "general", "number": 1})
    await bridge.fails("task_get", {"channel": "general", "number": 99}, code="task_not_found")
    await bridge.fails("task_get", {"channel": "general", "number": "x"}, code="invalid_arguments")
    rt.faults.arm(FaultSpec(kind="unauthorized", op="list"))
    await bridge.ok("task_list", {"channel": "general"})
    patch = {"channel": "general", "number": 1, "patch": {"title": "renamed"}}
    await bridge.ok("task_update", patch)
    await bridge.ok("task_update", patch)
    claim = {"channel": "general", "numbers": [1], "claimed": True}
    await bridge.ok("task_set_claim", claim)
    await bridge.ok("task_set_claim", claim)
    rt.store.open_callback(rt.workspace_id, "run_1", "cb_1", rt.agent_id)
    keyed = {"channel": "general", "tasks": [{"title": "from a callback"}], "idempotency_key": "k1"}
    await bridge.ok("task_create", keyed, meta=META)
    await bridge.ok("task_create", keyed, meta=META)
    await bridge.fails(
        "task_create",
        {**keyed, "tasks": [{"title": "another"}]},
        code="idempotency_conflict",
        meta=META,
    )
    await bridge.ok("task_checkpoint", {"channel": "general", "number": 1, "summary": "done"})
    await bridge.fails("nope", {}, code="unknown_tool")
    await bridge.fails("list_tasks", {"channel": "general"}, code="deprecated_tool")
    await bridge.ok("task_list", {"channel": "eng", "includeSubtasks": True})
    await bridge.ok("task_delete", {"channel": "eng", "number": 1})


@pytest.fixture(scope="module")
def everyday_journal(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The `everyday` session's journal, built once per test module (read it, don't edit it);
    in-process (test_replay_verify has it written by a bridge subprocess)."""
    return build(tmp_path_factory.mktemp("everyday"), everyday)


def consolidated_copy(path: Path, target: Path) -> Path:
    """A copy with the WAL folded in: one file to send elsewhere, or to edit with sqlite3."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return target


def copy_journal(built: Built, directory: Path) -> Built:
    """A consolidated copy (WAL folded in) with its key and exported checkpoint."""
    directory.mkdir(parents=True, exist_ok=True)
    path = consolidated_copy(built.path, directory / "journal.db")
    key = key_path_for(path)
    key.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(built.key_path, key)
    if built.checkpoint_path.exists():
        shutil.copy(built.checkpoint_path, f"{path}.checkpoint.json")
    return Built(path, key, built.runtime_db)


def tamper(path: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    """What an attacker with file access does: drop the triggers, then edit."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        for statement in statements:
            conn.execute(statement, params if "?" in statement else ())
    finally:
        conn.close()


def seq_of(path: Path, kind: str, *, call_id: str | None = None, nth: int = 0) -> int:
    with journal.open_reader(path) as reader:
        found = [r.seq for r in reader.events(kind=kind, call_id=call_id)]
    return found[nth]


SEED: Final = bytes(range(32))  # the hand-written journals' Ed25519 key (verify with key=SEED)
SEED_VKEY: Final = journal.SigningKey("agentteam-bridge/seed", SEED).verifier.to_text()


def write_events(path: Path, events: list[journal.Event], key: bytes = SEED) -> None:
    with journal.open_sync_writer(path, key=key) as writer:
        writer.append_many(events)


def session_started(session: str = "s1", **fields: Any) -> journal.Event:
    payload = journal.SessionStarted(
        bridge_version="0.1.0",
        compat_policy="hint",
        client_name=fields.pop("client_name", "cursor"),
        client_version=fields.pop("client_version", "1.2"),
        workspace_id=fields.pop("workspace_id", "ws_1"),
        agent_id=fields.pop("agent_id", "agt_1"),
        api_url="http://127.0.0.1:1",
    )
    return journal.Event(session_id=session, mcp_method_name="initialize", payload=payload)


def call_event(
    call_id: str, payload: journal.Payload, *, tool: str = "task_get", session: str = "s1"
) -> journal.Event:
    return journal.Event(
        session_id=session,
        call_id=call_id,
        mcp_method_name="tools/call",
        gen_ai_tool_name=tool,
        jsonrpc_request_id=1,
        payload=payload,
    )


def injected(workspace: str = "ws_1", agent: str = "agt_1", **extra: str) -> journal.Payload:
    fields = [
        journal.InjectedField(name="workspace_id", source="env", value=workspace),
        journal.InjectedField(name="agent_id", source="env", value=agent),
        journal.InjectedField(name="bearer_token", source="env", value="[redacted]"),
    ]
    fields += [journal.InjectedField(name=k, source="_meta", value=v) for k, v in extra.items()]
    return journal.ContextInjected(fields=fields)


def route(suffix: str = "/get", workspace: str = "ws_1", agent: str = "agt_1") -> str:
    return f"/api/v1/workspaces/{workspace}/agents/{agent}/runtime/tasks{suffix}"


def replay_cli(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`agentteam-replay ARGS` as a subprocess (the console script's module)."""
    return subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.replay._cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )


def replay_main(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`agentteam-replay ARGS` in-process: `replay._cli.main` with the environment `replay_cli`
    gives, stdout and stderr captured (for tables of cases where the process is not the point)."""
    argv = [*map(str, args)]
    wanted = {"COLUMNS": "80", **(env or {})}
    saved = {name: os.environ.get(name) for name in wanted}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(wanted)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = replay_cli_main(argv)
            except SystemExit as exc:  # --help, usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def cli_json(*args: str | Path, wire: bool = True) -> tuple[int, Any]:
    """`agentteam-replay ARGS --json`: a subprocess, or in-process when not `wire`."""
    done = (replay_cli if wire else replay_main)(*args, "--json")
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


class RawBridge:
    """The bridge as a subprocess spoken to in raw JSON-RPC, so that a test can SIGKILL it."""

    def __init__(self, process: trio.Process, journal_path: Path) -> None:
        self.process = process
        self.journal_path = journal_path
        self._buffer = b""
        self._ids = iter(range(1, 1_000_000))

    @classmethod
    async def start(cls, rt: Runtime, journal_path: Path, *extra: str) -> RawBridge:
        env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(journal_path.parent / "config"),
            "XDG_DATA_HOME": str(journal_path.parent / "data"),
            **rt.bridge_env(),
        }
        process = await trio.lowlevel.open_process(
            bridge_command("--journal", str(journal_path), *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        bridge = cls(process, journal_path)
        await bridge.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "agentteam-tests", "version": "9.9.9"},
            },
        )
        await bridge.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return bridge

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = next(self._ids)
        await self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            message = await self._read()
            if message.get("id") == ident:
                return message

    async def call_soon(self, name: str, arguments: dict[str, Any]) -> None:
        """Send a tools/call without waiting for its answer."""
        params = {"name": name, "arguments": arguments}
        await self.send(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/call", "params": params}
        )

    async def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with trio.fail_after(30):
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some()
                assert chunk, "the bridge closed its stdout"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def wait_for_event(self, kind: str) -> None:
        """Until the journal holds an event of `kind` (it is durable once readable)."""
        with trio.fail_after(30):
            while True:
                if self.journal_path.exists():
                    try:
                        with journal.open_reader(self.journal_path) as reader:
                            if next(iter(reader.events(kind=kind)), None) is not None:
                                return
                    except journal.JournalFormatError:
                        pass
                await trio.sleep(0.05)

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()


def bare_record(
    seq: int,
    kind: str,
    payload: Any,
    tool: str | None,
    *,
    journal_id: str = "j",
    call_id: str = "c",
) -> journal.Record:
    """A call's event as a Record, its columns the least a story reads (checker unit tests)."""
    return journal.Record(
        seq=seq,
        journal_id=journal_id,
        session_id="s",
        call_id=call_id,
        ts_mono_ns=seq,
        ts_wall="2026-12-04T00:00:00Z",
        kind=kind,
        kind_version=1,
        mcp_method_name="tools/call",
        gen_ai_tool_name=tool,
        jsonrpc_request_id=None,
        http_response_status_code=None,
        error_type=None,
        duration_ms=None,
        payload=payload,
        payload_json="{}",
        prev_hash="",
        hash="",
    )
