"""The append-only, hash-chained SQLite event log; knows nothing of MCP."""

__all__: list[str] = []
