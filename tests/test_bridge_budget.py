"""Result budgets: a cut list resumes exactly after its last item; nothing looks complete."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge._budget import decode_cursor, encode_cursor, fit, list_digest
from bridge._errors import ToolError


def _items(n: int) -> list[dict[str, Any]]:
    return [{"number": i, "title": "x" * 150, "labels": ["l" * 40] * 10} for i in range(1, n + 1)]


def test_a_result_within_budget_is_untouched() -> None:
    envelope = {"data": {"channel": "general", "items": _items(2)}, "meta": {}}
    before = json.dumps(envelope)
    assert not fit("collection", 10_000, envelope, list_state=(None, 0, "d"))
    assert json.dumps(envelope) == before


def test_a_cut_list_is_marked_and_its_cursor_resumes_after_the_last_kept_item() -> None:
    envelope: dict[str, Any] = {"data": {"channel": "general", "items": _items(40)}, "meta": {}}
    args = {"channel": "general", "limit": 40}
    assert fit("collection", 8_000, envelope, list_state=("up1", 5, "d"), list_arguments=args)
    result = envelope
    assert result["meta"]["truncated"] is True
    assert len(json.dumps(result, separators=(",", ":"))) <= 8_000
    assert result["meta"]["continuation"] == {
        "tool": "task_list",
        "arguments": {**args, "cursor": result["meta"]["next_cursor"]},
    }
    kept = len(result["data"]["items"])
    assert 0 < kept < 40
    assert decode_cursor(result["meta"]["next_cursor"], "d") == ("up1", 5 + kept)


def test_bridge_cursors_are_bound_to_the_query() -> None:
    args = {"channel": "general", "query": "x"}
    cursor = encode_cursor(None, 3, list_digest(args))
    assert decode_cursor(cursor, list_digest({**args, "limit": 5})) == (None, 3)
    with pytest.raises(ToolError) as mismatch:
        decode_cursor(cursor, list_digest({**args, "status": "done"}))
    assert mismatch.value.code == "cursor_mismatch"
    with pytest.raises(ToolError) as invalid:
        decode_cursor("bt1.!!!", "d")
    assert invalid.value.code == "cursor_invalid"
    assert decode_cursor("opaque-upstream", "d") == ("opaque-upstream", 0)


def test_a_receipt_keeps_task_identities() -> None:
    tasks = [
        {
            "channel": "g",
            "number": i,
            "scope_id": f"tsk_{i}",
            "title": "t",
            "labels": ["x" * 50] * 20,
        }
        for i in range(50)
    ]
    result: dict[str, Any] = {"data": {"tasks": tasks}, "meta": {}}
    assert fit("receipt", 8_000, result)
    assert result["meta"]["truncated"] is True and len(result["data"]["tasks"]) == 50
    assert set(result["data"]["tasks"][0]) == {"channel", "number", "scope_id", "title"}
