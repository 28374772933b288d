"""A tool call's answer, as the SDK's result model or directly as its JSON-RPC result.

The call flow builds an `Answer` once. The SDK path turns it into `CallToolResult`; the direct
path (`bridge._door`) writes `wire()` without a pydantic round trip. Both carry the same
JSON: `tests/test_bridge_direct.py` compares `wire()` with the SDK's own serialization of
`result()` at every protocol version the direct path serves.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types


class Answer:
    """The text content (which repeats the JSON), the structured envelope, and `_meta`."""

    __slots__ = ("envelope", "is_error", "meta", "text")

    def __init__(
        self, text: str, envelope: dict[str, Any], is_error: bool, meta: dict[str, Any] | None
    ) -> None:
        self.text = text
        self.envelope = envelope
        self.is_error = is_error
        self.meta = meta

    def result(self) -> types.CallToolResult:
        """The SDK's model of this answer."""
        return types.CallToolResult(
            content=[types.TextContent(text=self.text)],
            structured_content=self.envelope,
            is_error=self.is_error,
            _meta=self.meta,
        )

    def wire(self) -> dict[str, Any]:
        """The JSON-RPC `result` of this answer, as the SDK writes it on a 2024-11-05 to
        2025-11-25 connection (no `resultType`: those versions' schemas drop it)."""
        wire: dict[str, Any] = {} if self.meta is None else {"_meta": self.meta}
        # The SDK's key order, so that both paths write the same bytes (the door's
        # differential test): `_meta`, `content` (`text` before `type`), `isError`,
        # `structuredContent`.
        wire["content"] = [{"text": self.text, "type": "text"}]
        wire["isError"] = self.is_error
        wire["structuredContent"] = self.envelope
        return wire
