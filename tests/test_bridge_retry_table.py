"""The retryability table, cell by cell, through the real call flow over `httpx.MockTransport`.

Every row of `RETRY_TABLE` has concrete upstream behaviours (an HTTP answer or a transport
failure) and every column has the calls of that kind; each pair must answer the cell's code and
`retryable`, journal it, and validate against the tool's outputSchema. The rules the table
must honour are asserted separately, so a wrong cell cannot hide behind a matching test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import httpx
import jsonschema
import pytest

from agentteam_task_bridge.bridge._errors import (
    BRIDGE_CODES,
    CODES,
    FAILURES,
    OPERATION_KINDS,
    PASS_THROUGH,
    PRODUCT_CODES,
    RETRY_TABLE,
    BridgeCode,
    ErrorCode,
    Failure,
    OperationKind,
    ProductCode,
)
from agentteam_task_bridge.bridge._http11 import TransportFailure
from agentteam_task_bridge.bridge._registry import TOOLS
from agentteam_task_bridge.bridge._upstream_errors import (
    classify_upstream_error,
    parse_retry_after,
    transport_error,
)
from agentteam_task_bridge.bridge.testing import MemoryJournal, ScriptedTokens
from agentteam_task_bridge.journal import CallError
from tools.errors_doc import ERRORS, render

from .test_bridge_call_unit import make_bridge

META = {"agentteam/workflow_run_id": "run_1", "agentteam/callback_effect_id": "cb_1"}


@dataclass(frozen=True)
class Shape:
    """One way of calling a tool, and the table column it is on."""

    kind: OperationKind
    tool: str
    args: dict[str, Any]
    meta: dict[str, Any]


SHAPES = [
    Shape("read", "task_list", {"channel": "general"}, {}),
    Shape("read", "task_get", {"channel": "general", "number": 1}, {}),
    Shape("setter", "task_set_claim", {"channel": "general", "numbers": [1], "claimed": True}, {}),
    Shape(
        "keyed_create",
        "task_create",
        {"channel": "general", "tasks": [{"title": "t"}], "idempotency_key": "k1"},
        META,
    ),
    Shape("mutation", "task_create", {"channel": "general", "tasks": [{"title": "t"}]}, {}),
    Shape(
        "mutation", "task_update", {"channel": "general", "number": 1, "patch": {"title": "u"}}, {}
    ),
    Shape("mutation", "task_checkpoint", {"channel": "general", "number": 1, "summary": "s"}, {}),
    Shape("mutation", "task_delete", {"channel": "general", "number": 1}, {}),
]

Handler = Callable[[httpx.Request], httpx.Response]


def _answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(status, content=body, headers=headers)
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return handler


def _raise(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def _err(code: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": "m", **extra}}


# Concrete upstream behaviours for every row: (row, example name, handler, static token?).
EXAMPLES: list[tuple[Failure, str, Handler, bool]] = [
    ("connect_refused", "ConnectError", _raise(httpx.ConnectError("refused")), False),
    ("timeout_before_send", "ConnectTimeout", _raise(httpx.ConnectTimeout("slow")), False),
    ("timeout_before_send", "PoolTimeout", _raise(httpx.PoolTimeout("busy")), False),
    ("dropped_before_send", "pool closed", _raise(TransportFailure("closed", sent=False)), False),
    ("timeout_after_send", "ReadTimeout", _raise(httpx.ReadTimeout("slow")), False),
    ("timeout_after_send", "WriteTimeout", _raise(httpx.WriteTimeout("slow")), False),
    ("dropped_after_send", "RemoteProtocolError", _raise(httpx.RemoteProtocolError("x")), False),
    ("dropped_after_send", "ReadError", _raise(httpx.ReadError("reset")), False),
    ("dropped_after_send", "codec: dropped", _raise(TransportFailure("x", sent=True)), False),
    ("unusable_answer", "200 html", _answer(200, b"<html>ok</html>"), False),
    ("unusable_answer", "200 cut json", _answer(200, b'{"channel": "gen'), False),
    ("unusable_answer", "200 wrong shape", _answer(200, {"unexpected": True}), False),
    ("unusable_answer", "200 JSON list", _answer(200, [1, 2]), False),
    ("unusable_answer", "204 no body", _answer(204), False),
    (
        "unusable_answer",
        "over 32 MiB",
        _raise(TransportFailure("response_too_large", sent=True)),
        False,
    ),
    ("unusable_answer", "final 1xx", _answer(199, {}), False),
    ("http_3xx", "302", _answer(302, None, {"location": "http://elsewhere/"}), False),
    ("http_3xx", "308", _answer(308, b""), False),
    ("http_401_refreshed", "token_expired", _answer(401, _err("token_expired")), False),
    ("http_401_refreshed", "no body", _answer(401), False),
    ("http_401_static", "token_expired", _answer(401, _err("token_expired")), True),
    ("http_4xx_product", "400 target_invalid", _answer(400, _err("target_invalid")), False),
    ("http_4xx_product", "403 not_a_member", _answer(403, _err("not_a_member")), False),
    (
        "http_4xx_product",
        "403 token_scope_mismatch",
        _answer(403, _err("token_scope_mismatch")),
        False,
    ),
    ("http_4xx_product", "404 task_not_found", _answer(404, _err("task_not_found")), False),
    ("http_4xx_product", "409 stale_update", _answer(409, _err("stale_update")), False),
    ("http_4xx_product", "413 payload_too_large", _answer(413, _err("payload_too_large")), False),
    ("http_4xx_product", "422 validation_failed", _answer(422, _err("validation_failed")), False),
    ("http_4xx_other", "403 upstream_failure", _answer(403, _err("upstream_failure")), False),
    ("http_4xx_other", "403 outcome_unknown", _answer(403, _err("outcome_unknown")), False),
    ("http_4xx_other", "400 rate_limited", _answer(400, _err("rate_limited")), False),
    ("http_4xx_other", "400 internal_error", _answer(400, _err("internal_error")), False),
    ("http_4xx_other", "404 route_not_found", _answer(404, _err("route_not_found")), False),
    ("http_4xx_other", "409 no body", _answer(409), False),
    ("http_4xx_other", "422 html", _answer(422, b"<html>no</html>"), False),
    ("http_4xx_other", "418 code not a string", _answer(418, {"error": {"code": 7}}), False),
    ("http_408", "408", _answer(408, b""), False),
    (
        "http_429",
        "429 Retry-After",
        _answer(429, _err("rate_limited"), {"retry-after": "2"}),
        False,
    ),
    (
        "http_429_unattributed",
        "429 html, no header",
        _answer(429, b"<html>slow down</html>"),
        False,
    ),
    (
        "http_429_unattributed",
        "429 Retry-After, a proxy's body",
        _answer(429, b"<html>slow down</html>", {"retry-after": "3"}),
        False,
    ),
    ("http_500", "500 upstream_failure", _answer(500, _err("upstream_failure")), False),
    ("http_500", "500 html", _answer(500, b"<html>oops</html>"), False),
    ("http_500", "500 product code", _answer(500, _err("task_not_found")), False),
    ("http_500", "501", _answer(501), False),
    ("http_500", "505", _answer(505, b"x"), False),
    ("http_502", "502", _answer(502, b"<html>bad gateway</html>"), False),
    (
        "http_503",
        "503 Retry-After, a proxy's body",
        _answer(503, b"busy", {"retry-after": "7"}),
        False,
    ),
    (
        "http_503_not_processed",
        "503 service_unavailable",
        _answer(503, _err("service_unavailable")),
        False,
    ),
    ("http_503", "503 bare", _answer(503), False),
    ("http_503", "503 html", _answer(503, b"<html>unavailable</html>"), False),
    ("http_504", "504", _answer(504, b"<html>gateway timeout</html>"), False),
    ("http_504", "504 json", _answer(504, _err("upstream_failure")), False),
]


def static_token() -> ScriptedTokens:
    return ScriptedTokens(["tok-1"], kind="env:AGENTTEAM_TOKEN", refreshable=False)


def test_every_row_has_an_example_and_a_message() -> None:
    assert {failure for failure, *_ in EXAMPLES} == set(RETRY_TABLE) == set(FAILURES)
    assert {shape.kind for shape in SHAPES} == set(OPERATION_KINDS)
    assert {shape.tool for shape in SHAPES} == set(TOOLS)


def test_the_kind_of_each_tool_comes_from_the_registry() -> None:
    for spec in TOOLS.values():
        assert (spec.operation == "read") == spec.read_only, spec.name
    assert TOOLS["task_set_claim"].operation_kind(keyed=False) == "setter"
    assert TOOLS["task_create"].operation_kind(keyed=True) == "keyed_create"
    assert TOOLS["task_create"].operation_kind(keyed=False) == "mutation"
    assert TOOLS["task_update"].operation_kind(keyed=False) == "mutation"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.kind}:{s.tool}")
@pytest.mark.parametrize(
    ("failure", "handler", "static"),
    [(f, h, s) for f, _, h, s in EXAMPLES],
    ids=[f"{f}:{name}" for f, name, _, _ in EXAMPLES],
)
async def test_each_cell_is_answered_as_the_table_says(
    shape: Shape, failure: Failure, handler: Handler, static: bool
) -> None:
    journal = MemoryJournal()
    tokens = static_token() if static else None
    bridge, _ = make_bridge(handler, journal, tokens)
    result = await bridge.call(shape.tool, shape.args, shape.meta, 1)
    assert result.is_error, result.structured_content
    envelope = result.structured_content
    assert envelope is not None
    error = envelope["error"]
    cell = RETRY_TABLE[failure][shape.kind]
    if cell.code == PASS_THROUGH:
        assert error["code"] in {*PRODUCT_CODES, "invalid_arguments", "credential_mismatch"}
    else:
        assert error["code"] == cell.code, error
    assert error["retryable"] is cell.retryable, error
    jsonschema.validate(envelope, TOOLS[shape.tool].tool.output_schema)
    assert json.loads(result.content[0].text) == envelope  # type: ignore[union-attr]
    outcome, durable = journal.events[-1]
    assert durable and isinstance(outcome.payload, CallError)
    assert outcome.payload.error_code == error["code"]
    assert outcome.payload.retryable is error["retryable"]
    if cell.in_doubt:
        assert journal.kinds().count("upstream_request") >= 1  # replay finds it in doubt
        assert "may have taken effect" in error["message"]
    if failure.endswith("before_send") or failure == "connect_refused":
        assert "nothing was sent" in error["message"]


def test_the_table_honours_the_rules() -> None:
    t = RETRY_TABLE
    for failure, row in t.items():
        for kind, cell in row.items():
            # In doubt is exactly outcome_unknown (what replay's verify lists), and never a read.
            assert cell.in_doubt == (cell.code == "outcome_unknown")
            assert not (cell.in_doubt and kind == "read"), failure
            # Where nothing was sent or the service refused, the kind of call does not matter.
            if failure in ("connect_refused", "timeout_before_send", "dropped_before_send"):
                assert (cell.code, cell.retryable) == (t[failure]["read"].code, True)
            # A mutation that may have taken effect is in doubt, retryable iff repeating is safe.
            if kind != "read" and t[failure]["read"].retryable and cell.in_doubt:
                assert cell.retryable == (kind in ("setter", "keyed_create")), (failure, kind)
    # A keyed create after a 500 and after a dropped connection: the same answer, retryable.
    assert t["http_500"]["keyed_create"] == t["dropped_after_send"]["keyed_create"]
    assert t["http_500"]["keyed_create"].retryable
    # A desired-state setter may be repeated after a dropped connection or any 5xx.
    for failure in ("dropped_after_send", "http_500", "http_502", "http_503", "http_504"):
        assert t[failure]["setter"].retryable, failure
    # Gateway errors, and a 429 or 503 without the runtime's own body (Retry-After or not), may
    # follow a commit: in doubt, never "not processed".
    for failure in ("http_502", "http_503", "http_504", "http_429_unattributed"):
        assert t[failure]["mutation"].in_doubt and not t[failure]["mutation"].retryable
    assert not t["http_503_not_processed"]["mutation"].in_doubt
    # An answer the bridge cannot use after a 2xx on a mutation: in doubt, never a failure code.
    for kind in ("setter", "keyed_create", "mutation"):
        assert t["unusable_answer"][kind].code == "outcome_unknown"  # type: ignore[index]
    # An unknown or bridge-owned code on a 4xx is never passed through, never retryable.
    assert all(cell == t["http_4xx_other"]["read"] for cell in t["http_4xx_other"].values())
    assert (t["http_4xx_other"]["read"].code, t["http_4xx_other"]["read"].retryable) == (
        "upstream_rejected",
        False,
    )


def test_a_403_naming_a_retryable_bridge_code_is_not_retryable() -> None:
    error = classify_upstream_error(
        403, _err("upstream_failure"), kind="read", retry_after=None, refreshable=True
    )
    assert (error.code, error.retryable) == ("upstream_rejected", False)
    assert "HTTP 403" in error.message and "`upstream_failure`" in error.message


def test_an_unreadable_code_is_not_echoed() -> None:
    error = classify_upstream_error(
        400, _err("Bearer abc\nX: y"), kind="read", retry_after=None, refreshable=True
    )
    assert error.code == "upstream_rejected" and "Bearer" not in error.message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3),
        ("2.5", 3),
        ("0.01", 1),
        ("0", 0),
        ("-4", 0),
        (" 12 ", 12),
        ("1e12", 86_400),
        ("inf", 86_400),
        ("nan", None),
        ("soon", None),
        ("", None),
        (None, None),
        (True, None),
        (4, 4),
        (1.2, 2),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0),  # a date in the past: now
        ("Fri, 31 Dec 9999 23:59:59 GMT", 86_400),
    ],
)
def test_retry_after_is_whole_seconds_rounded_up(value: object, seconds: int | None) -> None:
    got = parse_retry_after(value)
    assert got == seconds and (got is None or type(got) is int)


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        ({"retry-after": "1.2"}, _err("rate_limited"), 2),
        ({}, _err("rate_limited", details={"retryAfterSeconds": 4}), 4),
        ({}, b"<html>slow down</html>", None),
        ({"retry-after": "3"}, b"<html>slow down</html>", 3),  # a read: retrying is safe
    ],
)
async def test_rate_limited_answers_carry_an_integer_delay(
    headers: dict[str, str], body: Any, seconds: int | None
) -> None:
    bridge, _ = make_bridge(_answer(429, body, headers), MemoryJournal())
    result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
    error = result.structured_content["error"]  # type: ignore[index]
    assert (error["code"], error["retryable"]) == ("rate_limited", True)
    assert error.get("retry_after_seconds") == seconds
    assert seconds is None or type(error["retry_after_seconds"]) is int
    schema = TOOLS["task_list"].tool.output_schema
    assert schema is not None
    jsonschema.validate(result.structured_content, schema)
    error_schema = schema["properties"]["error"]
    ref = error_schema.get("$ref", "").rsplit("/", 1)[-1]
    body_schema = schema.get("$defs", {}).get(ref, error_schema)
    assert body_schema["properties"]["retry_after_seconds"]["type"] == "integer"


async def test_a_static_token_refused_does_not_claim_a_refresh() -> None:
    bridge, _ = make_bridge(
        _answer(401, _err("token_expired")),
        MemoryJournal(),
        static_token(),
    )
    result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
    message = result.structured_content["error"]["message"]  # type: ignore[index]
    assert "after one refresh" not in message and "cannot refresh" in message
    refreshing, _ = make_bridge(_answer(401, _err("token_expired")), MemoryJournal())
    result = await refreshing.call("task_list", {"channel": "general"}, {}, 1)
    assert "after one refresh" in result.structured_content["error"]["message"]  # type: ignore[index]


async def test_upstream_field_names_reach_the_model_in_snake_case() -> None:
    # The reference runtime's own stale_update body.
    stale = {
        "error": {
            "code": "stale_update",
            "message": "The task changed since `expectedUpdatedAt`; read it again and retry.",
            "fieldErrors": {"$.expectedUpdatedAt": "does not match the task's updatedAt"},
            "details": {"currentUpdatedAt": "2026-12-02T00:00:00.000000Z"},
        }
    }
    bridge, _ = make_bridge(_answer(409, stale), MemoryJournal())
    result = await bridge.call(
        "task_update",
        {
            "channel": "general",
            "number": 1,
            "patch": {"title": "x"},
            "expected_updated_at": "2026-12-01T00:00:00.000000Z",
        },
        {},
        1,
    )
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["code"] == "stale_update"
    assert error["field_errors"] == {
        "$.expected_updated_at": "does not match the task's updated_at"
    }
    assert "`expected_updated_at`" in error["message"]
    invalid = {
        "error": {
            "code": "validation_failed",
            "message": "includeSubtasks and parentTaskScope are wrong; see subtaskMode",
            "fieldErrors": {"$.patch.assigneeId": "unknown; compare with scopeId"},
        }
    }
    bridge, _ = make_bridge(_answer(422, invalid), MemoryJournal())
    result = await bridge.call("task_get", {"channel": "general", "number": 1}, {}, 1)
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["code"] == "invalid_arguments"
    assert error["message"] == "include_subtasks and parent_task_scope are wrong; see subtask_mode"
    assert error["field_errors"] == {"$.patch.assignee_id": "unknown; compare with scope_id"}


def _echoing(status: int, code: str) -> Handler:
    """An upstream that writes the caller's credential back into its error body."""

    def handler(request: httpx.Request) -> httpx.Response:
        auth = request.headers["authorization"]
        token = auth.removeprefix("Bearer ")
        return httpx.Response(
            status,
            json={
                "error": {
                    "code": code,
                    "message": f"token {token} is not a member ({auth})",
                    "fieldErrors": {f"$.{token}": token, "$.authorization": f"got {token}!"},
                    "candidates": [{"channel": "general", "note": f"use{token}", "token": token}],
                }
            },
        )

    return handler


@pytest.mark.parametrize("token", ["s3cr3t-value-of-40-chars-0123456789abcdef", "tok-1"])
@pytest.mark.parametrize(("status", "code"), [(403, "not_a_member"), (400, "mystery")])
async def test_a_token_echoed_by_the_upstream_never_reaches_the_model(
    token: str, status: int, code: str
) -> None:
    journal = MemoryJournal()
    bridge, _ = make_bridge(_echoing(status, code), journal, ScriptedTokens([token]))
    result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
    assert result.is_error
    seen = json.dumps(result.structured_content) + result.content[0].text  # type: ignore[union-attr]
    assert token not in seen
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["code"] == ("not_a_member" if code == "not_a_member" else "upstream_rejected")


async def test_a_refreshed_token_echoed_back_is_redacted_too() -> None:
    old, new = "first-token-0123456789", "second-token-0123456789"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["authorization"] == f"Bearer {old}":
            return httpx.Response(401, json=_err("token_expired"))
        return _echoing(403, "not_a_member")(request)

    bridge, _ = make_bridge(handler, MemoryJournal(), ScriptedTokens([old, new]))
    result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
    seen = json.dumps(result.structured_content)
    assert new not in seen and old not in seen and "[REDACTED]" in seen


def test_the_error_reference_is_generated_from_the_table() -> None:
    assert ERRORS.read_text() == render(), "docs/errors.md is stale: run python -m tools.errors_doc"
    done = subprocess.run(
        [sys.executable, "-m", "tools.errors_doc", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("transport_kind", "sent", "row"),
    [
        ("connect_failed", False, "connect_refused"),
        ("connect_timeout", False, "timeout_before_send"),
        ("pool_timeout", False, "timeout_before_send"),
        ("closed", False, "dropped_before_send"),
        ("timeout", True, "timeout_after_send"),
        ("connection_dropped", True, "dropped_after_send"),
        ("response_too_large", True, "unusable_answer"),
    ],
)
@pytest.mark.parametrize("kind", OPERATION_KINDS)
def test_every_failure_of_the_http11_pool_has_its_row(
    transport_kind: str, sent: bool, row: Failure, kind: OperationKind
) -> None:
    error = transport_error(TransportFailure(transport_kind, sent=sent), kind)
    cell = RETRY_TABLE[row][kind]
    assert (error.code, error.retryable) == (cell.code, cell.retryable)
    assert error.message.startswith(FAILURES[row])


def test_a_token_no_header_can_carry_is_a_credential_problem_not_a_transport_one() -> None:
    error = transport_error(TransportFailure("invalid_request", sent=False), "mutation")
    assert (error.code, error.retryable) == ("credential_unavailable", True)


def test_the_code_types_name_exactly_the_codes_of_the_tables() -> None:
    """A code is a `Literal`, so a typo fails mypy; the tables must list every one of them."""
    assert list(get_args(BridgeCode)) == list(BRIDGE_CODES)
    assert list(get_args(ProductCode)) == list(PRODUCT_CODES)
    codes = {code for part in get_args(ErrorCode) for code in get_args(part)}
    assert codes == {*get_args(BridgeCode), *get_args(ProductCode)} == set(CODES)
