"""Hostile upstream bodies and bugs inside a call: each ends in one classified, journaled outcome
(never a JSON-RPC error with Python text), and the journal verifies after each."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio

from agentteam_task_bridge.bridge._cursor import PageState, list_digest

from .bridge_inprocess import TASK, error_of, inprocess_bridge, kinds_of, verified

READ = ("task_list", {"channel": "general"})
WRITE = ("task_create", {"channel": "general", "tasks": [{"title": "x"}]})


def _nested(depth: int) -> bytes:
    return b'{"channel":"general","items":' + b"[" * depth + b"]" * depth + b"}"


def _raw(body: bytes) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(200, content=body)


def _boom(request: httpx.Request) -> httpx.Response:
    raise RuntimeError("secret-exception-text /etc/passwd")


# case -> (upstream handler, code for a read, code for a mutation)
CASES: dict[str, tuple[Callable[[httpx.Request], httpx.Response], str, str]] = {
    "nested past the recursion limit": (
        _raw(_nested(100_000)),
        "upstream_malformed",
        "outcome_unknown",
    ),
    "nested past the depth limit": (_raw(_nested(200)), "upstream_malformed", "outcome_unknown"),
    "invalid UTF-8": (
        _raw(b'{"channel":"general","items":[],"x":"\xff\xfe"}'),
        "upstream_malformed",
        "outcome_unknown",
    ),
    "not JSON": (_raw(b"<html>oops</html>"), "upstream_malformed", "outcome_unknown"),
    "a JSON scalar": (_raw(b"12"), "upstream_malformed", "outcome_unknown"),
    "wrong types": (
        _raw(b'{"channel":7,"items":{"a":1},"tasks":"x","parent":[],"reused":"no"}'),
        "upstream_malformed",
        "outcome_unknown",
    ),
    "a huge body": (
        _raw(b'{"pad":"' + b"x" * (3 << 20) + b'"}'),
        "upstream_malformed",
        "outcome_unknown",
    ),
    "a bug inside the call": (_boom, "internal_error", "internal_error"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("tool", ["read", "mutation"])
async def test_a_hostile_body_is_classified_journaled_and_verifies(
    tmp_path: Path, case: str, tool: str
) -> None:
    handler, read_code, write_code = CASES[case]
    name, args = READ if tool == "read" else WRITE
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(handler)) as (bridge, _):
        result = await bridge.call(name, args, {}, 1)
    error = error_of(result)
    assert error["code"] == (read_code if tool == "read" else write_code)
    text = result.content[0].text  # type: ignore[union-attr]
    assert "secret-exception-text" not in text and "Traceback" not in text
    assert "secret-exception-text" not in str(result.structured_content)
    assert b"secret-exception-text" not in path.read_bytes()
    assert path.stat().st_size < 2 << 20  # a hostile body is journaled capped
    [kinds] = kinds_of(path).values()
    assert kinds[-1] == "call_error"
    result_of_verify = verified(path)
    if tool == "mutation":  # the change may have been applied: listed for reconciliation
        assert [c.reason for c in result_of_verify.in_doubt] == [write_code]


async def test_items_that_are_not_a_list_under_a_bridge_cursor_are_malformed(
    tmp_path: Path,
) -> None:
    args: dict[str, Any] = {"channel": "general"}
    body = msgspec.json.encode({"channel": "general", "items": {"not": "a list"}})
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(_raw(body))) as (bridge, _):
        page = PageState(None, list_digest(args, bridge.launch.workspace_id))
        cursor = bridge.cursors.issue(page, [{"number": 2}])
        result = await bridge.call("task_list", {**args, "cursor": cursor}, {}, 1)
        ok = await bridge.call(
            "task_get", {"channel": "general", "number": 1}, {}, 2
        )  # the session goes on
    assert error_of(result)["code"] == "upstream_malformed"
    assert ok.is_error  # the same hostile body answers task_get too, classified
    verified(path)


async def test_a_deep_body_is_journaled_as_text_not_as_a_tree(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(_raw(_nested(5000)))) as (bridge, _):
        await bridge.call(*READ, {}, 1)
    from agentteam_task_bridge import journal

    with journal.open_reader(path) as reader:
        [response] = list(reader.events(kind="upstream_response"))
    assert isinstance(response.payload, journal.UpstreamResponse)
    assert response.payload.body["problem"] == "too_deep"
    assert len(response.payload.body["unparsed"]) <= 4096


async def test_a_good_body_still_passes_the_depth_check(tmp_path: Path) -> None:
    titled = {**TASK, "title": "[[[[ {{ not ]] brackets"}
    body = msgspec.json.encode({"channel": "general", "items": [titled] * 3})
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(_raw(body))) as (bridge, _):
        result = await bridge.call(*READ, {}, 1)
    assert not result.is_error, result.structured_content
    verified(path)


class HostileServer:
    """An HTTP/1.1 server on loopback that answers every request with the current `mode`."""

    def __init__(self) -> None:
        self.mode = "deep"
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                got = await stream.receive_some(65536)
                if not got:
                    return
                buffer += got
            await self.answer(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the bridge hung up on a hostile answer: as it should
        finally:
            await trio.aclose_forcefully(stream)

    async def answer(self, stream: trio.SocketStream) -> None:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
        if self.mode == "chunked forever":
            await stream.send_all(head + b"transfer-encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (65536, b"[" * 65536)
            while True:
                await stream.send_all(chunk)
        if self.mode == "huge":
            await stream.send_all(head + b"content-length: %d\r\n\r\n" % (64 << 20))
            block = b" " * 65536
            while True:
                await stream.send_all(block)
        body = {
            "deep": _nested(100_000),
            "invalid utf-8": b'{"channel":"general","items":[],"x":"\xc3\x28"}',
            "items not a list": b'{"channel":"general","items":{"a":1}}',
        }[self.mode]
        await stream.send_all(head + b"content-length: %d\r\n\r\n" % len(body) + body)


@pytest.mark.slow  # 64 MB of hostile bytes over loopback: bounded by the 32 MB response cap
async def test_a_hostile_http_server_never_crashes_the_bridge_subprocess(tmp_path: Path) -> None:
    from agentteam_task_bridge import journal, replay

    from .bridge_harness import open_bridge

    server = HostileServer()
    path = tmp_path / "j.db"
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        env = {
            "AGENTTEAM_API_URL": f"http://127.0.0.1:{port}",
            "AGENTTEAM_WORKSPACE_ID": "ws_1",
            "AGENTTEAM_AGENT_ID": "agt_1",
            "AGENTTEAM_TOKEN": "tok-hostile",
        }
        cases = [
            ("deep", "task_list", {"channel": "general"}, "upstream_malformed"),
            ("deep", *WRITE, "outcome_unknown"),
            ("invalid utf-8", "task_list", {"channel": "general"}, "upstream_malformed"),
            ("items not a list", "task_list", {"channel": "general"}, "upstream_malformed"),
            ("huge", "task_list", {"channel": "general"}, "upstream_malformed"),
            ("chunked forever", "task_list", {"channel": "general"}, "upstream_malformed"),
            ("chunked forever", *WRITE, "outcome_unknown"),
        ]  # fmt: skip
        async with open_bridge(env, path) as bridge:
            for mode, name, arguments, code in cases:
                server.mode = mode
                await bridge.fails(name, arguments, code=code)
            stderr = bridge.stderr()
        nursery.cancel_scope.cancel()
    assert "Traceback" not in stderr
    key = journal.load_key(
        tmp_path / "config" / "agentteam-bridge" / "journal-signing.key", create=False
    )
    result = replay.verify([path], key=key)
    assert result.ok, result.findings
    assert len(result.in_doubt) == 2  # the two mutations: sent, outcome unknown
