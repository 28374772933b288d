"""The reference Agent Runtime API: contract section 13 over real HTTP on loopback, SQLite storage.

It stands in for the AgentTeam server: the embedded default upstream of the bridge and the peer
of every integration test. It imports nothing of the bridge or the journal (it is the far side
of the wire). See docs/runtime.md for routes, semantics, error codes and the admin surface.
"""

from ._dto import FaultSpec
from ._errors import ApiError
from ._faults import OPS, Faults
from ._seed import AGENT_ID, BOARDS, HUMAN_ID, OTHER_AGENT_ID, WORKSPACE_ID, seed_local
from ._server import Runtime, RuntimeConfig, mint_command, open_runtime, serve_forever
from ._store import Principal, Store

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
