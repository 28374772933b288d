"""Fuzzing the MCP surface: hypothesis strategies for tool calls, and a corpus of malformed frames.

Two kinds of input. *Tool calls* (``tool_calls()``): the seven tools, deprecated and unknown
names, with arguments that are valid, nearly valid (one field dropped, retyped, renamed, made
huge or strange), hidden-context fields planted at any depth, unknown fields, arbitrary JSON and
odd ``_meta``. Each answer must be a well-formed tool result (``check_tool_answer``). *Frames*
(``frame_cases()``): invalid JSON, wrong JSON-RPC shapes and ids, deep nesting, unicode edge
cases, huge and wide arguments, batches of oversized strings; each has the answer it must get,
and the bridge must stay alive and keep answering.

A frame case with ``known_bug`` set documents a failure found here and not yet fixed (the
tests mark it ``xfail(strict=True)``, so fixing it shows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import CODES, TOOL_MIGRATIONS, TOOLS

TOOL_NAMES = tuple(TOOLS)
DEPRECATED_NAMES = tuple(sorted(TOOL_MIGRATIONS))
JSONRPC_CODES = frozenset({-32700, -32600, -32601, -32602, -32603})
MAX_CHECKED_DEPTH = 16  # the bridge refuses deeper arguments with invalid_arguments
HIDDEN_KEYS = (
    "workspace_id",
    "workspaceId",
    "agent_id",
    "agentId",
    "token",
    "bearer_token",
    "Authorization",
    "workflow_run_id",
    "callbackEffectId",
    "api-key",
    "session_id",
    "password",
)

# --- strings a model or a broken client might send ------------------------------------------

EDGE_STRINGS = (
    "",
    " ",
    "\u0000",
    "a\u0000b",
    "\ufeffgeneral",
    "\u202egeneral",  # right-to-left override
    "general\u200b",  # zero-width space
    "Ge\u0301neral",  # combining accent
    "\U0001f600" * 3,
    "\uffff\U0010ffff",
    "\x7f\x1b[31m",
    "'; DROP TABLE tasks; --",
    '"}]}',
    "%s%n%x",
    "../../etc/passwd",
    "\\u0000",
    "é" * 201,
    "x" * 4001,
)


def _text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(EDGE_STRINGS),
        st.text(max_size=40),
        st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=300),
    )


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        _text(),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5), st.dictionaries(_text(), children, max_size=5)
        ),
        max_leaves=max_leaves,
    )


def _valid_arguments(tool: str, n: int) -> dict[str, Any]:
    """A valid call of each tool against the seeded `general` board (the task may not exist)."""
    match tool:
        case "task_list":
            return {"channel": "general", "limit": 5}
        case "task_get":
            return {"channel": "general", "number": n}
        case "task_create":
            return {"channel": "general", "tasks": [{"title": f"rel-fuzz-{n}"}]}
        case "task_update":
            return {"channel": "general", "number": n, "patch": {"title": f"rel-fuzz-upd-{n}"}}
        case "task_set_claim":
            return {"channel": "general", "numbers": [n], "claimed": True}
        case "task_checkpoint":
            return {"channel": "general", "number": n, "summary": f"rel-fuzz-cp-{n}"}
        case _:
            return {"channel": "general", "number": n}


@st.composite
def _near_valid(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    args = _valid_arguments(tool, draw(st.integers(min_value=1, max_value=5)))
    mutation = draw(
        st.sampled_from(("as is", "drop", "retype", "unknown", "edge", "number", "hidden"))
    )
    keys = sorted(args)
    key = draw(st.sampled_from(keys))
    if mutation == "drop":
        del args[key]
    elif mutation == "retype":
        args[key] = draw(json_values(4))
    elif mutation == "unknown":
        args[draw(_text())] = draw(json_values(3))
    elif mutation == "edge":
        args[key] = draw(st.sampled_from(EDGE_STRINGS))
    elif mutation == "number":
        args[key] = draw(st.sampled_from((0, -1, 2**53, 2**53 + 1, 2**63, 1.5, True, "1")))
    elif mutation == "hidden":
        args = plant(args, draw(st.sampled_from(HIDDEN_KEYS)), draw(st.integers(0, 3)))
    return args


def plant(args: dict[str, Any], hidden: str, depth: int) -> dict[str, Any]:
    """`args` with `hidden` set `depth` levels down (inside a nested object or list)."""
    node: dict[str, Any] = {hidden: "ws_other"}
    for level in range(depth):
        node = {"nested": [node]} if level % 2 else {"inner": node}
    return {**args, **node} if depth == 0 else {**args, "extra": node}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Any
    meta: dict[str, Any] | None


@st.composite
def tool_calls(draw: st.DrawFn) -> ToolCall:
    kind = draw(st.sampled_from(("canonical", "canonical", "canonical", "deprecated", "unknown")))
    if kind == "canonical":
        name = draw(st.sampled_from(TOOL_NAMES))
    elif kind == "deprecated":
        name = draw(st.sampled_from(DEPRECATED_NAMES))
    else:
        name = draw(st.one_of(_text(), st.sampled_from(("Task_Get", "task_get ", "tasks/get"))))
    base = name if name in TOOLS else draw(st.sampled_from(TOOL_NAMES))
    arguments = draw(
        st.one_of(
            _near_valid(base),
            _near_valid(base),
            st.dictionaries(_text(), json_values(6), max_size=6),
            json_values(4),
        )
    )
    meta = draw(
        st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(
                    (
                        "agentteam/workflow_run_id",
                        "agentteam/callback_effect_id",
                        "agentteam/workspace_id",
                        "agentteam/agent_id",
                        "progressToken",
                    )
                ),
                st.one_of(_text(), st.integers()),
                max_size=3,
            ),
        )
    )
    return ToolCall(name, arguments, meta)


def hidden_paths(node: Any, path: str = "$", depth: int = 0) -> list[str]:
    """The JSON paths of keys naming hidden context, as the bridge looks for them."""
    if depth > MAX_CHECKED_DEPTH:
        return []
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and journal.is_hidden_name(key):
                found.append(f"{path}.{key}")
            found += hidden_paths(value, f"{path}.{key}", depth + 1)
    elif isinstance(node, list):
        for i, item in enumerate(node[:100]):
            found += hidden_paths(item, f"{path}[{i}]", depth + 1)
    return found


def _depth(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + max((_depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((_depth(v) for v in node), default=0)
    return 0


def check_tool_answer(call: ToolCall, answer: dict[str, Any]) -> list[str]:
    """What is wrong with the answer to `call` (empty when it is right)."""
    if "error" in answer:
        code = answer["error"].get("code")
        if code not in JSONRPC_CODES:
            return [f"JSON-RPC error with an unknown code {code!r}"]
        if code == -32602 and not isinstance(call.arguments, dict | None):
            return []  # arguments that are not an object: refused by the SDK, correctly
        return [f"JSON-RPC error {code} for a well-formed tools/call"]
    result = answer.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("isError"), bool):
        return ["the answer is not a tool result"]
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        return ["no structuredContent"]
    if not result["isError"]:
        problems = [] if {"data", "meta"} <= structured.keys() else ["a result without data/meta"]
        if call.name not in TOOLS:
            problems.append(f"{call.name!r} is not a tool, yet it succeeded")
        if isinstance(call.arguments, dict) and hidden_paths(call.arguments):
            problems.append("hidden context in the arguments, yet the call succeeded")
        return problems
    error = structured.get("error")
    if not isinstance(error, dict):
        return ["an error result without an error object"]
    problems = []
    if error.get("code") not in CODES:
        problems.append(f"unknown error code {error.get('code')!r}")
    if not isinstance(error.get("message"), str) or not isinstance(error.get("retryable"), bool):
        problems.append("an error without message and retryable")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    if texts and _loads(texts[0]) != structured:
        problems.append("the text content does not repeat the error JSON")
    expected = _expected_code(call)
    if expected is not None and error.get("code") != expected:
        problems.append(f"expected {expected}, got {error.get('code')}")
    return problems


def _expected_code(call: ToolCall) -> str | None:
    if call.name in DEPRECATED_NAMES:
        return None  # hint policy: deprecated_tool, or the argument checks of the replacement
    if call.name not in TOOLS:
        return "unknown_tool"
    if isinstance(call.arguments, dict) and _depth(call.arguments) <= MAX_CHECKED_DEPTH:
        if hidden_paths(call.arguments):
            return "hidden_context_field"
    return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


# --- frames ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameCase:
    """One frame; `expect`: "rpc:<code>", "tool:<code>", "tool-ok", "answer" or "none"."""

    name: str
    frame: bytes
    expect: str
    request_id: int | None = None
    known_bug: str | None = None


def _call_frame(rid: int, name: Any, arguments: Any, **extra: Any) -> bytes:
    params = {"name": name, "arguments": arguments, **extra}
    return json.dumps(
        {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    ).encode()


def frame_cases(start_id: int = 10_000) -> list[FrameCase]:
    """The malformed-frame corpus, request ids from `start_id`."""
    ids = iter(range(start_id, start_id + 10_000))
    cases: list[FrameCase] = []

    def add(name: str, build: Any, expect: str, known_bug: str | None = None) -> None:
        rid = next(ids)
        frame = build(rid) if callable(build) else build
        cases.append(FrameCase(name, frame, expect, rid, known_bug))

    def unanswered(name: str, frame: bytes) -> None:
        cases.append(FrameCase(name, frame, "none"))

    # Not JSON, or not a request: nothing owed to a request id (at most an error with a null id,
    # see docs/protocol.md); the bridge must stay up.
    for name, frame in (
        ("not json", b"not json"),
        ("truncated", b'{"jsonrpc": "2.0", "id": 5, "method": '),
        ("binary", bytes(range(256)).replace(b"\n", b"")),
        ("invalid utf-8", b"\xff\xfe\xc0\xaf"),
        ("empty object", b"{}"),
        ("array of numbers", b"[1, 2, 3]"),
        ("a response to nothing", b'{"jsonrpc":"2.0","id":424242,"result":{}}'),
        ("an error to nothing", b'{"jsonrpc":"2.0","id":424243,"error":{"code":1,"message":"x"}}'),
        ("unknown notification", b'{"jsonrpc":"2.0","method":"notifications/whatever"}'),
        (
            "cancel of an unknown request",
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999999}}',
        ),
        ("blank line", b""),
        ("whitespace", b"   \t  "),
    ):
        unanswered(name, frame)
    # Wrong JSON-RPC shapes with a usable id: a protocol error.
    add("unknown method", lambda r: _rpc(r, "nope/nothing"), "rpc:-32601")
    add("params a string", lambda r: _rpc(r, "tools/call", "x"), "rpc:-32602")
    add("params an array", lambda r: _rpc(r, "tools/call", [1]), "rpc:-32602")
    add("no tool name", lambda r: _rpc(r, "tools/call", {"arguments": {}}), "rpc:-32602")
    add("tool name a number", lambda r: _call_frame(r, 5, {}), "rpc:-32602")
    add("arguments a list", lambda r: _call_frame(r, "task_get", [1, 2]), "rpc:-32602")
    add("arguments a string", lambda r: _call_frame(r, "task_get", "x"), "rpc:-32602")
    add("method a number", lambda r: _rpc(r, 7), "rpc:-32600")
    huge = 123456789012345678901234567890
    cases.append(
        FrameCase(
            "huge integer id", b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % huge, "answer", huge
        )
    )
    # Tool-level refusals.
    add("unknown tool", lambda r: _call_frame(r, "task_teleport", {}), "tool:unknown_tool")
    add("empty tool name", lambda r: _call_frame(r, "", {}), "tool:unknown_tool")
    add("tool name 10k chars", lambda r: _call_frame(r, "t" * 10_000, {}), "tool:unknown_tool")
    add(
        "unknown field",
        lambda r: _call_frame(r, "task_get", {"channel": "general", "number": 1, "x": 1}),
        "tool:invalid_arguments",
    )
    add(
        "wrong type",
        lambda r: _call_frame(r, "task_get", {"channel": "general", "number": "1"}),
        "tool:invalid_arguments",
    )
    for hidden in ("workspace_id", "agentId", "token", "Authorization", "callback_effect_id"):
        add(
            f"hidden field {hidden}",
            lambda r, h=hidden: _call_frame(r, "task_list", {"channel": "general", h: "x"}),
            "tool:hidden_context_field",
        )
    add(
        "hidden field nested in a patch",
        lambda r: _call_frame(
            r, "task_update", {"channel": "general", "number": 1, "patch": {"agent_id": "x"}}
        ),
        "tool:hidden_context_field",
    )
    add(
        "hidden field deep in tasks",
        lambda r: _call_frame(
            r, "task_create", {"channel": "general", "tasks": [{"title": "t", "x": {"token": 1}}]}
        ),
        "tool:hidden_context_field",
    )
    add(
        "hidden context in _meta is ignored",
        lambda r: _call_frame(
            r,
            "task_list",
            {"channel": "general"},
            _meta={"agentteam/workspace_id": "ws_evil", "agentteam/agent_id": "agt_helper"},
        ),
        "tool-ok",
    )
    add("nested 40 deep", lambda r: _call_frame(r, "task_get", _nest(40)), "tool:invalid_arguments")
    add(
        "nested 1,000 deep",
        lambda r: (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"task_get",'
            b'"arguments":{"channel":"general","number":1,"deep":%s}}}'
            % (r, b'{"a":' * 1000 + b"1" + b"}" * 1000)
        ),
        "answer",
    )
    add(
        "lone surrogate escape",
        lambda r: (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"task_get",'
            b'"arguments":{"channel":"\\ud800","number":1}}}' % r
        ),
        "answer",
    )
    add(
        "NUL in a title",
        lambda r: _call_frame(
            r, "task_create", {"channel": "general", "tasks": [{"title": "rel-\u0000"}]}
        ),
        "answer",
    )
    add(
        "unicode edge cases in a title",
        lambda r: _call_frame(
            r,
            "task_create",
            {"channel": "general", "tasks": [{"title": "rel-\u202e\U0001f600\u0301\uffff"}]},
        ),
        "tool-ok",
    )
    add(
        "overlong UTF-8 in a string",
        lambda r: (
            b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"task_get",'
            b'"arguments":{"channel":"\xc0\xaf","number":1}}}' % r
        ),
        "tool:invalid_arguments",
    )
    add(
        "50,000 unknown fields",
        lambda r: _call_frame(r, "task_list", {f"k{i}": i for i in range(50_000)}),
        "tool:invalid_arguments",
    )
    add(
        "a 2 MB channel",
        lambda r: _call_frame(r, "task_get", {"channel": "g" * 2_000_000, "number": 1}),
        "tool:invalid_arguments",
    )
    add(
        "a 100,000-item list",
        lambda r: _call_frame(
            r,
            "task_set_claim",
            {"channel": "general", "numbers": list(range(1, 100_001)), "claimed": True},
        ),
        "tool:invalid_arguments",
    )
    add(
        "id null",
        b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
        "none",
    )
    add(
        "BOM before the frame",
        lambda r: b'\xef\xbb\xbf{"jsonrpc":"2.0","id":%d,"method":"tools/list"}' % r,
        "answer",
    )
    add(
        "jsonrpc 1.0",
        lambda r: b'{"jsonrpc":"1.0","id":%d,"method":"tools/list"}' % r,
        "answer",
    )
    add(
        "a batch",
        lambda r: b'[{"jsonrpc":"2.0","id":%d,"method":"ping"}]' % r,
        "answer",
    )
    # Batches of oversized strings: several 1 MB frames back to back, then a normal request.
    for k in range(6):
        add(
            f"oversized string {k + 1} of 6",
            lambda r: _call_frame(
                r, "task_create", {"channel": "general", "tasks": [{"title": "é" * 500_000}]}
            ),
            "tool:invalid_arguments",
        )
    add(
        "a frame over the 16 MiB limit",
        lambda r: _call_frame(r, "task_get", {"channel": "x" * (17 << 20), "number": 1}),
        "answer",
    )
    return cases


def _rpc(rid: int, method: Any, params: Any = None) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        frame["params"] = params
    return json.dumps(frame).encode()


def _nest(depth: int) -> dict[str, Any]:
    node: Any = 1
    for _ in range(depth):
        node = {"a": node}
    return {"channel": "general", "number": 1, "deep": node}


def check_frame_answer(case: FrameCase, answer: dict[str, Any] | None) -> list[str]:
    """What is wrong with the answer (None: none came) to a frame case."""
    if case.expect == "none":
        return []  # nothing is owed; liveness is checked by the next request
    if answer is None:
        return ["no answer"]
    if case.expect == "answer":
        return []
    if case.expect.startswith("rpc:"):
        code = answer.get("error", {}).get("code")
        return [] if code == int(case.expect[4:]) else [f"expected {case.expect}, got {answer}"]
    result = answer.get("result")
    if not isinstance(result, dict):
        return [f"expected a tool result, got {str(answer)[:300]}"]
    structured = result.get("structuredContent") or {}
    if case.expect == "tool-ok":
        return [] if result.get("isError") is False else [f"expected success: {structured}"]
    code = structured.get("error", {}).get("code")
    wanted = case.expect[5:]
    return [] if result.get("isError") and code == wanted else [f"expected {wanted}, got {code}"]


def summary(cases: Iterable[FrameCase]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.expect.split(":")[0]] = counts.get(case.expect.split(":")[0], 0) + 1
    return counts
