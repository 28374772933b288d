"""How sessions end, as real clients end them: signals alone and in quick succession, stdin's end,
with calls in flight, a slow or dead telemetry collector, and journals that cannot be written.

Each test runs `agentteam-bridge serve` as a subprocess and reads its stdout, its stderr, its exit
status and its journal. None asserts a duration: the deadlines are the bridge's own (a hang is
bounded by `fail_after` only)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import assert_journal_sound, bridge_command

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "lifecycle", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CLAUDE_CODE = (signal.SIGINT, signal.SIGTERM)  # 100 ms apart, as `claude` ends a server


def call(rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def create(rid: int, title: str) -> dict[str, Any]:
    """A `task_create` of one task (a mutation: its request is journaled before it is sent)."""
    return call(rid, "task_create", {"channel": "general", "tasks": [{"title": title}]})


@dataclass
class Served:
    """A bridge subprocess over raw stdio: what it answered, by id, and how it ended."""

    process: trio.Process
    journal_path: Path
    stderr_path: Path
    answers: dict[Any, list[dict[str, Any]]] = field(default_factory=dict)
    _buffer: bytes = b""

    async def send(self, *frames: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"".join(json.dumps(f).encode() + b"\n" for f in frames))

    async def answer(self, rid: Any) -> dict[str, Any]:
        """The answer to `rid`, reading stdout until it comes."""
        with trio.fail_after(30):  # bounds a hang only
            while rid not in self.answers:
                assert await self._read(), f"stdout ended before the answer to {rid!r}"
        return self.answers[rid][0]

    async def answers_from(self, count: int) -> None:
        """Read stdout until `count` requests are answered."""
        with trio.fail_after(30):  # bounds a hang only
            while len(self.answers) < count:
                assert await self._read(), "stdout ended"

    async def signal(self, *signals: signal.Signals) -> None:
        """Each signal 100 ms after the last, as Claude Code sends SIGINT then SIGTERM."""
        for i, signum in enumerate(signals):
            if i:
                await trio.sleep(0.1)
            self.process.send_signal(signum)

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def end(self) -> int:
        """Read stdout to its end and wait for the exit status."""
        with trio.fail_after(30):  # bounds a hang only
            while await self._read():
                pass
            return await self.process.wait()

    async def _read(self) -> bool:
        assert self.process.stdout is not None
        chunk = await self.process.stdout.receive_some(65536)
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)  # every stdout line is one JSON-RPC message
            if "id" in message and "method" not in message:
                self.answers.setdefault(message["id"], []).append(message)
        return bool(chunk)

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@asynccontextmanager
async def served(
    env: dict[str, str], tmp_path: Path, *extra: str, journal_path: Path | None = None
) -> AsyncIterator[Served]:
    path = journal_path or tmp_path / "j.db"
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            bridge_command("--journal", str(path), *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path / "config"), **env},
        )
    try:
        yield Served(process, path, stderr_path)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def handshake(bridge: Served) -> None:
    await bridge.send(INIT)
    assert "result" in await bridge.answer(0)
    await bridge.send(INITIALIZED)


def assert_ended_cleanly(
    bridge: Served, status: int, reason: str, *, whole_calls: bool = True
) -> list[journal.Record]:
    """Exit 0, nothing but log lines on stderr, the end journaled with its cause, and the
    final checkpoint signed over the whole journal (and, unless a journal gap closed some,
    every call's story whole)."""
    assert status == 0, (status, bridge.stderr())
    err = bridge.stderr()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    path = bridge.journal_path
    with journal.open_reader(path) as reader:
        records = list(reader.events())
    kinds = [r.kind for r in records]
    assert kinds.count("session_started") == 1 and kinds[-1] == "session_ended", kinds
    assert records[-1].payload.reason == reason  # type: ignore[union-attr]
    final = journal.load_checkpoint(path.with_name(path.name + ".checkpoint.json"))
    assert final.seq == records[-1].seq  # signed after the last event: the session's end
    if whole_calls:
        assert_journal_sound(path)
    else:
        with journal.open_reader(path) as reader:
            report = journal.verify(reader, trust_recorded_keys=True)
        assert report.ok, report.findings
    return records


class HeldUpstream:
    """An Agent Runtime API that takes every request and answers none until `release`."""

    def __init__(self) -> None:
        self.heads = 0
        self.arrived = trio.Condition()
        self.release = trio.Event()

    async def serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                head += chunk
            if head.startswith(b"GET / "):  # the start-up probe's one request: answered
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                return
            async with self.arrived:
                self.heads += 1
                self.arrived.notify_all()
            await self.release.wait()

    async def wait_for(self, heads: int) -> None:
        with trio.fail_after(30):  # bounds a hang only
            async with self.arrived:
                while self.heads < heads:
                    await self.arrived.wait()


@asynccontextmanager
async def held_upstream() -> AsyncIterator[tuple[dict[str, str], HeldUpstream]]:
    upstream = HeldUpstream()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, upstream.serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        env = {
            "AGENTTEAM_API_URL": f"http://127.0.0.1:{port}",
            "AGENTTEAM_WORKSPACE_ID": "ws_1",
            "AGENTTEAM_AGENT_ID": "agt_1",
            "AGENTTEAM_TOKEN": "tok-held-upstream",
        }
        yield env, upstream
        nursery.cancel_scope.cancel()


# --- signals, as clients send them ---------------------------------------------------------


@pytest.mark.parametrize(
    "signals",
    [CLAUDE_CODE, (signal.SIGHUP,), (signal.SIGINT,), (signal.SIGTERM,)],
    ids=["sigint-then-sigterm", "sighup", "sigint", "sigterm"],
)
async def test_a_signal_at_idle_ends_the_session_cleanly(
    file_runtime: Runtime, tmp_path: Path, signals: tuple[signal.Signals, ...]
) -> None:
    async with served(file_runtime.bridge_env(), tmp_path) as bridge:
        await handshake(bridge)
        await bridge.send(call(1, "task_list", {"channel": "general"}))
        assert "result" in await bridge.answer(1)
        await bridge.signal(*signals)
        status = await bridge.end()
    assert_ended_cleanly(bridge, status, signals[0].name)


# The console script, with an import hook that sends `signals` to the process when the bridge's
# package is first imported (a client ending the session while the bridge still starts: the
# imports are a few tenths of a second of the start), then carries on.
_SIGNALLED_START = """
import importlib.abc, os, signal, sys
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "agentteam_task_bridge.bridge":
            sys.meta_path.remove(self)
            for signum in {signals}:
                os.kill(os.getpid(), signum)
        return None
sys.meta_path.insert(0, Hook())
sys.argv = ["agentteam-bridge", "serve", "--journal", {journal!r}]
from agentteam_task_bridge.cli import main
raise SystemExit(main())
"""


@pytest.mark.parametrize(
    "signals",
    [CLAUDE_CODE, (signal.SIGHUP,), (signal.SIGTERM,)],
    ids=["sigint-then-sigterm", "sighup", "sigterm"],
)
async def test_a_signal_while_the_bridge_imports_ends_the_session_cleanly(
    file_runtime: Runtime, tmp_path: Path, signals: tuple[signal.Signals, ...]
) -> None:
    path = tmp_path / "j.db"
    code = _SIGNALLED_START.format(signals=[int(s) for s in signals], journal=str(path))
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={
                "PATH": "/usr/bin:/bin",
                "XDG_CONFIG_HOME": str(tmp_path / "config"),
                **file_runtime.bridge_env(),
            },
        )
    bridge = Served(process, path, stderr_path)
    try:
        status = await bridge.end()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert_ended_cleanly(bridge, status, signals[0].name)


async def test_claude_code_s_signals_mid_handshake_end_the_session_cleanly(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    async with served(file_runtime.bridge_env(), tmp_path) as bridge:
        await bridge.send(INIT)
        assert "result" in await bridge.answer(0)  # answered, `initialized` not yet sent
        await bridge.signal(*CLAUDE_CODE)
        status = await bridge.end()
    assert_ended_cleanly(bridge, status, "SIGINT")


async def test_claude_code_s_signals_with_32_calls_in_flight_answer_each_once(
    tmp_path: Path,
) -> None:
    async with held_upstream() as (env, upstream), served(env, tmp_path) as bridge:
        await handshake(bridge)
        await bridge.send(
            *(call(i, "task_get", {"channel": "general", "number": i}) for i in range(1, 33))
        )
        await upstream.wait_for(32)  # every call is in flight upstream
        await bridge.signal(*CLAUDE_CODE)
        status = await bridge.end()
    records = assert_ended_cleanly(bridge, status, "SIGINT")
    outcomes = {
        r.jsonrpc_request_id: r.kind
        for r in records
        if r.kind.startswith("call_") and r.kind != "call_received"
    }
    assert sorted(bridge.answers) == [0, *range(1, 33)]
    for rid in range(1, 33):
        [answer] = bridge.answers[rid]  # exactly one answer each
        # Cut short by the end of the session: journaled as cancelled, answered as closed.
        assert outcomes[str(rid)] == "call_cancelled"
        assert answer["error"]["code"] == -32000, answer


async def test_a_client_that_closed_the_bridge_s_stderr_still_gets_every_answer(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    """A client gone from stderr (its end of the pipe closed before the bridge starts: the
    first start, whose line announces the new signing key): the session is served and ends as
    any other; the lines nobody reads are dropped."""
    path = tmp_path / "j.db"
    reader, writer = os.pipe()
    os.close(reader)
    try:
        process = await trio.lowlevel.open_process(
            bridge_command("--journal", str(path)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=writer,
            env={
                "PATH": "/usr/bin:/bin",
                "XDG_CONFIG_HOME": str(tmp_path / "config"),
                **file_runtime.bridge_env(),
            },
        )
    finally:
        os.close(writer)
    assert not (tmp_path / "config").exists()  # the key is created by this start
    bridge = Served(process, path, tmp_path / "unused")
    try:
        await handshake(bridge)
        await bridge.send(create(1, "stderr gone"), call(2, "task_list", {"channel": "general"}))
        await bridge.answers_from(3)
        await bridge.close_stdin()
        status = await bridge.end()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert status == 0
    assert "result" in bridge.answers[1][0] and "result" in bridge.answers[2][0]
    assert_journal_sound(path)
    with journal.open_reader(path) as reader:
        kinds = [r.kind for r in reader.events()]
    assert kinds.count("call_result") == 2 and kinds[-1] == "session_ended", kinds


# --- shutdown with calls in flight -----------------------------------------------------------


@pytest.mark.parametrize("end", ["SIGTERM", "stdin closed"])
async def test_200_calls_in_flight_at_the_end_are_answered_as_journaled(
    file_runtime: Runtime, tmp_path: Path, end: str
) -> None:
    async with served(file_runtime.bridge_env(), tmp_path) as bridge:
        await handshake(bridge)
        await bridge.send(*(create(i, f"t{i}") for i in range(1, 201)))
        await bridge.answers_from(10)  # under way: the rest at every stage of the call flow
        if end == "SIGTERM":
            await bridge.signal(signal.SIGTERM)
        else:
            await bridge.close_stdin()
        status = await bridge.end()
    records = assert_ended_cleanly(bridge, status, end)
    outcomes: dict[str, str] = {}
    calls: dict[str, str] = {}
    for r in records:
        if r.kind == "call_received":
            calls[r.call_id] = str(r.jsonrpc_request_id)  # type: ignore[index]
        elif r.kind in ("call_result", "call_error", "call_rejected", "call_cancelled"):
            outcomes[calls[r.call_id]] = r.kind  # type: ignore[index]
    undelivered = {
        str(r.jsonrpc_request_id): r.payload.outcome  # type: ignore[union-attr]
        for r in records
        if r.kind == "answer_undelivered"
    }
    for rid, answers in bridge.answers.items():
        assert len(answers) == 1, answers  # never two answers for one request
        assert rid == 0 or str(rid) in outcomes, rid  # nothing answered that was not journaled
    for rid, outcome in outcomes.items():
        answer = bridge.answers.get(int(rid), [None])[0]
        if outcome == "call_cancelled":  # cut short by the end: answered as closed (or, read
            assert answer is None or answer["error"]["code"] == -32000  # after stdout: nothing)
            continue
        if answer is None:
            assert undelivered.get(rid) == outcome, (rid, outcome)
            continue
        # A journaled outcome is answered exactly as journaled, never as "Connection closed".
        assert "result" in answer, (rid, outcome, answer)
        assert answer["result"]["isError"] is (outcome != "call_result"), (rid, outcome)
    if end == "stdin closed":  # every request was read before stdin ended: each has its outcome
        assert len(outcomes) == 200


# --- the SDK client's close, with telemetry that cannot be flushed ---------------------------


@asynccontextmanager
async def collector(kind: str) -> AsyncIterator[str]:
    """An OTLP/HTTP endpoint that is down (nothing listens) or slow (takes requests, never
    answers)."""
    if kind == "dead":
        sock = trio.socket.socket()
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()  # nothing listens there now
        yield f"http://127.0.0.1:{port}"
        return

    async def hold(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some(65536):
                pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("signals", ["traces and metrics", "metrics"])
@pytest.mark.parametrize("kind", ["dead", "slow"])
async def test_the_sdk_client_s_close_with_a_dead_or_slow_collector_keeps_the_final_checkpoint(
    file_runtime: Runtime, tmp_path: Path, kind: str, signals: str
) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
    async with collector(kind) as url:
        env = {
            **file_runtime.bridge_env(),
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,
            "OTEL_BSP_SCHEDULE_DELAY": "60000",  # the spans wait for the flush at the end
            # metrics are exported at the end only (the interval is longer than the test)
        }
        if signals == "metrics":
            env["OTEL_TRACES_EXPORTER"] = "none"
        async with served(env, tmp_path) as bridge:
            await handshake(bridge)
            await bridge.send(call(1, "task_list", {"channel": "general"}))
            assert "result" in await bridge.answer(1)
            # What the mcp SDK's stdio client does: close stdin, wait 2 s, then SIGTERM.
            await bridge.close_stdin()
            with trio.move_on_after(2.0):
                await bridge.process.wait()
            if bridge.process.returncode is None:
                bridge.process.send_signal(signal.SIGTERM)
            status = await bridge.end()
    assert_ended_cleanly(bridge, status, "stdin closed")


# --- journals that cannot be written -------------------------------------------------------


def fill(path: Path, key: Path) -> int:
    """Append small events to a journal until it is at its own size and 20 more in a row
    (each a new session, so its index entries land anywhere) found no room; its size."""
    cap = path.stat().st_size
    writer = journal.open_sync_writer(path, key=key, max_bytes=cap, checkpoint_every=10**9)
    misses = 0
    try:
        while misses < 20:
            try:
                writer.append(
                    journal.Event(
                        session_id=f"filler-{secrets.token_hex(6)}",
                        payload=journal.SessionStarted(bridge_version="0", compat_policy="hint"),
                    )
                )
                misses = 0
            except journal.JournalUnavailable as exc:
                assert exc.reason == "disk_full", exc
                misses += 1
    finally:
        try:
            writer.close()
        except journal.JournalUnavailable:
            pass  # no room for its checkpoint either
    return cap


def assert_valid_errors(bridge: Served) -> None:
    """Every protocol error has a JSON-RPC code and its own words, never code 0 or internal
    text (a tool's failure is a result, not a protocol error)."""
    for answers in bridge.answers.values():
        for answer in answers:
            if "error" in answer:
                code = answer["error"]["code"]
                assert code in (-32700, -32600, -32601, -32602, -32603, -32000), answer
                assert "SQLITE" not in answer["error"]["message"], answer


async def test_a_pool_file_at_its_cap_at_start_is_the_degraded_mode(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    pool = tmp_path / "pool"
    pool.mkdir(mode=0o700)  # an existing directory is a pool
    async with served(file_runtime.bridge_env(), tmp_path, journal_path=pool) as first:
        await handshake(first)
        await first.close_stdin()
        assert await first.end() == 0
    path = pool / "journal-1.db"
    cap = fill(path, tmp_path / "config" / "agentteam-bridge" / "journal-signing.key")
    before = journal_kinds(path)
    async with served(
        file_runtime.bridge_env(), tmp_path, "--journal-max-bytes", str(cap), journal_path=pool
    ) as bridge:
        await handshake(bridge)
        await bridge.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert len((await bridge.answer(1))["result"]["tools"]) == 7
        await bridge.send(call(2, "task_list", {"channel": "general"}))
        read = (await bridge.answer(2))["result"]
        assert read["isError"] is False
        assert read["structuredContent"]["meta"]["journal"] == {
            "recorded": False,
            "reason": "disk_full",
        }
        await bridge.send(create(3, "refused"))
        refused = (await bridge.answer(3))["result"]
        assert refused["structuredContent"]["error"]["code"] == "journal_unavailable"
        await bridge.close_stdin()
        status = await bridge.end()
    assert_valid_errors(bridge)
    err = bridge.stderr()
    assert "Traceback" not in err, err
    # The end could not be journaled either: one line says so, and the journal is untouched.
    assert status == 1 and "failed during the session" in err, (status, err)
    assert journal_kinds(path) == before


def journal_kinds(path: Path) -> list[str]:
    with journal.open_reader(path) as reader:
        return [r.kind for r in reader.events()]


def chattr_works(path: Path) -> bool:
    probe = path / "chattr-probe"
    probe.touch()
    try:
        done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True, check=False)
    return done.returncode == 0


async def call_until_recorded(bridge: Served, first_id: int) -> int:
    """Create tasks until one is journaled again (the writer re-probes within ~2 s); the id
    of the first that was."""
    rid = first_id
    with trio.fail_after(30):  # bounds a hang only
        while True:
            await bridge.send(create(rid, f"t{rid}"))
            result = (await bridge.answer(rid))["result"]
            if not result["isError"] and "journal" not in result["structuredContent"]["meta"]:
                return rid
            rid += 1
            await trio.sleep(0.2)


@pytest.mark.parametrize("how", ["read-only", "vanished"])
async def test_a_shm_that_cannot_be_used_is_a_degraded_journal_not_a_crash(
    file_runtime: Runtime, tmp_path: Path, how: str
) -> None:
    if how == "read-only" and not chattr_works(tmp_path):
        pytest.skip("chattr +i needs root on a file system that supports it")
    shm = tmp_path / "j.db-shm"
    async with served(file_runtime.bridge_env(), tmp_path) as bridge:
        await handshake(bridge)
        await bridge.send(call(1, "task_list", {"channel": "general"}))
        assert "journal" not in (await bridge.answer(1))["result"]["structuredContent"]["meta"]
        if how == "read-only":
            await trio.run_process(["chattr", "+i", str(shm)])
        else:
            shm.unlink()
        try:
            await bridge.send(call(2, "task_list", {"channel": "general"}))
            read = (await bridge.answer(2))["result"]
            assert read["structuredContent"]["meta"]["journal"] == {
                "recorded": False,
                "reason": "io_error",
            }
            if how == "read-only":  # (a vanished one is replaced at the first re-probe)
                await bridge.send(create(3, "no"))
                refused = (await bridge.answer(3))["result"]
                assert refused["structuredContent"]["error"]["code"] == "journal_unavailable"
        finally:
            if how == "read-only":
                await trio.run_process(["chattr", "-i", str(shm)])
        await call_until_recorded(bridge, 4)
        await bridge.close_stdin()
        status = await bridge.end()
    records = assert_ended_cleanly(bridge, status, "stdin closed", whole_calls=False)
    gaps = [r.payload for r in records if r.kind == "journal_gap"]
    assert [g.reason for g in gaps] == ["io_error"]  # type: ignore[union-attr]
