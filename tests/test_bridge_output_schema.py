"""Every answer of all seven tools is valid against the tool's declared outputSchema.

Hypothesis draws arguments from each tool's own inputSchema (strings at their maximum length in
4-byte emoji, CJK and JSON escapes; lists at their maximum size; near-valid arguments that the
bridge refuses) and calls the real bridge in-process over the SDK's in-memory transport, against
the reference runtime over real loopback HTTP and a real journal. Every answer, success or error,
truncated or not, must pass a JSON Schema 2020-12 validator and the SDK client's own output
validation, carry the same JSON in its text, and fit the budget when it succeeded; no call is
answered with an error that a size or a well-behaved upstream could cause.

CI runs a bounded, derandomized sample. A longer local run:
    AGENTTEAM_SCHEMA_EXAMPLES=10000 .venv/bin/python -m pytest tests/test_bridge_output_schema.py
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from mcp.client import ClientSession

from agentteam_task_bridge.bridge._call import Session
from agentteam_task_bridge.bridge._journaling import open_journal
from agentteam_task_bridge.bridge._registry import TOOLS
from agentteam_task_bridge.bridge.testing import ScriptedTokens, bridge_over, serve_in_memory
from agentteam_task_bridge.journal import META_CALLBACK, META_RUN
from agentteam_task_bridge.runtime import AGENT_ID, RuntimeConfig, open_runtime
from tools.reliability.portal import Portal, background

EXAMPLES = int(os.environ.get("AGENTTEAM_SCHEMA_EXAMPLES", "150"))
VALIDATORS = {name: Draft202012Validator(spec.tool.output_schema) for name, spec in TOOLS.items()}
# Errors a well-behaved upstream and a valid size can never cause.
NEVER = {"upstream_malformed", "outcome_unknown", "internal_error", "upstream_failure"}
RUN, CALLBACK = "run_schema", "cb_schema"
RICH = 51  # each board's task with every field at its maximum (after 50 seeded titles)
WIDE = ("😀", "漢", "é", "a", '"', "\\", "\n", "a😀漢é")  # 4-, 3-, 2-, 1-byte, escapes, mixed


@dataclass
class Stand:
    session: ClientSession
    portal: Portal
    codes: Counter[str] = field(default_factory=Counter)


@asynccontextmanager
async def _serve(directory: Path) -> AsyncIterator[ClientSession]:
    async with open_runtime(RuntimeConfig()) as runtime:
        runtime.store.open_callback(runtime.workspace_id, RUN, CALLBACK, AGENT_ID)
        # A fresh token at every fetch, so a long run outlives any token's TTL.
        tokens = ScriptedTokens(lambda _: runtime.mint_token(AGENT_ID), kind="test:minted")
        async with open_journal(directory / "journal.db", durable=False) as journal:
            bridge = bridge_over(
                runtime.url,
                journal=journal,
                tokens=tokens,
                workspace_id=runtime.workspace_id,
                agent_id=AGENT_ID,
                session=Session("s_schema"),
            )
            try:
                async with serve_in_memory(bridge, journal) as client:
                    await client.list_tools()
                    await _seed(client)
                    yield client
            finally:
                await bridge.upstream.aclose()


async def _seed(client: ClientSession) -> None:
    """Tasks for the numbers the strategies draw, some at every maximum."""
    for channel in ("general", "eng"):
        batch = [{"title": "😀" * 200} for _ in range(50)]
        await client.call_tool("task_create", {"channel": channel, "tasks": batch})
        rich = {
            "title": "漢" * 200,
            "description": "😀" * 10_000,
            "labels": ["😀" * 50] * 20,
            "checklist": [{"text": "漢" * 500}] * 50,
            "urls": ["https://example.com/" + "😀" * 2000] * 20,
            "blocker": "😀" * 500,
        }
        await client.call_tool("task_create", {"channel": channel, "tasks": [rich]})


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    directory = tmp_path_factory.mktemp("schema")
    with background(partial(_serve, directory)) as (session, portal):
        stand = Stand(session, portal)
        yield stand
    print("answers by code:", dict(stand.codes))


# --- strategies from the input schemas -------------------------------------------------------


def _string(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    pattern = schema.get("pattern")
    if pattern == "^[a-z0-9][a-z0-9_-]*$":  # a board: mostly real ones
        return st.sampled_from(("general", "eng", "general", "eng", "nope"))
    if pattern and pattern.startswith("^@"):
        return st.sampled_from(("@local-agent", "@helper-agent", "@alice", "@nobody"))
    if pattern and pattern.startswith("^https?://"):
        return st.builds(
            lambda ch, n: "https://example.com/" + ch * n,
            st.sampled_from(("😀", "漢", "a")),
            st.sampled_from((1, 40, 2020)),
        )
    if pattern:
        return st.from_regex(pattern, fullmatch=True)
    low, high = schema.get("minLength", 0), schema.get("maxLength", 64)
    at_max = st.builds(lambda ch: (ch * high)[:high], st.sampled_from(WIDE))
    short = st.text(min_size=low, max_size=min(high, 12))
    return st.one_of(short, short, at_max)


def _array(schema: dict[str, Any]) -> st.SearchStrategy[list[Any]]:
    items = from_schema(schema["items"])
    low, high = schema.get("minItems", 0), schema.get("maxItems", 10)
    return st.one_of(
        st.lists(items, min_size=low, max_size=min(high, 3)),
        st.builds(lambda one: [one] * high, items),  # at the maximum size
    )


def _object(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: from_schema(v) for k, v in properties.items() if k in required},
        optional={k: from_schema(v) for k, v in properties.items() if k not in required},
    )


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the JSON Schema subset of our input schemas accepts."""
    if "anyOf" in schema:
        return st.one_of([from_schema(branch) for branch in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        return _string(schema)
    if kind == "integer":
        low, high = schema.get("minimum", -(2**31)), schema.get("maximum", 2**31)
        # Mostly the seeded numbers, the task at every maximum often, sometimes any number.
        near = st.integers(low, min(high, low + 55))
        return st.one_of(near, near, st.just(min(high, RICH)), st.integers(low, high))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return _array(schema)
    if kind == "object":
        return _object(schema)
    raise AssertionError(f"no strategy for {schema}")


def _plausible(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Steer most draws past the branch rules a flat schema cannot state, so most succeed."""
    if tool == "task_create":
        if len(arguments["tasks"]) > 1:
            arguments["tasks"] = [{"title": t["title"]} for t in arguments["tasks"]]
        arguments.pop("parent_task_scope", None)
        arguments.setdefault("channel", "general")
        arguments.pop("parent", None)
        arguments.pop("target", None)
    if tool == "task_list" and arguments.get("status") == "all":
        arguments["query"] = arguments.get("query") or "😀"
    if tool == "task_list":
        arguments.pop("cursor", None)
    if tool == "task_delete" and arguments["number"] <= RICH:
        arguments["number"] += RICH  # delete what the run created; keep the seeded tasks
    if tool == "task_update" and arguments["number"] == RICH:
        arguments["number"] = RICH + 1  # keep the task at every maximum as it is
    if tool == "task_set_claim" and len(arguments["numbers"]) > 1:
        arguments["numbers"] = list(range(1, RICH))  # the seeded 200-emoji titles: a cut receipt
    if tool == "task_update":
        arguments.pop("expected_updated_at", None)
        arguments["patch"].pop("parent", None)
        if not arguments["patch"]:
            arguments["patch"] = {"status": "in_progress"}
    return arguments


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, str] | None]:
    tool = draw(st.sampled_from(sorted(TOOLS)))
    arguments = draw(from_schema(TOOLS[tool].tool.input_schema))
    if draw(st.integers(0, 4)):  # one in five keeps what the schema alone allows
        arguments = _plausible(tool, arguments)
    meta = {META_RUN: RUN, META_CALLBACK: CALLBACK} if draw(st.booleans()) else None
    return tool, arguments, meta


# --- the property -------------------------------------------------------------------------


def check(tool: str, result: types.CallToolResult) -> str:
    structured = result.structured_content
    assert isinstance(structured, dict), result
    VALIDATORS[tool].validate(structured)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    assert json.loads(content.text.split("\n", 1)[-1]) == structured
    if result.is_error:
        code: str = structured["error"]["code"]
        assert code not in NEVER, structured
        return code
    size = len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= TOOLS[tool].budget_bytes
    return f"truncated {tool}" if structured["meta"].get("truncated") else "ok"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(call=calls())
def test_every_answer_is_valid_against_its_output_schema(
    stand: Stand, call: tuple[str, dict[str, Any], dict[str, str] | None]
) -> None:
    tool, arguments, meta = call
    stand.codes[tool] += 1

    async def run() -> types.CallToolResult:
        # The SDK's own check runs inside call_tool for successes; errors are checked the same way.
        result = await stand.session.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]
        await stand.session.validate_tool_result(tool, result)
        return result

    stand.codes[check(tool, stand.portal.run(run))] += 1
