"""Every failure the bridge can answer with, mapped to the contract's error codes (section 8.2).

This module is the only place that knows the codes. A failure becomes a `ToolError`, which the
call flow turns into a tool result with `isError: true` and the envelope
``{"error": {code, message, retryable, field_errors?, suggested_action?, candidates?,
retry_after_seconds?}}``.

    local, before any upstream request
        invalid_arguments          the model's arguments break the tool's schema or rules
        hidden_context_field       an argument names hidden context (workspace, agent, token...)
        unknown_tool               no such tool (fails closed)
        deprecated_tool            an old tool name under `--compat hint` (suggested_action)
        context_missing            workspace, agent or credential not configured
        credential_unavailable     the token command or file gave no token        (retryable)
        idempotency_key_requires_callback   a key outside a workflow callback
        idempotency_in_progress    the same key is in flight in this bridge       (retryable)
        journal_unavailable        the journal cannot be written; mutations refused (retryable;
                                   not when its file was replaced under the bridge)
    upstream answered, or did not: see RETRY_TABLE
        <product codes>            the runtime's own stable codes, passed through (PRODUCT_CODES)
        unauthorized               the credential was refused (after one refresh, when it can be)
        credential_mismatch        the token belongs to another workspace or agent
        rate_limited               429, with `retry_after_seconds`                 (retryable)
        upstream_unavailable       not processed, or a read that met a gateway error (retryable)
        upstream_failure           a read that met a 5xx or a dropped connection   (retryable)
        upstream_rejected          a redirect, or a 4xx code the bridge does not know
        upstream_malformed         a read answered with a body it cannot use      (retryable)
        upstream_unreachable       nothing was sent: refused, no such host, closed (retryable)
        upstream_timeout           no answer in time; for a mutation only before sending (retryable)
        outcome_unknown            a mutation was sent and its outcome is unknown: in doubt;
                                   retryable only where repeating it is safe
    the bridge itself
        internal_error             a bug; the journal has the details, the model does not

Whether an upstream failure is retryable depends on what the call was (its `OperationKind`, from
the registry) and on how far the request got (its `Failure`): `RETRY_TABLE` is the one place
that decides, and docs/errors.md is generated from it (``python -m tools.errors_doc``).

Issue 16 puts the choice of every code in this one module, and issue 9's retryability table
with it; about half of it is that table and the code tables, as data. Reading an upstream
answer (status, body, Retry-After, transport failure) into a row of the table is
``bridge._upstream_errors``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from ._exceptions import BridgeError

# The bridge's own codes (a code not listed here or in ProductCode fails mypy).
BridgeCode = Literal[
    "invalid_arguments",
    "hidden_context_field",
    "unknown_tool",
    "deprecated_tool",
    "context_missing",
    "credential_unavailable",
    "idempotency_key_requires_callback",
    "idempotency_in_progress",
    "journal_unavailable",
    "unauthorized",
    "credential_mismatch",
    "rate_limited",
    "upstream_unavailable",
    "upstream_failure",
    "upstream_rejected",
    "upstream_malformed",
    "upstream_unreachable",
    "upstream_timeout",
    "outcome_unknown",
    "internal_error",
]
# The Agent Runtime API's product codes (contract section 13).
ProductCode = Literal[
    "channel_not_found",
    "task_not_found",
    "task_deleted",
    "scope_not_found",
    "scope_deleted",
    "scope_not_task",
    "target_not_found",
    "target_invalid",
    "target_conflict",
    "not_a_member",
    "not_creator",
    "descendant_not_owned",
    "subtask_mode_required",
    "assignee_not_member",
    "parent_cycle",
    "empty_patch",
    "stale_update",
    "idempotency_conflict",
    "callback_not_active",
    "callback_responder_mismatch",
    "cursor_mismatch",
    "cursor_invalid",
    "payload_too_large",
]
ErrorCode = BridgeCode | ProductCode

BRIDGE_CODES: Final[dict[BridgeCode, tuple[bool, str]]] = {
    "invalid_arguments": (False, "The arguments do not match the tool's schema."),
    "hidden_context_field": (
        False,
        "Hidden context is supplied by the bridge, never as an argument.",
    ),
    "unknown_tool": (False, "No such tool."),
    "deprecated_tool": (False, "This tool name is deprecated; use the suggested replacement."),
    "context_missing": (
        False,
        "The bridge is not configured with a workspace, agent and credential.",
    ),
    "credential_unavailable": (True, "No bearer token could be obtained for the agent."),
    "idempotency_key_requires_callback": (
        False,
        "`idempotency_key` is honoured only inside an active workflow callback.",
    ),
    "idempotency_in_progress": (True, "A request with this idempotency key is still in flight."),
    "journal_unavailable": (True, "The audit journal cannot be written; mutations are refused."),
    "unauthorized": (False, "The Task service refused the agent's credential."),
    "credential_mismatch": (
        False,
        "The configured credential belongs to another workspace or agent.",
    ),
    "rate_limited": (True, "The Task service is rate limiting; retry after the given delay."),
    "upstream_unavailable": (True, "The Task service is temporarily unavailable."),
    "upstream_failure": (True, "The Task service failed to answer."),
    "upstream_rejected": (False, "The Task service refused the request."),
    "upstream_malformed": (True, "The Task service answered with an unexpected body."),
    "upstream_unreachable": (True, "The Task service could not be reached; nothing was sent."),
    "upstream_timeout": (True, "The Task service did not answer in time."),
    "outcome_unknown": (False, "The request was sent but its outcome is unknown."),
    "internal_error": (False, "The bridge failed unexpectedly."),
}

# Product codes of the Agent Runtime API (contract section 13): the only upstream codes passed
# through to the model. Any other code (one of the bridge's own above included) is not trusted.
PRODUCT_CODES: Final[dict[ProductCode, tuple[bool, str]]] = {
    "channel_not_found": (False, "No such board."),
    "task_not_found": (False, "No such task on this board."),
    "task_deleted": (False, "The task was deleted."),
    "scope_not_found": (False, "No such task scope in this workspace."),
    "scope_deleted": (False, "The task scope was deleted."),
    "scope_not_task": (False, "Only task scopes are accepted."),
    "target_not_found": (False, "The target's board does not exist."),
    "target_invalid": (False, "The target is not `#channel` or `#channel:threadid`."),
    "target_conflict": (False, "The target is on another board."),
    "not_a_member": (False, "The agent is not a member of this board."),
    "not_creator": (False, "Only the task's creator may delete it."),
    "descendant_not_owned": (False, "Recursive deletion needs every subtask to share the creator."),
    "subtask_mode_required": (False, "The task has subtasks: choose `promote` or `delete`."),
    "assignee_not_member": (False, "The assignee is not a member of this board."),
    "parent_cycle": (False, "The new parent is the task itself or one of its subtasks."),
    "empty_patch": (False, "The patch is empty; set at least one field."),
    "stale_update": (False, "The task changed since `expected_updated_at`; read it and retry."),
    "idempotency_conflict": (False, "The idempotency key was used with different arguments."),
    "callback_not_active": (False, "The workflow callback is not active."),
    "callback_responder_mismatch": (False, "The agent is not this callback's responder."),
    "cursor_mismatch": (False, "The cursor belongs to another query or filter set."),
    "cursor_invalid": (False, "The cursor is not valid."),
    "payload_too_large": (False, "The request is too large."),
}

# code -> (retryable when nothing else decides, safe default message)
CODES: Final[dict[ErrorCode, tuple[bool, str]]] = dict(BRIDGE_CODES.items())
CODES.update(PRODUCT_CODES.items())
_CHANNEL: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a board name `_inputs.Channel` takes

# ---------------------------------------------------------------------------------------------
# The retryability table
# ---------------------------------------------------------------------------------------------

OperationKind = Literal["read", "setter", "keyed_create", "mutation"]
OPERATION_KINDS: Final[tuple[OperationKind, ...]] = ("read", "setter", "keyed_create", "mutation")
# What repeating a call of each kind does (docs/errors.md).
OPERATION_KIND_NOTES: Final[dict[OperationKind, str]] = {
    "read": "changes nothing: always safe to repeat",
    "setter": "sets a desired state: repeating it is safe (the same state again)",
    "keyed_create": (
        "a create carrying an `idempotency_key`: repeating it with the same key is safe "
        "(a committed create answers with its receipt, `reused: true`)"
    ),
    "mutation": "every other change (an unkeyed create, update, checkpoint, delete): "
    "repeating one after an unknown outcome may apply it twice or clobber a later change",
}

Failure = Literal[
    "connect_refused",
    "timeout_before_send",
    "dropped_before_send",
    "timeout_after_send",
    "dropped_after_send",
    "unusable_answer",
    "http_3xx",
    "http_401_refreshed",
    "http_401_static",
    "http_4xx_product",
    "http_4xx_other",
    "http_408",
    "http_429",
    "http_429_unattributed",
    "http_500",
    "http_502",
    "http_503_not_processed",
    "http_503",
    "http_504",
]

# What happened, as the model is told it (and docs/errors.md lists it).
FAILURES: Final[dict[Failure, str]] = {
    "connect_refused": "The Task service could not be reached (connection refused, or no such "
    "host); nothing was sent.",
    "timeout_before_send": "No connection to the Task service was ready in time; nothing was sent.",
    "dropped_before_send": "The connection to the Task service closed before the request was "
    "sent; nothing was sent.",
    "timeout_after_send": "The request was sent but the Task service did not answer in time.",
    "dropped_after_send": "The request was sent but the connection dropped before the answer "
    "was complete.",
    "unusable_answer": "The Task service answered with a body the bridge cannot use (not JSON, "
    "not the documented shape, or over 32 MiB).",
    "http_3xx": "The Task service answered with a redirect, which the bridge does not follow; "
    "nothing was done.",
    "http_401_refreshed": "The Task service refused the agent's credential, again after one "
    "refresh; nothing was done.",
    "http_401_static": "The Task service refused the agent's credential; it is a fixed token the "
    "bridge cannot refresh, so it was not retried; nothing was done.",
    "http_4xx_product": "The Task service refused the request with one of its documented codes; "
    "nothing was done.",
    "http_4xx_other": "The Task service refused the request; nothing was done.",
    "http_408": "The Task service timed out waiting for the request and did not process it.",
    "http_429": "The Task service is rate limiting and did not process the request.",
    "http_429_unattributed": "Something between the bridge and the Task service answered 429 "
    "(too many requests) without the service's own error body, which cannot prove the request "
    "was not processed.",
    "http_500": "The Task service failed while handling the request.",
    "http_502": "A gateway in front of the Task service got no valid answer from it.",
    "http_503_not_processed": "The Task service is temporarily unavailable and did not process "
    "the request.",
    "http_503": "The Task service answered 503 without its own error body saying it did not "
    "process the request (a Retry-After alone, which any proxy may add, proves nothing).",
    "http_504": "A gateway in front of the Task service timed out waiting for it.",
}

# How each failure shows in docs/errors.md: the upstream statuses or transport events it covers.
FAILURE_CASES: Final[dict[Failure, str]] = {
    "connect_refused": "connection refused, DNS failure",
    "timeout_before_send": "connect timeout, no pooled connection free in time",
    "dropped_before_send": "connection closed before the request was written",
    "timeout_after_send": "no complete answer within `--upstream-timeout`",
    "dropped_after_send": "connection reset or closed mid-exchange, broken HTTP framing",
    "unusable_answer": "a 2xx with a non-JSON, cut or wrongly shaped body; an answer over 32 MiB",
    "http_3xx": "301, 302, 307, 308...",
    "http_401_refreshed": "401 from a refreshable token source (command, file), after the replay",
    "http_401_static": "401 with `AGENTTEAM_TOKEN` (no refresh, no replay)",
    "http_4xx_product": "400, 403, 404, 409, 413, 422 with a code in `PRODUCT_CODES` "
    "(or `validation_failed`, `token_scope_mismatch`)",
    "http_4xx_other": "any 4xx with another code (`upstream_failure`, `internal_error`, "
    "`route_not_found`...), no code, or a body that is not JSON",
    "http_408": "408",
    "http_429": "429 with the runtime's `rate_limited` code (Retry-After, in seconds or as a "
    "date, becomes `retry_after_seconds`)",
    "http_429_unattributed": "429 without it (a proxy's or gateway's, perhaps after the service "
    "committed), with or without Retry-After",
    "http_500": "500, 501, 505 and any other 5xx not below, whatever the body",
    "http_502": "502",
    "http_503_not_processed": "503 with the runtime's `service_unavailable` code",
    "http_503": "503 without it, with or without `Retry-After`",
    "http_504": "504",
}


PassThrough = Literal["<product code>"]
PASS_THROUGH: Final[PassThrough] = "<product code>"


@dataclass(frozen=True, slots=True)
class RetryCell:
    """One cell of the table: the code the model sees and whether it may simply retry."""

    code: ErrorCode | PassThrough  # PASS_THROUGH: the upstream's own product code
    retryable: bool

    @property
    def in_doubt(self) -> bool:
        """The request may have taken effect and nobody knows: exactly the calls answered
        `outcome_unknown`, which `agentteam-replay verify` lists as in doubt."""
        return self.code == "outcome_unknown"


def _same_for_all(code: ErrorCode | PassThrough, retryable: bool) -> dict[OperationKind, RetryCell]:
    """Nothing reached the service, or it refused: what the call was does not matter."""
    return {kind: RetryCell(code, retryable) for kind in OPERATION_KINDS}


def _maybe_applied(read_code: ErrorCode) -> dict[OperationKind, RetryCell]:
    """The request may have taken effect: a read just retries; a mutation is in doubt, and
    retryable only where repeating it is safe."""
    return {
        "read": RetryCell(read_code, True),
        "setter": RetryCell("outcome_unknown", True),
        "keyed_create": RetryCell("outcome_unknown", True),
        "mutation": RetryCell("outcome_unknown", False),
    }


RETRY_TABLE: Final[dict[Failure, dict[OperationKind, RetryCell]]] = {
    "connect_refused": _same_for_all("upstream_unreachable", True),
    "timeout_before_send": _same_for_all("upstream_timeout", True),
    "dropped_before_send": _same_for_all("upstream_unreachable", True),
    "timeout_after_send": _maybe_applied("upstream_timeout"),
    "dropped_after_send": _maybe_applied("upstream_failure"),
    "unusable_answer": _maybe_applied("upstream_malformed"),
    "http_3xx": _same_for_all("upstream_rejected", False),
    "http_401_refreshed": _same_for_all("unauthorized", False),
    "http_401_static": _same_for_all("unauthorized", False),
    "http_4xx_product": _same_for_all(PASS_THROUGH, False),
    "http_4xx_other": _same_for_all("upstream_rejected", False),
    "http_408": _same_for_all("upstream_timeout", True),
    "http_429": _same_for_all("rate_limited", True),
    "http_429_unattributed": _maybe_applied("rate_limited"),
    "http_500": _maybe_applied("upstream_failure"),
    "http_502": _maybe_applied("upstream_unavailable"),
    "http_503_not_processed": _same_for_all("upstream_unavailable", True),
    "http_503": _maybe_applied("upstream_unavailable"),
    "http_504": _maybe_applied("upstream_timeout"),
}

# What the model may do next, said after an in-doubt failure.
_IN_DOUBT_ADVICE: Final[dict[OperationKind, str]] = {
    "read": "",
    "setter": " It may have taken effect; repeating the call is safe (it sets the same state).",
    "keyed_create": " It may have taken effect; retrying with the same `idempotency_key` is safe "
    "(a committed create answers with its receipt, `reused: true`).",
    "mutation": " It may have taken effect; check with task_get or task_list before retrying.",
}


def answer(failure: Failure, kind: OperationKind) -> RetryCell:
    return RETRY_TABLE[failure][kind]


class ToolError(BridgeError):
    """A classified failure, safe to show to the model."""

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        *,
        retryable: bool | None = None,
        field_errors: dict[str, str] | None = None,
        suggested_action: dict[str, Any] | None = None,
        candidates: list[dict[str, Any]] | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        default_retryable, default_message = CODES[code]
        super().__init__(message or default_message)
        self.code: ErrorCode = code
        self.message = message or default_message
        self.retryable = default_retryable if retryable is None else retryable
        self.field_errors = field_errors
        self.suggested_action = suggested_action
        self.candidates = candidates
        self.retry_after_seconds = retry_after_seconds
        self.reason: str | None = None  # for the journal only: why no upstream answer came

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.field_errors:
            error["field_errors"] = self.field_errors
        if self.suggested_action:
            error["suggested_action"] = self.suggested_action
        if self.candidates:
            error["candidates"] = self.candidates
        if self.retry_after_seconds is not None:
            error["retry_after_seconds"] = self.retry_after_seconds
        return {"error": error}


def failure_error(
    failure: Failure,
    kind: OperationKind,
    *,
    detail: str = "",
    retry_after_seconds: int | None = None,
) -> ToolError:
    """The error for a failure whose answer has no product code: code and retryable from the
    table, a message saying what happened and, when in doubt, what is safe to do next."""
    cell = answer(failure, kind)
    code = cell.code
    assert code != PASS_THROUGH, failure
    message = FAILURES[failure] + detail
    if cell.in_doubt:
        message += _IN_DOUBT_ADVICE[kind]
    elif cell.retryable:
        message += " Retrying is safe."
    return ToolError(
        code, message, retryable=cell.retryable, retry_after_seconds=retry_after_seconds
    )


def internal_error(*, sent: bool) -> ToolError:
    """A bug, answered with a fixed message: never the exception's text, which may hold data;
    after a change was sent, the model is told it may have been applied."""
    if sent:
        return ToolError(
            "internal_error",
            "The bridge failed unexpectedly after sending the change; it may have been applied."
            " Check with task_get or task_list before retrying.",
        )
    return ToolError("internal_error")


def suggest(error: ToolError, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """An advisory next call for a product failure (section 8.2); it grants no authority.

    Each is a valid call (`args` are the call's validated arguments) that succeeds when sent back
    unchanged as things stand after the failure; where no call would, none is suggested
    (tests/test_bridge_suggestions.py sends every one)."""
    channel = args.get("channel")
    number = args.get("number")
    # A code the upstream answered to a call without a task number (a hostile or mistaken
    # `stale_update` to a create) has no task to read: no suggestion rather than `number: null`.
    locator = {"channel": channel, "number": number} if isinstance(number, int) else None
    if error.code == "stale_update" and channel and locator:
        return {"tool": "task_get", "arguments": locator}
    if error.code in ("task_not_found", "task_deleted") and channel:
        return {"tool": "task_list", "arguments": {"channel": channel}}
    if error.code == "channel_not_found" and error.candidates:
        # The first candidate that is a board name the model may send (not a redacted one).
        names = (c.get("channel") for c in error.candidates)
        first = next((n for n in names if isinstance(n, str) and _CHANNEL.fullmatch(n)), None)
        return {"tool": "task_list", "arguments": {"channel": first}} if first else None
    if error.code == "subtask_mode_required" and channel and locator:
        return {"tool": "task_get", "arguments": locator}
    if error.code in ("cursor_mismatch", "cursor_invalid"):
        return {"tool": tool, "arguments": {k: v for k, v in args.items() if k != "cursor"}}
    if error.code == "outcome_unknown" and error.retryable:
        # Repeating is safe (a setter, or a keyed create with its key): the same call settles it.
        return {"tool": tool, "arguments": args}
    if error.code == "outcome_unknown" and isinstance(args.get("tasks"), list) and channel:
        # A create in doubt: search the board for the first title it would have made.
        titles = [t.get("title") for t in args["tasks"] if isinstance(t, dict)]
        return (
            {
                "tool": "task_list",
                "arguments": {"channel": channel, "query": titles[0], "status": "all"},
            }
            if titles
            else None
        )
    if error.code == "outcome_unknown" and locator and channel and tool != "task_delete":
        # A delete in doubt gets none: a task_get that fails (task_deleted) is how it would tell.
        return {"tool": "task_get", "arguments": locator}
    return None
