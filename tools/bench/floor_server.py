"""The floor: a one-tool MCP server on the same SDK, low-level server under trio over stdio.

``python -m tools.bench.floor_server [--trio-stdio] [--canned PATH]`` serves one tool, ``echo``,
that returns its arguments as structured content with a short text; with ``--canned`` it returns
instead the ``{"structured": ..., "text": ...}`` held in PATH (a bridge answer captured by the
benchmark), to price the SDK's handling of a result that size. By default it uses the SDK's own
``stdio_server()`` (what PRODUCT calls "the SDK's stdio round trip"); ``--trio-stdio`` swaps in
the bridge's trio-native stdio streams, to tell the transport's cost from the bridge's own. The
SDK's OpenTelemetry middleware is removed, as the bridge removes it, so the floor is the cheapest
server the SDK allows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ECHO = types.Tool(
    name="echo",
    description="Return the arguments.",
    input_schema={"type": "object", "additionalProperties": True},
)


def build_server(canned: dict[str, Any] | None = None) -> Server[Any]:
    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[ECHO])

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if canned is not None:
            return types.CallToolResult(
                content=[types.TextContent(text=canned["text"])],
                structured_content=canned["structured"],
                is_error=False,
            )
        data = dict(params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(text="ok")],
            structured_content={"data": data, "meta": {}},
            is_error=False,
        )

    server: Server[Any] = Server("floor", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    server.middleware.clear()
    return server


async def serve(trio_native: bool, canned: dict[str, Any] | None = None) -> None:
    server = build_server(canned)
    if trio_native:
        from agentteam_task_bridge.bridge import trio_stdio

        async with trio_stdio() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The one-tool floor MCP server.")
    parser.add_argument("--trio-stdio", action="store_true", help="use the bridge's stdio streams")
    parser.add_argument("--canned", type=Path, default=None, help="answer this captured result")
    args = parser.parse_args(argv)
    trio.run(serve, args.trio_stdio, json.loads(args.canned.read_text()) if args.canned else None)


if __name__ == "__main__":
    main()
