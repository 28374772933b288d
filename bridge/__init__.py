"""The trio stdio MCP server exposing the seven canonical Task tools."""

__all__: list[str] = []
