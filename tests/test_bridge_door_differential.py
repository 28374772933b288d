"""One fixed session through the front door with the direct path on and off: the same bytes.

The session has every tool, a rejection, an unknown tool, an upstream error, a call the client
cancels while it waits upstream, notifications, a ping, a malformed frame and a batch; the
upstream is scripted (answers are a function of the request), the cursor signer shared, so any
byte that differs is the door's route, not the run.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import trio
import trio.testing
from mcp.server.lowlevel import Server

from agentteam_task_bridge.bridge._call import Session
from agentteam_task_bridge.bridge._cursor import Cursors
from agentteam_task_bridge.bridge._door import Door, MemoryWire
from agentteam_task_bridge.bridge._lifecycle import Unanswered
from agentteam_task_bridge.bridge._server import build_server
from agentteam_task_bridge.bridge.testing import MemoryJournal, bridge_over, upstream_task

# One key and one clock: a list page's cursor (its expiry too) is the same bytes on both paths.
CURSORS = Cursors(b"k" * 32, clock=lambda: 2_000_000_000.0)
HELD = 99  # task_get of this number waits upstream until the client cancels it


def _request(rid: Any, method: str, params: dict[str, Any] | None = None) -> str:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame)


def _call(rid: Any, name: str, arguments: Any) -> str:
    return _request(rid, "tools/call", {"name": name, "arguments": arguments})


def _notification(method: str, params: dict[str, Any] | None = None) -> str:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame)


# (frame, whether an answer is expected); sent one by one, each answer awaited.
HELLO = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "d", "version": "1"},
}
SESSION: list[tuple[str, bool]] = [
    (_request(0, "initialize", HELLO), True),
    (_notification("notifications/initialized"), False),
    (_request(1, "tools/list"), True),
    (_call(2, "task_list", {"channel": "general", "limit": 2}), True),
    (_call(3, "task_get", {"channel": "general", "number": 1}), True),
    (_call(4, "task_create", {"channel": "general", "tasks": [{"title": "a 🙂 東京"}]}), True),
    (_call(5, "task_update", {"channel": "general", "number": 1, "title": "b"}), True),
    (_call(6, "task_set_claim", {"channel": "general", "numbers": [1], "claimed": True}), True),
    (_call(7, "task_checkpoint", {"channel": "general", "number": 1, "summary": "s"}), True),
    (_call(8, "task_delete", {"channel": "general", "number": 1}), True),
    (_call(9, "task_get", {"channel": "general", "number": "x", "workspace": "w"}), True),
    (_call(10, "no_such_tool", {}), True),
    (_call(11, "task_get", {"channel": "general", "number": 404}), True),
    (_call("str-id", "task_get", {"channel": "general", "number": 1}), True),
    (_call(12, "task_get", {"channel": "general", "number": HELD}), False),
    (_notification("notifications/cancelled", {"requestId": 12, "reason": "user"}), False),
    (_notification("notifications/roots/list_changed"), False),
    (_request(13, "ping"), True),
    ('{"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": {', True),
    (json.dumps([{"jsonrpc": "2.0", "id": 15, "method": "ping"}]), True),
    (_call(16, "task_get", None), True),
]


async def _upstream(held: trio.Event, request: httpx.Request) -> httpx.Response:
    """The Agent Runtime's answer shapes (runtime/_list.py, _create.py, ...), scripted."""
    body = json.loads(request.content) if request.content else {}
    number = body.get("number") if isinstance(body, dict) else None
    if number == HELD:
        held.set()
        await trio.sleep_forever()
    if number == 404:
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no task 404"}})
    task = upstream_task()
    route = "list" if request.method == "GET" else request.url.path.rsplit("/", 1)[-1]
    shapes: dict[str, Any] = {
        "list": {"channel": "general", "items": [task, upstream_task(number=2)], "nextCursor": "c"},
        "tasks": {"channel": "general", "parent": None, "tasks": [task], "reused": False},
        "update": {"task": task, "changed": ["title"]},
        "set-claim": {
            "channel": "general",
            "claimed": True,
            "count": 1,
            "changed": [1],
            "unchanged": [],
            "failures": [],
            "tasks": [task],
        },
        "add-checkpoint": {
            "checkpoint": {"id": 1, "summary": "s", "author": "@a", "createdAt": task["updatedAt"]},
            "task": task,
        },
        "delete": {"channel": "general", "deleted": [1], "promoted": []},
    }
    return httpx.Response(200, json=shapes.get(route, {"task": task}))


async def _run(direct: bool) -> tuple[list[bytes], list[str]]:
    held = trio.Event()

    async def upstream(request: httpx.Request) -> httpx.Response:
        return await _upstream(held, request)

    journal = MemoryJournal()
    bridge = bridge_over(
        upstream,  # type: ignore[arg-type]  # httpx.MockTransport awaits an async handler
        journal=journal,
        session=Session("s_diff", unanswered=Unanswered()),
        cursors=CURSORS,
    )
    door = Door(bridge.answer, unanswered=bridge.session.unanswered, direct=direct)
    server: Server[Any] = build_server(bridge, door)
    wire = MemoryWire()
    written: list[bytes] = []

    async def run() -> None:
        async with door.streams(wire) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        wire.end()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(20):
            for frame, answered in SESSION:
                await wire.feed(frame)
                if answered:
                    written.append(await wire.frames.receive())
                elif '"number": 99' in frame:
                    await held.wait()  # the call waits upstream before the client cancels it
            await trio.testing.wait_all_tasks_blocked()
            wire.close()
            written += [data async for data in wire.frames]  # nothing more
    await bridge.upstream.aclose()
    return written, journal.kinds()


async def test_one_session_answers_the_same_bytes_with_the_direct_path_on_and_off() -> None:
    direct, direct_kinds = await _run(direct=True)
    sdk, sdk_kinds = await _run(direct=False)
    assert len(direct) == sum(answered for _, answered in SESSION)
    for sent, one, other in zip(
        [frame for frame, answered in SESSION if answered], direct, sdk, strict=True
    ):
        assert one == other, sent
    # The session's events are the same too (the cancelled call journaled on both routes).
    assert direct_kinds == sdk_kinds
    assert direct_kinds.count("call_cancelled") == 1
    answers = {a["id"]: a for a in map(json.loads, direct) if isinstance(a, dict)}
    succeeded = {rid for rid, a in answers.items() if a.get("result", {}).get("isError") is False}
    assert succeeded >= {2, 4, 5, 6, 7, 8}  # the tools' successes, not only their errors
