"""An independent audit's client: our own raw JSON-RPC client against `agentteam-bridge serve
--embedded` as a process, every answer validated against its tool's `outputSchema`, its text
content holding the same JSON as `structuredContent`, and every suggested action valid against
its tool's `inputSchema`.

The tables of each behaviour run in-process elsewhere (test_bridge_cursors, test_bridge_compat,
test_bridge_errors, test_bridge_inputs, test_bridge_suggestions, test_bridge_retry_faults,
test_bridge_budget); the test_bridge_wire_* files prove them once through the wire with this.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import jsonschema

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


@asynccontextmanager
async def audited_bridge(home: Path, *extra: str) -> AsyncIterator[Audit]:
    """`serve --embedded EXTRA` as a process in a fresh home, spoken to by the audit client."""
    async with default_bridge(home_env(home), "--embedded", *extra, name="audit") as raw:
        await raw.initialize()
        tools = (await raw.request("tools/list", {}))["result"]["tools"]
        yield Audit(raw, tools)
