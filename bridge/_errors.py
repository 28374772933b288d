"""Every failure the bridge can answer with, mapped to the contract's error codes (section 8.2).

This module is the only place that knows the codes. A failure becomes a `ToolError`, which the
call flow turns into a tool result with `isError: true` and the envelope
``{"error": {code, message, retryable, field_errors?, suggested_action?, candidates?}}``.

    local, before any upstream request
        invalid_arguments          the model's arguments break the tool's schema or rules
        hidden_context_field       an argument names hidden context (workspace, agent, token...)
        unknown_tool               no such tool (fails closed)
        deprecated_tool            an old tool name under `--compat hint` (suggested_action)
        context_missing            workspace, agent or credential not configured
        credential_unavailable     the token command or file gave no token        (retryable)
        idempotency_key_requires_callback   a key outside a workflow callback
        idempotency_in_progress    the same key is in flight in this bridge       (retryable)
        journal_unavailable        the journal cannot be written; mutations refused (retryable)
    upstream answered
        <product codes>            the runtime's own stable codes, passed through (see CODES)
        unauthorized               401 again after the one refresh-and-replay
        credential_mismatch        the token belongs to another workspace or agent
        rate_limited               429, with `retry_after_seconds`                 (retryable)
        upstream_unavailable       503/502/504: not processed                      (retryable)
        upstream_failure           another 5xx on a read                           (retryable)
        upstream_rejected          a 4xx the bridge does not know
        upstream_malformed         a body that is not the documented shape (reads) (retryable)
    upstream did not answer
        upstream_unreachable       connection refused or DNS: nothing was sent     (retryable)
        upstream_timeout           a read timed out                                (retryable)
        outcome_unknown            a mutation was sent and its outcome is unknown: retry only
                                   with the same idempotency key        (retryable iff a key)
    the bridge itself
        internal_error             a bug; the journal has the details, the model does not
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# code -> (retryable, safe default message)
CODES: dict[str, tuple[bool, str]] = {
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
    "unauthorized": (False, "The agent's credential was refused after one refresh."),
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
    # Product codes of the Agent Runtime API (contract section 13), passed through.
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

_QUOTED_CAMEL = re.compile(r"`([a-z]+(?:[A-Z][a-z0-9]*)+)`")

# Upstream codes that mean "the credential is wrong" rather than a product refusal.
_UPSTREAM_ALIASES = {
    "validation_failed": "invalid_arguments",
    "token_scope_mismatch": "credential_mismatch",
    "token_expired": "unauthorized",
}


class ToolError(Exception):
    """A classified failure, safe to show to the model."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        retryable: bool | None = None,
        field_errors: dict[str, str] | None = None,
        suggested_action: dict[str, Any] | None = None,
        candidates: list[dict[str, Any]] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        default_retryable, default_message = CODES[code]
        super().__init__(message or default_message)
        self.code = code
        self.message = message or default_message
        self.retryable = default_retryable if retryable is None else retryable
        self.field_errors = field_errors
        self.suggested_action = suggested_action
        self.candidates = candidates
        self.retry_after_seconds = retry_after_seconds

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


def classify_upstream_error(
    status: int, body: Any, *, mutation: bool, retry_after: str | None
) -> ToolError:
    """Map a non-2xx upstream answer to a contract error; product codes pass through."""
    upstream = body.get("error") if isinstance(body, dict) else None
    raw_code = upstream.get("code") if isinstance(upstream, dict) else None
    message = upstream.get("message") if isinstance(upstream, dict) else None
    code = _UPSTREAM_ALIASES.get(raw_code, raw_code) if isinstance(raw_code, str) else None
    if status == 429:
        return ToolError("rate_limited", retry_after_seconds=_seconds(retry_after))
    if status in (502, 503, 504):
        return ToolError("upstream_unavailable", retry_after_seconds=_seconds(retry_after))
    if status >= 500:
        return ToolError("outcome_unknown" if mutation else "upstream_failure")
    if status == 401:
        return ToolError("unauthorized")
    if code not in CODES or code in ("internal_error",):
        return ToolError("upstream_rejected", f"The Task service refused the request ({status}).")
    return ToolError(
        code,
        _model_message(message) if isinstance(message, str) and len(message) <= 500 else None,
        field_errors=_snake_paths(upstream.get("fieldErrors")) if upstream else None,
        candidates=_candidates(upstream.get("candidates")) if upstream else None,
    )


def _model_message(message: str) -> str:
    """Upstream text names DTO fields in camelCase; the model knows them in snake_case."""
    return _QUOTED_CAMEL.sub(lambda m: f"`{snake(m.group(1))}`", message)


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _snake_paths(errors: Any) -> dict[str, str] | None:
    if not isinstance(errors, dict):
        return None
    return {snake_path(str(path)): str(reason)[:300] for path, reason in list(errors.items())[:20]}


def _candidates(items: Any) -> list[dict[str, Any]] | None:
    if not isinstance(items, list):
        return None
    return [snake_keys(item) for item in items[:5] if isinstance(item, dict)]


def snake_keys(value: Any) -> Any:
    """Rename every key of an upstream builtins tree from camelCase to snake_case."""
    if isinstance(value, dict):
        return {snake(str(k)): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value


@lru_cache(maxsize=1024)
def snake(name: str) -> str:
    """`scopeId` -> `scope_id` (upstream DTO names to model-facing names; the few there are
    repeat in every answer, hence the cache)."""
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_")
            out.append(ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def snake_path(path: str) -> str:
    """`$.parentTaskScope.scopeId` -> `$.parent_task_scope.scope_id`."""
    return ".".join(snake(part) for part in path.split("."))


def suggest(error: ToolError, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """An advisory next call for a product failure (section 8.2); it grants no authority."""
    channel = args.get("channel")
    locator = {"channel": channel, "number": args.get("number")}
    if error.code == "stale_update" and channel:
        return {"tool": "task_get", "arguments": locator}
    if error.code in ("task_not_found", "task_deleted") and channel:
        return {"tool": "task_list", "arguments": {"channel": channel}}
    if error.code == "channel_not_found" and error.candidates:
        first = error.candidates[0].get("channel")
        return {"tool": "task_list", "arguments": {"channel": first}} if first else None
    if error.code == "subtask_mode_required" and channel:
        return {"tool": "task_get", "arguments": locator}
    if error.code in ("cursor_mismatch", "cursor_invalid"):
        return {"tool": tool, "arguments": {k: v for k, v in args.items() if k != "cursor"}}
    if error.code == "outcome_unknown" and tool == "task_create" and channel:
        titles = [t.get("title") for t in args.get("tasks", [])]
        return (
            {
                "tool": "task_list",
                "arguments": {"channel": channel, "query": titles[0], "status": "all"},
            }
            if titles
            else None
        )
    if error.code == "outcome_unknown" and "number" in args and channel:
        return {"tool": "task_get", "arguments": locator}
    return None
