"""The direct `tools/call` path: the same JSON as the SDK's, and the SDK's dispatcher semantics."""

from __future__ import annotations

import json
import os
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp.server.runner import MODERN_PROTOCOL_VERSIONS
from mcp_types import methods

from agentteam_task_bridge.bridge import _stdio
from agentteam_task_bridge.bridge._answer import Answer
from agentteam_task_bridge.bridge._direct import DIRECT_VERSIONS, DirectCalls

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


class _Wire:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    async def write(self, rid: int | str, data: bytes) -> None:
        assert data.endswith(b"\n") and data.count(b"\n") == 1
        line = json.loads(data)
        assert line["id"] == rid
        self.lines.append(line)


@pytest.mark.parametrize(
    "frame",
    [
        _frame(_meta={"progressToken": 3}),
        _frame(_meta={types.PROTOCOL_VERSION_META_KEY: "2026-07-28"}),
        _frame(task={"ttl": 5}),
        _frame(name=7),
        _frame(arguments=[1]),
        _frame(_meta="x"),
        _frame(rid=True),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "tools/call"}}),
    ],
)
async def test_what_the_sdk_must_interpret_goes_to_the_sdk(frame: str) -> None:
    async def never(*args: Any) -> Answer:
        raise AssertionError("not for the direct path")

    direct = DirectCalls(never)
    direct.bind(_Wire().write)
    direct.enable("2025-11-25")
    async with direct.serving():
        assert direct.take(frame) is False


async def test_nothing_is_taken_before_the_handshake_or_at_other_versions() -> None:
    async def answer(*args: Any) -> Answer:
        return ANSWERS[0]

    direct = DirectCalls(answer)
    direct.bind(_Wire().write)
    async with direct.serving():
        assert direct.take(_frame()) is False
        direct.enable("2026-07-28")
        assert direct.take(_frame()) is False
        direct.enable(None)
        assert direct.take(_frame()) is False


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

    wire = _Wire()
    direct = DirectCalls(answer)
    direct.bind(wire.write)
    direct.enable("2025-06-18")
    async with direct.serving():
        assert direct.take(_frame("quick", _meta={"traceparent": "00-x"}))
        assert direct.take(_frame(2))
        assert direct.take(_frame(3))
        await trio.testing.wait_all_tasks_blocked()
        # The peer cancels 2 (its id as a string still correlates): nothing is written for it.
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        assert not direct.take(json.dumps({**cancel, "params": {"requestId": "2"}}))
        await trio.testing.wait_all_tasks_blocked()
    # 3 was still running at shutdown: answered "Connection closed", as the SDK does.
    assert ("task_get", {"channel": "c", "number": 1}, {"traceparent": "00-x"}, "quick") in seen
    assert sorted(cancelled) == [2, 3]
    assert wire.lines == [
        {"jsonrpc": "2.0", "id": "quick", "result": ANSWERS[0].wire()},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32000, "message": "Connection closed"}},
    ]


async def test_frames_stay_whole_when_the_pipe_is_full() -> None:
    # Frames far over the pipe's buffer, from several tasks at once: written in part at once,
    # the rest under the lock, never interleaved.
    read_fd, write_fd = os.pipe()
    writer = _stdio._Writer(trio.lowlevel.FdStream(write_fd), _stdio.FrameScreen())
    frames = [json.dumps({"id": i, "pad": str(i) * (300_000 + i)}) + "\n" for i in range(6)]
    received = bytearray()
    async with trio.lowlevel.FdStream(read_fd) as source:
        async with trio.open_nursery() as nursery:
            for frame in frames:
                nursery.start_soon(writer.write, frame)
            while len(received) < sum(len(f) for f in frames):
                received += await source.receive_some(1 << 16)
    lines = received.decode().splitlines(keepends=True)
    assert sorted(lines) == sorted(frames)


async def test_a_bug_is_answered_without_its_text_and_a_closed_stdout_is_survived() -> None:
    async def broken(*args: Any) -> Answer:
        raise ValueError("secret detail")

    wire = _Wire()
    direct = DirectCalls(broken)
    direct.bind(wire.write)
    direct.enable("2025-11-25")
    async with direct.serving():
        assert direct.take(_frame(1))
    assert wire.lines == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "Internal error"}}
    ]

    async def answer(*args: Any) -> Answer:
        return ANSWERS[0]

    async def closed(rid: int | str, data: bytes) -> None:
        raise trio.BrokenResourceError

    direct = DirectCalls(answer)
    direct.bind(closed)
    direct.enable("2025-11-25")
    async with direct.serving():  # the answer is dropped; the session goes on
        assert direct.take(_frame(2))
