"""What an upstream answer, or its absence, is: a non-2xx status and its body, a transport
failure (how far the request got), a ``Retry-After``; each becomes a `ToolError` through the
retryability table (`bridge._errors.RETRY_TABLE`).

Split from ``bridge._errors`` (issue 31: modules under ~600 lines) along its seam: that module
knows the codes, the table and the error type; this one reads what the Task service (or the
network between) answered. Product codes pass through only from the runtime's own error
envelope; whatever else the body says reaches the model cut, screened and renamed
(``_snake_paths``, ``_candidates``), never raw.
"""

from __future__ import annotations

import math
import re
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Final

from ._dto import model_text, snake_keys, snake_path
from ._errors import (
    PRODUCT_CODES,
    ErrorCode,
    Failure,
    OperationKind,
    ToolError,
    answer,
    failure_error,
)
from ._screen import cut

if TYPE_CHECKING:
    from ._http11 import TransportFailure

__all__ = [
    "classify_upstream_error",
    "http_failure",
    "malformed_answer",
    "parse_retry_after",
    "transport_error",
]

# Upstream codes the bridge knows under another name; also passed through (as that name).
_UPSTREAM_ALIASES: Final[dict[str, ErrorCode]] = {
    "validation_failed": "invalid_arguments",
    "token_scope_mismatch": "credential_mismatch",
    "idempotency_key_requires_callback": "idempotency_key_requires_callback",
}
# upstream code -> the code passed through to the model: the product codes and the aliases.
_PASSED_THROUGH: Final[dict[str, ErrorCode]] = dict(_UPSTREAM_ALIASES)
_PASSED_THROUGH.update((code, code) for code in PRODUCT_CODES)
# The runtime's documented 503 code: refused before any processing (docs/runtime.md).
_NOT_PROCESSED_503 = "service_unavailable"
_NOT_PROCESSED_429 = "rate_limited"
# Answers whose Retry-After (or `details.retryAfterSeconds`) is passed on when retrying is safe.
_WAIT_SAID: Final = frozenset(
    {"http_429", "http_429_unattributed", "http_503_not_processed", "http_503"}
)
_MAX_RETRY_AFTER_SECONDS = 86_400

_PLAIN_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")


# How far a request got when no HTTP answer came back (TransportFailure.kind -> table row).
_NOT_SENT: Final[dict[str, Failure]] = {
    "connect_failed": "connect_refused",
    "connect_timeout": "timeout_before_send",
    "pool_timeout": "timeout_before_send",
}
_SENT: Final[dict[str, Failure]] = {
    "timeout": "timeout_after_send",
    "response_too_large": "unusable_answer",
}


def transport_error(failure: TransportFailure, kind: OperationKind) -> ToolError:
    """The answer to an exchange that produced no usable HTTP response (see RETRY_TABLE)."""
    if failure.kind == "invalid_request":
        # The bridge builds every request part but the token: a token with CR, LF or NUL.
        return ToolError(
            "credential_unavailable",
            "The bearer token cannot be sent: it contains a line break or NUL character.",
        )
    if failure.sent:
        return failure_error(_SENT.get(failure.kind, "dropped_after_send"), kind)
    return failure_error(_NOT_SENT.get(failure.kind, "dropped_before_send"), kind)


def malformed_answer(kind: OperationKind) -> ToolError:
    """A 2xx the bridge cannot use (not JSON, nested too deeply, not the tool's documented
    shape): for a mutation it committed, so it is in doubt, never a retryable failure that would
    apply it twice."""
    return failure_error("unusable_answer", kind)


def http_failure(status: int, code: str | None, *, refreshable: bool) -> Failure:
    """Which failure an upstream answer with a non-2xx status is (see FAILURE_CASES).

    Only the runtime's own error envelope proves a 429 or 503 was not processed: a proxy or
    gateway may answer either (with a Retry-After) after the service committed the request, so
    without it a mutation is in doubt, never a plain retryable failure that would repeat it."""
    if 300 <= status < 400:
        return "http_3xx"
    if status == 401:
        return "http_401_refreshed" if refreshable else "http_401_static"
    if status == 408:
        return "http_408"
    if status == 429:
        return "http_429" if code == _NOT_PROCESSED_429 else "http_429_unattributed"
    if 400 <= status < 500:
        return "http_4xx_product" if _product_code(code) else "http_4xx_other"
    if status == 502:
        return "http_502"
    if status == 503:
        return "http_503_not_processed" if code == _NOT_PROCESSED_503 else "http_503"
    if status == 504:
        return "http_504"
    if 500 <= status < 600:
        return "http_500"
    return "unusable_answer"  # 1xx as a final answer, 6xx...: nothing the bridge can read


def _product_code(code: str | None) -> ErrorCode | None:
    """The code to pass through for an upstream code, or None when it is not one to trust."""
    return None if code is None else _PASSED_THROUGH.get(code)


def classify_upstream_error(
    status: int,
    body: Any,
    *,
    kind: OperationKind,
    retry_after: str | None,
    refreshable: bool = True,
) -> ToolError:
    """Map a non-2xx upstream answer to a contract error; product codes pass through."""
    upstream = body.get("error") if isinstance(body, dict) else None
    upstream = upstream if isinstance(upstream, dict) else {}
    raw_code = upstream.get("code")
    raw_code = raw_code if isinstance(raw_code, str) else None
    failure = http_failure(status, raw_code, refreshable=refreshable)
    if failure == "http_4xx_product":
        code = _product_code(raw_code)
        assert code is not None
        message = upstream.get("message")
        return ToolError(
            code,
            model_text(message) if isinstance(message, str) and len(message) <= 500 else None,
            retryable=False,
            field_errors=_snake_paths(upstream.get("fieldErrors")),
            candidates=_candidates(upstream.get("candidates")),
        )
    seconds = None
    if failure in _WAIT_SAID and answer(failure, kind).retryable:
        seconds = parse_retry_after(retry_after)
        if seconds is None:
            details = upstream.get("details")
            if isinstance(details, dict):
                seconds = parse_retry_after(details.get("retryAfterSeconds"))
    return failure_error(
        failure,
        kind,
        detail=_status_detail(status, raw_code, seconds),
        retry_after_seconds=seconds,
    )


def _status_detail(status: int, code: str | None, seconds: int | None) -> str:
    said = f" It answered HTTP {status}"
    if code is not None and _PLAIN_CODE.fullmatch(code):
        said += f" with code `{code}`"
    said += "."
    if seconds is not None:
        said += f" Retry after {seconds} s."
    return said


def parse_retry_after(value: object) -> int | None:
    """`Retry-After` (delta seconds or an HTTP date) as whole seconds, rounded up (contract 4.6),
    at least 0 and at most a day; None when absent or unreadable."""
    seconds: float | None = None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(text).timestamp() - time.time()
            except (TypeError, ValueError, IndexError):
                return None
    if seconds is None or math.isnan(seconds):
        return None
    return min(_MAX_RETRY_AFTER_SECONDS, max(0, math.ceil(min(seconds, 1e9))))


def _snake_paths(errors: Any) -> dict[str, str] | None:
    """`fieldErrors` for the model: paths renamed, reasons cut to 300 characters. The body was
    screened first (`_screen`): a cut never splits a redaction marker, nor leaves a fragment."""
    if not isinstance(errors, dict):
        return None
    return {
        snake_path(str(path)): model_text(cut(str(reason), 300))
        for path, reason in list(errors.items())[:20]
    }


def _candidates(items: Any) -> list[dict[str, Any]] | None:
    if not isinstance(items, list):
        return None
    return [snake_keys(item) for item in items[:5] if isinstance(item, dict)]
