"""The reference runtime's error tree and its one JSON error shape.

    ApiError                    every failure a route answers with (status, code, message)
    ├── BadRequest      400     the body or query is not what the route parses
    ├── ValidationFailed 422    parsed, but a rule of section 13 refuses it (field_errors)
    ├── Unauthorized    401     no bearer token, an unknown one, or an expired one
    ├── Forbidden       403     a valid token for another principal, or an act the agent may not do
    ├── NotFound        404     an unknown board, task or scope (with candidates)
    ├── MethodNotAllowed 405    a known route asked with another method
    ├── Conflict        409     stale update, idempotency conflict, target/board conflict
    ├── TooLarge        413     a body over the size limit
    ├── RateLimited     429     fault injection only, with Retry-After
    └── Internal        500     an unexpected failure (never a stack on the wire)

The wire shape is ``{"error": {"code", "message", "fieldErrors"?, "candidates"?, "details"?}}``.
Codes are stable snake_case; ``fieldErrors`` keys are JSON paths of the request
(``$.tasks[0].title``).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    status = 500

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field_errors: dict[str, str] | None = None,
        candidates: list[dict[str, Any]] | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field_errors = field_errors
        self.candidates = candidates
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field_errors:
            error["fieldErrors"] = self.field_errors
        if self.candidates is not None:
            error["candidates"] = self.candidates
        if self.details:
            error["details"] = self.details
        return {"error": error}


class BadRequest(ApiError):
    status = 400


class ValidationFailed(ApiError):
    status = 422

    def __init__(
        self,
        field_errors: dict[str, str],
        message: str | None = None,
        code: str = "validation_failed",
        **kw: Any,
    ) -> None:
        super().__init__(code, message or _summary(field_errors), field_errors=field_errors, **kw)


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class MethodNotAllowed(ApiError):
    status = 405


class TooLarge(ApiError):
    status = 413


class RateLimited(ApiError):
    status = 429


class Internal(ApiError):
    status = 500


def _summary(field_errors: dict[str, str]) -> str:
    path, reason = next(iter(field_errors.items()))
    more = len(field_errors) - 1
    tail = f" (and {more} more)" if more else ""
    return f"{reason} - at `{path}`{tail}"
