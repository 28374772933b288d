"""The front door (`bridge._door`): the direct `tools/call` path writes the SDK's JSON, keeps the
SDK's dispatcher semantics, and one fixed session answers the same bytes with it on and off."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
import pytest
import trio
import trio.testing
from mcp.server.lowlevel import Server
from mcp.server.runner import MODERN_PROTOCOL_VERSIONS
from mcp_types import methods

from agentteam_task_bridge.bridge import _stdio
from agentteam_task_bridge.bridge._answer import Answer
from agentteam_task_bridge.bridge._door import DIRECT_VERSIONS, Door, MemoryWire
from agentteam_task_bridge.bridge._lifecycle import Unanswered

ANSWERS = [
    Answer(
        '{"data":{"task":{"title":"🙂 東京"}}}',
        {"data": {"task": {"title": "🙂 東京", "number": 7}}, "meta": {}},
        False,
        {"agentteam/task": {"channel": "c", "number": 7, "scope_id": "s"}},
    ),
    Answer("error", {"error": {"code": "not_found", "retryable": False}}, True, None),
    Answer("x", {"data": {"items": [], "n": 1.5, "none": None}, "meta": {"a": [1]}}, False, None),
]


@pytest.mark.parametrize("version", sorted(DIRECT_VERSIONS))
@pytest.mark.parametrize("answer", ANSWERS, ids=["result", "error", "list"])
def test_the_wire_is_what_the_sdk_writes_at_each_direct_version(
    version: str, answer: Answer
) -> None:
    dumped = answer.result().model_dump(by_alias=True, mode="json", exclude_none=True)
    assert methods.serialize_server_result("tools/call", version, dumped) == answer.wire()


def test_direct_versions_are_handshake_versions_the_sdk_knows() -> None:
    known = {version for method, version in methods.SERVER_RESULTS if method == "tools/call"}
    assert DIRECT_VERSIONS <= known and not DIRECT_VERSIONS & set(MODERN_PROTOCOL_VERSIONS)


def _frame(rid: Any = 1, **params: Any) -> str:
    params = {"name": "task_get", "arguments": {"channel": "c", "number": 1}, **params}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def _initialize(version: str) -> list[str]:
    hello = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "door-test", "version": "1"},
    }
    return [
        json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": hello}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]


Answering = Callable[[str, Any, Any, Any], Awaitable[Answer]]


class _Session:
    """A door over a memory wire, an SDK server behind it whose `tools/call` says "sdk"."""

    def __init__(self, door: Door, wire: MemoryWire) -> None:
        self.door, self.wire = door, wire
        self.sdk_calls: list[Any] = []

    async def send(self, *lines: str) -> None:
        for line in lines:
            await self.wire.feed(line)

    async def answer(self) -> dict[str, Any]:
        with trio.fail_after(10):
            data = await self.wire.frames.receive()
        assert data.endswith(b"\n") and data.count(b"\n") == 1
        frame: dict[str, Any] = json.loads(data)
        return frame

    async def rest(self) -> list[dict[str, Any]]:
        """What is written until the session is over (the input closed first)."""
        self.wire.close()
        with trio.fail_after(10):
            return [json.loads(data) async for data in self.wire.frames]


@asynccontextmanager
async def _door(
    answer: Answering, *, version: str | None = "2025-11-25", direct: bool = True
) -> AsyncIterator[_Session]:
    unanswered = Unanswered()
    door = Door(answer, unanswered=unanswered, direct=direct)
    wire = MemoryWire()
    session = _Session(door, wire)

    async def sdk_call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        session.sdk_calls.append(ctx.request_id)
        return await door.call(params.name, params.arguments, params.meta, ctx.request_id)

    server: Server[Any] = Server("door-test", on_call_tool=sdk_call)

    async def run() -> None:
        async with door.streams(wire) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        wire.end()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        if version is not None:
            await session.send(*_initialize(version))
            assert (await session.answer())["result"]["protocolVersion"] == version
        yield session


async def _first(*args: Any) -> Answer:
    return ANSWERS[0]


@pytest.mark.parametrize(
    "frame",
    [
        _frame(_meta={"progressToken": 3}),
        _frame(_meta={types.PROTOCOL_VERSION_META_KEY: "2026-07-28"}),
        _frame(task={"ttl": 5}),
        _frame(name=7),
        _frame(arguments=[1]),
        _frame(_meta="x"),
    ],
)
async def test_what_the_sdk_must_interpret_goes_to_the_sdk(frame: str) -> None:
    async with _door(_first) as session:
        await session.send(frame)
        await session.answer()  # the SDK's answer (a result, or its refusal)
        assert session.sdk_calls in ([1], [])  # the SDK served or refused it: never direct
        await session.rest()


async def test_a_call_goes_direct_only_after_the_handshake_at_a_direct_version() -> None:
    async with _door(_first, version=None) as session:  # no handshake yet: the SDK refuses
        await session.send(_frame(1))
        assert "error" in await session.answer() and session.sdk_calls == []
        await session.rest()
    async with _door(_first) as session:
        await session.send(_frame(2))
        assert (await session.answer())["result"] == ANSWERS[0].wire()
        assert session.sdk_calls == []  # served by the door
        await session.rest()
    async with _door(_first, direct=False) as session:
        await session.send(_frame(3))
        assert (await session.answer())["result"] == ANSWERS[0].wire()
        assert session.sdk_calls == [3]
        await session.rest()


async def test_answers_cancellation_and_shutdown() -> None:
    release = trio.Event()
    seen: list[tuple[str, Any, Any, Any]] = []
    cancelled: list[Any] = []

    async def answer(name: str, arguments: Any, meta: Any, rid: Any) -> Answer:
        seen.append((name, arguments, meta, rid))
        if rid != "quick":
            try:
                await release.wait()
            except trio.Cancelled:
                cancelled.append(rid)
                raise
        return ANSWERS[0]

    async with _door(answer, version="2025-06-18") as session:
        await session.send(_frame("quick", _meta={"traceparent": "00-x"}), _frame(2), _frame(3))
        assert await session.answer() == {
            "jsonrpc": "2.0",
            "id": "quick",
            "result": ANSWERS[0].wire(),
        }
        await trio.testing.wait_all_tasks_blocked()
        # The peer cancels 2 (its id as a string still correlates): nothing is written for it.
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        await session.send(json.dumps({**cancel, "params": {"requestId": "2"}}))
        await trio.testing.wait_all_tasks_blocked()
        # 3 still runs when the input ends: cut at the drain deadline, answered "Connection
        # closed", as the SDK does.
        rest = await session.rest()
    assert ("task_get", {"channel": "c", "number": 1}, {"traceparent": "00-x"}, "quick") in seen
    assert sorted(cancelled) == [2, 3]
    assert rest == [
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32000, "message": "Connection closed"}},
    ]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "sdk"])
async def test_a_cut_call_whose_outcome_is_journaled_is_never_answered_closed(
    direct: bool,
) -> None:
    # The journal holds the call's outcome, then the end cuts it before its answer: it is left
    # to `answer_undelivered`, on either route, never answered -32000.
    holder: list[Door] = []

    async def answer(name: str, arguments: Any, meta: Any, rid: Any) -> Answer:
        holder[0]._unanswered.journaled(rid, "s.1", "call_result")
        await trio.sleep_forever()
        raise AssertionError

    async with _door(answer, direct=direct) as session:
        holder.append(session.door)
        await session.send(_frame(5))
        await trio.testing.wait_all_tasks_blocked()
        rest = await session.rest()
    assert rest == []
    assert 5 in session.door._unanswered.calls


async def test_a_duplicate_id_in_flight_is_refused_once_on_either_route() -> None:
    release = trio.Event()

    async def answer(*args: Any) -> Answer:
        await release.wait()
        return ANSWERS[0]

    for direct in (True, False):
        async with _door(answer, direct=direct) as session:
            await session.send(_frame(7), _frame("7"))
            refused = await session.answer()
            assert refused["id"] == "7" and refused["error"]["code"] == -32600
            release.set()
            assert (await session.answer())["result"] == ANSWERS[0].wire()
            await session.rest()
        release = trio.Event()


async def test_frames_stay_whole_when_the_pipe_is_full() -> None:
    # Frames far over the pipe's buffer, from several tasks at once: written in part at once,
    # the rest under the lock, never interleaved.
    read_fd, write_fd = os.pipe()
    writer = _stdio._Writer(trio.lowlevel.FdStream(write_fd))
    frames = [json.dumps({"id": i, "pad": str(i) * (300_000 + i)}) + "\n" for i in range(6)]
    received = bytearray()
    async with trio.lowlevel.FdStream(read_fd) as source:
        async with trio.open_nursery() as nursery:
            for frame in frames:
                nursery.start_soon(writer.send, frame.encode())
            while len(received) < sum(len(f) for f in frames):
                received += await source.receive_some(1 << 16)
    lines = received.decode().splitlines(keepends=True)
    assert sorted(lines) == sorted(frames)


async def test_a_bug_is_answered_without_its_text_and_a_closed_stdout_is_survived() -> None:
    async def broken(*args: Any) -> Answer:
        raise ValueError("secret detail")

    async with _door(broken) as session:
        await session.send(_frame(1))
        assert await session.answer() == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32603, "message": "Internal error"},
        }
        await session.rest()

    async with _door(_first) as session:
        session.wire.end()  # the client closed its end: the answer is dropped, the session goes on
        await session.send(_frame(2))
        await trio.testing.wait_all_tasks_blocked()
        session.wire.close()
    assert session.door._unanswered.stdout_closed
