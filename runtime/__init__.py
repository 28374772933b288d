"""The reference Agent Runtime API: contract section 13 over real HTTP on loopback, SQLite storage.

It stands in for the AgentTeam server: the embedded default upstream of the bridge and the peer
of every integration test. It imports nothing of the bridge or the journal (it is the far side
of the wire). See docs/runtime.md for routes, semantics, error codes and the admin surface.

Names resolve on first use (PEP 562): the token command ``python -m
agentteam_task_bridge.runtime mint-token`` (which a bridge runs for every fresh token) needs only
the store, not trio and the HTTP server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._dto import FaultSpec
    from ._errors import ApiError
    from ._faults import OPS, Faults
    from ._seed import AGENT_ID, BOARDS, HUMAN_ID, OTHER_AGENT_ID, WORKSPACE_ID, seed_local
    from ._server import Runtime, RuntimeConfig, mint_command, open_runtime, serve_forever
    from ._store import Principal, Store

# public name -> the private module defining it
_WHERE: dict[str, str] = {
    "FaultSpec": "_dto",
    "ApiError": "_errors",
    **dict.fromkeys(["OPS", "Faults"], "_faults"),
    **dict.fromkeys(
        ["AGENT_ID", "BOARDS", "HUMAN_ID", "OTHER_AGENT_ID", "WORKSPACE_ID", "seed_local"], "_seed"
    ),
    **dict.fromkeys(
        ["Runtime", "RuntimeConfig", "mint_command", "open_runtime", "serve_forever"], "_server"
    ),
    **dict.fromkeys(["Principal", "Store"], "_store"),
}

__all__ = [
    "AGENT_ID",
    "BOARDS",
    "HUMAN_ID",
    "OPS",
    "OTHER_AGENT_ID",
    "WORKSPACE_ID",
    "ApiError",
    "FaultSpec",
    "Faults",
    "Principal",
    "Runtime",
    "RuntimeConfig",
    "Store",
    "mint_command",
    "open_runtime",
    "seed_local",
    "serve_forever",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
