"""The peer: what a user would build instead of the bridge, measured beside it.

``python -m tools.bench.peer_server`` (needs the ``[bench]`` extra: ``pip install -e '.[bench]'``)
is a FastMCP server, as its documentation teaches one, with two tools, ``task_get`` and
``task_create``, that forward their arguments to the same Agent Runtime routes the bridge calls
with one shared ``httpx.AsyncClient``, and return the runtime's JSON. No journal, no validation
beyond FastMCP's own, no redaction, no idempotency, no token refresh: the cost of the bridge's
guarantees is what it spends beyond this. It reads the bridge's environment (``AGENTTEAM_API_URL``,
``AGENTTEAM_WORKSPACE_ID``, ``AGENTTEAM_AGENT_ID``, ``AGENTTEAM_TOKEN``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

import httpx

EXTRA_MISSING = (
    "the FastMCP peer is not measured: the [bench] extra is not installed"
    " (pip install -e '.[bench]')"
)


def available() -> bool:
    """Whether FastMCP (the ``[bench]`` extra) is installed."""
    return importlib.util.find_spec("fastmcp") is not None


def fastmcp_version() -> str:
    from importlib.metadata import version

    return version("fastmcp")


def build() -> Any:
    """The FastMCP server (typed ``Any``: FastMCP is an optional extra, absent from CI)."""
    fastmcp: Any = importlib.import_module("fastmcp")
    route = (
        f"/api/v1/workspaces/{os.environ['AGENTTEAM_WORKSPACE_ID']}"
        f"/agents/{os.environ['AGENTTEAM_AGENT_ID']}/runtime/tasks"
    )
    client = httpx.AsyncClient(
        base_url=os.environ["AGENTTEAM_API_URL"],
        headers={"authorization": f"Bearer {os.environ['AGENTTEAM_TOKEN']}"},
        timeout=10.0,
        trust_env=False,
    )

    async def forward(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(route + path, json=body)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    async def task_get(channel: str, number: int) -> dict[str, Any]:
        """Read one task of a channel by its number."""
        return await forward("/get", {"channel": channel, "number": number})

    async def task_create(channel: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
        """Create tasks in a channel."""
        return await forward("", {"channel": channel, "tasks": tasks})

    return fastmcp.FastMCP("agentteam-tasks-peer", tools=[task_get, task_create])


def main() -> None:
    if not available():
        raise SystemExit(EXTRA_MISSING)
    build().run(transport="stdio", show_banner=False)


if __name__ == "__main__":
    main()
