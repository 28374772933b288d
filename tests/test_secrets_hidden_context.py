"""The hidden context never reaches a result, even when the upstream names it: a workspace or agent
id, or a workflow run or callback effect id a keyed create carried, in an error body's
`fieldErrors` keys and values, its `candidates` or its code (whole, in any letter case) becomes
`[REDACTED]` before the bridge classifies, cuts or journals it. A 2xx body is the model's own
data and keeps what it holds. In-process over the production call path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentteam_task_bridge.journal import META_CALLBACK, META_RUN, REDACTED

from .bridge_inprocess import error_of, inprocess_bridge, verified
from .secret_echo import listing, refusal

WS, AGENT = "ws_9f8e7d6c5b4a3921", "agt_0a1b2c3d4e5f6789"
RUN, CALLBACK = "run_77aa88bb99cc00dd", "cb_11ee22ff33aa44bb"
HIDDEN = (WS, AGENT, RUN, CALLBACK)
KEYED = {"channel": "general", "tasks": [{"title": "x"}], "idempotency_key": "k-1"}
META = {META_RUN: RUN, META_CALLBACK: CALLBACK}


NAMED = f"workspace {WS.upper()} agent {AGENT}, run {RUN} (callback {CALLBACK})"


ECHOES: dict[str, tuple[int, bytes]] = {
    "fieldErrors values": (
        400,
        refusal("validation_failed", fieldErrors={"$.title": NAMED}),
    ),
    "fieldErrors keys": (
        400,
        refusal("validation_failed", fieldErrors={f"$.{WS}": "bad", f"$.x_{RUN}": "bad"}),
    ),
    "candidates": (
        404,
        refusal("channel_not_found", candidates=[{"channel": "eng", AGENT: CALLBACK, "x": WS}]),
    ),
    "the error code": (400, refusal(f"no_{WS}")),
    "a 5xx code": (500, refusal(f"{AGENT}_down")),
}


@pytest.mark.parametrize("echo", list(ECHOES))
async def test_an_upstream_error_naming_hidden_context_reaches_the_model_without_it(
    tmp_path: Path, echo: str
) -> None:
    status, body = ECHOES[echo]
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, transport, workspace_id=WS, agent_id=AGENT) as (bridge, _):
        result = await bridge.call("task_create", KEYED, META, 1)
    error = error_of(result)
    text = result.content[0].text + msgspec.json.encode(result.structured_content).decode()  # type: ignore[union-attr]
    assert [v for v in HIDDEN if v.lower() in text.lower()] == [], text
    if echo.startswith("fieldErrors") or echo == "candidates":
        assert REDACTED in text and error["code"] in ("invalid_arguments", "channel_not_found")
    verified(path)


async def test_a_longer_word_holding_an_id_and_a_2xx_body_are_kept(tmp_path: Path) -> None:
    body = listing(f"notes on {WS}", "ws_9f8e7d6c5b4a39210 and xagt_0a1b2c3d4e5f6789")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    refused = refusal("validation_failed", fieldErrors={"$.title": f"near {WS}0 or {AGENT}x"})
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, transport, workspace_id=WS, agent_id=AGENT) as (bridge, _):
        listed: Any = (
            await bridge.call("task_list", {"channel": "general"}, {}, 1)
        ).structured_content
    assert [i["title"] for i in listed["data"]["items"]] == [
        f"notes on {WS}",
        "ws_9f8e7d6c5b4a39210 and xagt_0a1b2c3d4e5f6789",
    ]
    transport = httpx.MockTransport(lambda request: httpx.Response(400, content=refused))
    async with inprocess_bridge(tmp_path / "k.db", transport, workspace_id=WS, agent_id=AGENT) as (
        bridge,
        _,
    ):
        result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
    assert error_of(result)["field_errors"] == {"$.title": f"near {WS}0 or {AGENT}x"}
