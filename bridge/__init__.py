"""The trio stdio MCP server exposing the seven canonical Task tools."""

__version__ = "0.1.0"

__all__ = ["__version__"]
