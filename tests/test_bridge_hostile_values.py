"""Values a hostile upstream puts inside a well-shaped answer: every integer the model gets is one
it can send back and a JSON client holds exactly (a task number 1 to 2**53, a count 0 to 2**53;
JavaScript reads 1e400 as Infinity, and a strict client's validator then refuses the whole answer),
and every cursor is one the model can send back (the inputs' `cursor`: 1-2048 characters), even
once the bridge wraps it after a cut. Anything else is `upstream_malformed` for a read, never a
result over its budget or the silent end of a list. In-process over the production call path."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentteam_task_bridge.bridge._cursor import MAX_UPSTREAM_CURSOR
from agentteam_task_bridge.bridge._registry import TOOLS
from agentteam_task_bridge.bridge.testing import upstream_task

from .bridge_inprocess import error_of, inprocess_bridge, verified

LIST = ("task_list", {"channel": "general"})
GET = ("task_get", {"channel": "general", "number": 1})
SAFE = 2**53  # the inputs' largest task number: exact in every JSON client


def page(*items: Any, **top: Any) -> bytes:
    return msgspec.json.encode({"channel": "general", "items": list(items), **top})


def detail(**fields: Any) -> bytes:
    task = upstream_task(
        description=None,
        checklist=[],
        urls=[],
        attachments=[],
        blocker=None,
        thread=None,
        creator=None,
        createdAt="2026-12-01T00:00:00Z",
        checkpoints={"items": [], "total": 0},
        subtasks={"items": [], "total": 0},
    )
    return msgspec.json.encode({"task": {**task, **fields}})


def literal(body: bytes, old: bytes, new: bytes) -> bytes:
    assert old in body
    return body.replace(old, new)


CHECKPOINT = {"id": 1, "summary": "s", "author": None, "createdAt": "2026-12-01T00:00:00Z"}
# case -> (tool call, upstream body): each is upstream_malformed.
MALFORMED: dict[str, tuple[tuple[str, dict[str, Any]], bytes]] = {
    "task #0": (LIST, page(upstream_task(number=0))),
    "a negative number": (LIST, page(upstream_task(number=-3))),
    "a number past 2**53": (LIST, page(upstream_task(number=SAFE + 1))),
    "a 401-digit number": (
        LIST,
        literal(page(upstream_task()), b'"number":1', b'"number":1' + b"0" * 400),
    ),
    "parent #0": (LIST, page(upstream_task(parent=0))),
    "a negative subtask count": (LIST, page(upstream_task(subtaskCount=-1))),
    "a subtask count of 2**64": (LIST, page(upstream_task(subtaskCount=2**64))),
    "a 65-character revision": (LIST, page(upstream_task(updatedAt="2" * 65))),
    "a checkpoint id of -1": (
        GET,
        detail(checkpoints={"items": [{**CHECKPOINT, "id": -1}], "total": 1}),
    ),
    "a subtask #0": (
        GET,
        detail(subtasks={"items": [{"number": 0, "title": "s", "status": "todo"}], "total": 1}),
    ),
    "an attachment of -1 bytes": (
        GET,
        detail(attachments=[{"name": "a", "mediaType": "text/plain", "sizeBytes": -1}]),
    ),
    "a numeric cursor": (LIST, page(upstream_task(), nextCursor=5)),
    "an empty cursor": (LIST, page(upstream_task(), nextCursor="")),
    "a cursor with NUL": (LIST, page(upstream_task(), nextCursor="a\x00b")),
    "a cursor with a space": (LIST, page(upstream_task(), nextCursor="a b")),
    "a cursor with a quote": (LIST, page(upstream_task(), nextCursor='a"b')),
    "a non-ASCII cursor": (LIST, page(upstream_task(), nextCursor="é" * 10)),
    "a cursor one too long": (
        LIST,
        page(upstream_task(), nextCursor="c" * (MAX_UPSTREAM_CURSOR + 1)),
    ),
    "a 100 KB cursor": (LIST, page(upstream_task(), nextCursor="c" * 100_000)),
}


def answering(body: bytes) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, content=body))


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_value_the_model_could_not_send_back_is_malformed(
    tmp_path: Path, case: str
) -> None:
    (tool, arguments), body = MALFORMED[case]
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, answering(body)) as (bridge, _):
        result = await bridge.call(tool, arguments, {}, 1)
    assert error_of(result)["code"] == "upstream_malformed", result.structured_content
    verified(path)


async def test_the_edges_of_every_range_are_answered(tmp_path: Path) -> None:
    cursor = "A-z_0.9~!#[]" * (MAX_UPSTREAM_CURSOR // 12) + "x" * (MAX_UPSTREAM_CURSOR % 12)
    assert len(cursor) == MAX_UPSTREAM_CURSOR
    listed = page(
        upstream_task(number=SAFE, parent=SAFE - 1, subtaskCount=SAFE, updatedAt="9" * 64),
        nextCursor=cursor,
    )
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, answering(listed)) as (bridge, _):
        result = await bridge.call(*LIST, {}, 1)
    assert not result.is_error, result.structured_content
    structured: Any = result.structured_content
    assert structured["data"]["items"][0]["number"] == SAFE
    wrapped = structured["meta"]["next_cursor"]  # the bridge's, naming the upstream's own
    assert wrapped.startswith("bt1.") and len(wrapped) <= 2048
    body = wrapped[4:].rpartition(".")[0]
    assert json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["u"] == cursor
    verified(path)


async def test_an_upstream_cursor_wrapped_after_a_cut_can_still_be_sent_back(
    tmp_path: Path,
) -> None:
    # The longest upstream cursor, sent back by the model; the page it fetches is cut at
    # `limit`, so the bridge's cursor wraps it with the last item's key.
    upstream = "Zz-_.~" * (MAX_UPSTREAM_CURSOR // 6) + "q" * (MAX_UPSTREAM_CURSOR % 6)
    items = [upstream_task(number=SAFE - i, updatedAt="9" * 64) for i in range(3)]
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.params.get("cursor", ""))
        return httpx.Response(200, content=page(*items, nextCursor=upstream))

    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(handler)) as (bridge, _):
        arguments = {"channel": "general", "limit": 1, "sort": "updated", "cursor": upstream}
        first: Any = (await bridge.call("task_list", arguments, {}, 1)).structured_content
        assert "error" not in first, first
        wrapped = first["meta"]["next_cursor"]
        assert wrapped.startswith("bt1.") and len(wrapped) <= 2048
        again: Any = (
            await bridge.call("task_list", {**arguments, "cursor": wrapped}, {}, 2)
        ).structured_content
    assert "error" not in again, again
    assert [i["number"] for i in first["data"]["items"] + again["data"]["items"]] == [
        SAFE,
        SAFE - 1,
    ]
    assert sent == [upstream, upstream]  # the wrapped cursor fetched the same upstream page


def _integers(schema: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    if isinstance(schema, list):
        return [found for item in schema for found in _integers(item, path)]
    if not isinstance(schema, dict):
        return []
    here = [(path, schema)] if schema.get("type") == "integer" else []
    return here + [
        found for key, value in schema.items() for found in _integers(value, f"{path}.{key}")
    ]


def test_every_integer_of_every_output_schema_is_bounded_to_exact_json_numbers() -> None:
    found = [
        (name, where, schema)
        for name, spec in TOOLS.items()
        for where, schema in _integers(spec.tool.output_schema)
    ]
    assert len(found) > 20
    unbounded = [
        (name, where)
        for name, where, schema in found
        if not (0 <= schema.get("minimum", -1) and schema.get("maximum", SAFE + 1) <= SAFE)
    ]
    assert unbounded == []


# (tool call, upstream status, body): a product error a hostile upstream answers where it does
# not fit; any suggestion must still be a call the tool's inputSchema admits.
NO_FIT: dict[str, tuple[tuple[str, dict[str, Any]], int, bytes]] = {
    "stale_update to a create": (
        ("task_create", {"channel": "general", "tasks": [{"title": "x"}]}),
        409,
        msgspec.json.encode({"error": {"code": "stale_update", "message": "m"}}),
    ),
    "subtask_mode_required to a list": (
        LIST,
        409,
        msgspec.json.encode({"error": {"code": "subtask_mode_required", "message": "m"}}),
    ),
    "a board name no call takes as the first candidate": (
        LIST,
        404,
        msgspec.json.encode(
            {
                "error": {
                    "code": "channel_not_found",
                    "message": "m",
                    "candidates": [{"channel": "Other Board!"}, {"channel": "eng"}],
                }
            }
        ),
    ),
}


@pytest.mark.parametrize("case", list(NO_FIT))
async def test_a_suggestion_after_a_misplaced_error_is_still_a_valid_call(
    tmp_path: Path, case: str
) -> None:
    from jsonschema import Draft202012Validator

    (tool, arguments), status, body = NO_FIT[case]
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    async with inprocess_bridge(tmp_path / "j.db", transport) as (bridge, _):
        result = await bridge.call(tool, arguments, {}, 1)
    action = error_of(result).get("suggested_action")
    if action is not None:
        schema = TOOLS[action["tool"]].tool.input_schema
        assert list(Draft202012Validator(schema).iter_errors(action["arguments"])) == [], action
    if case.startswith("a board name"):
        assert action == {"tool": "task_list", "arguments": {"channel": "eng"}}
