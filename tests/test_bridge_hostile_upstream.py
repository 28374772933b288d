"""Hostile upstream bodies and bugs inside a call: each ends in one classified, journaled outcome
(never a JSON-RPC error with Python text), and the journal verifies after each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from bridge._budget import encode_cursor, list_digest

from .bridge_inprocess import error_of, inprocess_bridge, kinds_of, verified

TASK = {
    "channel": "general",
    "number": 1,
    "scopeId": "tsk_1",
    "title": "t",
    "status": "todo",
    "priority": None,
    "assignee": None,
    "labels": [],
    "parent": None,
    "subtaskCount": 0,
    "updatedAt": "2026-12-02T00:00:00.000000Z",
}
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
    cursor = encode_cursor(None, 2, list_digest(args))
    body = msgspec.json.encode({"channel": "general", "items": {"not": "a list"}})
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(_raw(body))) as (bridge, _):
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
    import journal

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
