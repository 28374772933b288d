"""Issue 28's violations, checked the way the audit found them: our own raw JSON-RPC client
against `agentteam-bridge serve --embedded` as a process, every answer validated against its
tool's `outputSchema` and its text content holding the same JSON as `structuredContent`.

The tables of each behaviour run in-process elsewhere (test_bridge_cursors, test_bridge_compat,
test_bridge_errors, test_bridge_inputs, test_bridge_suggestions, test_bridge_retry_faults,
test_bridge_budget); this file proves them once through the wire.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import regex

from tools.reliability.wire import RawBridge

from .test_bridge_sessions import default_bridge, home_env

WIDE = "\U0001f600"
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"


class Audit:
    """Calls through the raw client; each answer checked against the declared contract."""

    def __init__(self, raw: RawBridge, tools: list[dict[str, Any]]) -> None:
        self.raw = raw
        self.schemas = {t["name"]: t["outputSchema"] for t in tools}
        self.inputs = {t["name"]: t["inputSchema"] for t in tools}

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await self.raw.call(name, arguments)
        result = answer["result"]
        structured = result["structuredContent"]
        [text] = [c["text"] for c in result["content"] if c["type"] == "text"]
        tool = name if name in self.schemas else None
        if tool is not None:
            jsonschema.validate(structured, self.schemas[tool])
        # The text is the same JSON (after one summary line for a result).
        body = text if result["isError"] else text.split("\n", 1)[1]
        assert json.loads(body.split("\n[journal:")[0]) == structured
        action = structured.get("error", {}).get("suggested_action")
        if action is not None:  # a suggestion is a valid call of its tool
            jsonschema.validate(action["arguments"], self.inputs[action["tool"]])
        return {"is_error": result["isError"], **structured}

    async def ok(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await self.call(name, arguments)
        assert not answer["is_error"], answer
        return answer

    async def fails(self, name: str, arguments: dict[str, Any], code: str) -> dict[str, Any]:
        answer = await self.call(name, arguments)
        assert answer["is_error"] and answer["error"]["code"] == code, answer
        error: dict[str, Any] = answer["error"]
        return error


async def test_issue_28_through_a_raw_client(tmp_path: Path) -> None:
    env = home_env(tmp_path)
    async with default_bridge(env, "--embedded", "--compat", "forward", name="audit") as raw:
        await raw.initialize()
        tools = (await raw.request("tools/list", {}))["result"]["tools"]
        audit = Audit(raw, tools)

        # B24: a page cut by the budget, a task updated between pages: nothing skipped.
        labels = [f"{i:02d}" + WIDE * 48 for i in range(20)]
        for _ in range(31):
            await audit.ok(
                "task_create",
                {"channel": "eng", "tasks": [{"title": WIDE * 200, "labels": labels}]},
            )
        first = await audit.ok("task_list", {"channel": "eng", "limit": 31})
        kept = [t["number"] for t in first["data"]["items"]]
        assert kept == list(range(1, len(kept) + 1)) and len(kept) < 31
        cursor = first["meta"]["next_cursor"]
        await audit.ok("task_update", {"channel": "eng", "number": 2, "patch": {"status": "done"}})
        # B23: another limit continues after the last task given.
        rest = await audit.ok("task_list", {"channel": "eng", "limit": 3, "cursor": cursor})
        assert [t["number"] for t in rest["data"]["items"]] == [len(kept) + i for i in (1, 2, 3)]
        # B22: an edited cursor is refused.
        edited = cursor[:-1] + ("0" if cursor[-1] != "0" else "1")
        await audit.fails("task_list", {"channel": "eng", "cursor": edited}, "cursor_invalid")

        # A8: under --compat forward, an old name never runs the opposite of the call.
        error = await audit.fails(
            "task_claim", {"channel": "eng", "numbers": [1], "claimed": False}, "invalid_arguments"
        )
        assert list(error["field_errors"]) == ["$.claimed"]

        # C4 / C5: impossible instants are invalid; the same instant spelled longer is current.
        for impossible in ("2026-02-30T00:00:00Z", "2026-13-45T99:99:99Z"):
            error = await audit.fails(
                "task_update",
                {
                    "channel": "eng",
                    "number": 1,
                    "patch": {"title": "t"},
                    "expected_updated_at": impossible,
                },
                "invalid_arguments",
            )
            assert list(error["field_errors"]) == ["$.expected_updated_at"]
        task = (await audit.ok("task_get", {"channel": "eng", "number": 1}))["data"]["task"]
        await audit.ok(
            "task_update",
            {
                "channel": "eng",
                "number": 1,
                "patch": {"title": "t"},
                "expected_updated_at": task["updated_at"][:-1] + "000Z",
            },
        )

        # X4 / G1: "" is none in create and update alike; a blank title is refused.
        await audit.fails(
            "task_create", {"channel": "eng", "tasks": [{"title": "  "}]}, "invalid_arguments"
        )
        await audit.ok("task_update", {"channel": "eng", "number": 1, "patch": {"description": ""}})
        task = (await audit.ok("task_get", {"channel": "eng", "number": 1}))["data"]["task"]
        assert task["description"] is None

        # B4: a description cut to the detail budget keeps its ZWJ families whole.
        await audit.ok(
            "task_update", {"channel": "eng", "number": 3, "patch": {"description": FAMILY * 1428}}
        )
        got = await audit.ok("task_get", {"channel": "eng", "number": 3})
        assert "$.data.task.description" in got["meta"]["truncated_fields"]
        head = got["data"]["task"]["description"].removesuffix("…")
        assert head and regex.findall(r"\X", head) == [FAMILY] * (len(head) // len(FAMILY))
