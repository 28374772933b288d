"""Routing of the seven Agent Runtime routes and the admin surface onto the store."""

from __future__ import annotations

import hmac
import logging
import re
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, get_args
from urllib.parse import parse_qsl, urlsplit

import msgspec
import trio

from . import _dto as dto
from ._errors import (
    ApiError,
    BadRequest,
    Internal,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    TooLarge,
    ValidationFailed,
)
from ._faults import Faults
from ._http import DropConnection, Request, Response
from ._store import Principal, Store

log = logging.getLogger("agentteam.runtime")

_ROUTE = re.compile(
    r"^/api/v1/workspaces/(?P<ws>[^/]+)/agents/(?P<agent>[^/]+)/runtime/tasks"
    r"(?P<op>/get|/update|/add-checkpoint|/set-claim|/delete)?$"
)
# (method, route suffix) -> operation name, exactly the table of contract section 13.3.
_OPS: dict[tuple[str, str | None], str] = {
    ("GET", None): "list",
    ("POST", None): "create",
    ("POST", "/get"): "get",
    ("POST", "/update"): "update",
    ("POST", "/add-checkpoint"): "checkpoint",
    ("POST", "/set-claim"): "set-claim",
    ("POST", "/delete"): "delete",
}
_LIST_PARAMS = frozenset(
    {"channel", "query", "status", "includeSubtasks", "limit", "cursor", "sort", "filters"}
)
_STATUS_VIEWS = frozenset(get_args(dto.StatusView))
_SORTS = frozenset(get_args(dto.Sort))
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<f>[^`]+)`")
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<f>[^`]+)`")

_encode = msgspec.json.Encoder().encode
# What the `deprecated` fault adds: RFC 9745 Deprecation, RFC 8594 Sunset, a successor link.
_DEPRECATION_HEADERS = {
    "deprecation": "@1796083200",
    "sunset": "Tue, 01 Feb 2028 00:00:00 GMT",
    "link": '</api/v2/tasks>; rel="successor-version"',
}
S = TypeVar("S", bound=msgspec.Struct)


class App:
    """The HTTP face of one runtime: parses, authenticates, injects faults, dispatches."""

    def __init__(self, store: Store, faults: Faults, admin_token: str | None) -> None:
        self.store = store
        self.faults = faults
        # The W3C `traceparent` of the latest operation requests (None where absent), so a test
        # or an operator can see that callers propagate trace context.
        self.traceparents: deque[str | None] = deque(maxlen=1000)
        self._admin_token = admin_token
        self._decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}
        self._ops: dict[str, Callable[[Principal, Request], dict[str, Any]]] = {
            "list": lambda p, r: store.list_tasks(p, parse_list_query(r.target)),
            "create": lambda p, r: store.create_tasks(p, self._decode(r, dto.CreateRequest)),
            "get": lambda p, r: store.get_task(p, self._decode(r, dto.GetRequest)),
            "update": lambda p, r: store.update_task(p, self._decode(r, dto.UpdateRequest)),
            "checkpoint": lambda p, r: store.add_checkpoint(
                p, self._decode(r, dto.CheckpointRequest)
            ),
            "set-claim": lambda p, r: store.set_claim(p, self._decode(r, dto.SetClaimRequest)),
            "delete": lambda p, r: store.delete_task(p, self._decode(r, dto.DeleteRequest)),
        }

    async def handle(self, request: Request) -> Response:
        try:
            path = urlsplit(request.target).path
            if path.startswith("/_admin/"):
                return self._admin(request, path)
            if path == "/healthz":
                return _json(200, {"ok": True})
            return await self._operation(request, path)
        except ApiError as exc:
            return _json(exc.status, exc.body(), exc.headers)
        except DropConnection:
            raise
        except Exception:
            log.exception("unexpected failure on %s %s", request.method, request.target)
            return _json(500, Internal("internal_error", "The runtime failed unexpectedly.").body())

    async def _operation(self, request: Request, path: str) -> Response:
        self.traceparents.append(request.headers.get("traceparent"))
        match = _ROUTE.match(path)
        if match is None:
            raise NotFound("route_not_found", f"No route {path}.")
        op = _OPS.get((request.method, match["op"]))
        if op is None:
            raise MethodNotAllowed(
                "method_not_allowed", f"{request.method} is not allowed on {path}."
            )
        fault = self.faults.take(op)
        if fault is not None:
            if fault.kind == "latency":
                await trio.sleep(fault.delay_ms / 1000)
            elif fault.kind == "drop":
                raise DropConnection
            elif fault.kind == "unauthorized":
                return _json(
                    401,
                    {
                        "error": {
                            "code": "token_expired",
                            "message": "The bearer token has expired.",
                        }
                    },
                )
            elif fault.kind == "status":
                return _fault_status(fault)
            elif fault.kind == "echo_credentials":
                return _echo_credentials(request.headers.get("authorization", ""))
        principal = self.store.authenticate(
            request.headers.get("authorization"), match["ws"], match["agent"]
        )
        result = self._ops[op](principal, request)
        if fault is not None and fault.kind == "drop_after_commit":
            raise DropConnection
        body = _encode(result)
        if fault is not None and fault.kind == "malformed":
            return Response(200, body[: len(body) // 2 or 1])
        if fault is not None and fault.kind == "deprecated":
            return Response(200, body, list(_DEPRECATION_HEADERS.items()))
        return Response(200, body)

    def _decode(self, request: Request, type_: type[S]) -> S:
        decoder = self._decoders.get(type_)
        if decoder is None:
            decoder = self._decoders[type_] = msgspec.json.Decoder(type_)
        try:
            value: S = decoder.decode(request.body)
        except msgspec.ValidationError as exc:
            raise ValidationFailed(field_errors(str(exc))) from None
        except msgspec.DecodeError as exc:
            raise BadRequest("invalid_json", f"The body is not valid JSON: {exc}.") from None
        return value

    # --- admin -----------------------------------------------------------------------------

    def _admin(self, request: Request, path: str) -> Response:
        supplied = request.headers.get("x-admin-token", "")
        if self._admin_token is None or not hmac.compare_digest(supplied, self._admin_token):
            raise NotFound("route_not_found", f"No route {path}.")
        store = self.store
        if request.method == "GET" and path == "/_admin/stats":
            return _json(
                200,
                {
                    "stats": store.stats(),
                    "faults": self.faults.pending(),
                    "faultsFired": self.faults.fired,
                },
            )
        if request.method != "POST":
            raise MethodNotAllowed(
                "method_not_allowed", f"{request.method} is not allowed on {path}."
            )
        if path == "/_admin/tokens":
            mint = self._decode(request, dto.MintToken)
            ttl = None if mint.ttl_seconds is msgspec.UNSET else mint.ttl_seconds
            token, expires_at = store.mint_token(mint.workspace_id, mint.agent_id, ttl)
            return _json(200, {"token": token, "expiresAt": expires_at})
        if path == "/_admin/workspaces":
            ws = self._decode(request, dto.NewWorkspace)
            store.add_workspace(ws.id, ws.name)
        elif path == "/_admin/members":
            m = self._decode(request, dto.NewMember)
            store.add_member(
                m.workspace_id,
                m.id,
                m.handle,
                m.kind,
                None if m.display_name is msgspec.UNSET else m.display_name,
            )
        elif path == "/_admin/boards":
            b = self._decode(request, dto.NewBoard)
            store.add_board(
                b.workspace_id, b.slug, b.member_ids, None if b.name is msgspec.UNSET else b.name
            )
        elif path in ("/_admin/callbacks", "/_admin/callbacks/complete"):
            cb = self._decode(request, dto.Callback)
            if path.endswith("/complete"):
                store.complete_callback(cb.workspace_id, cb.run_id, cb.callback_effect_id)
            else:
                if cb.responder_agent_id is msgspec.UNSET:
                    raise ValidationFailed({"$.responderAgentId": "required to open a callback"})
                store.open_callback(
                    cb.workspace_id, cb.run_id, cb.callback_effect_id, cb.responder_agent_id
                )
        elif path == "/_admin/faults":
            spec = self._decode(request, dto.FaultSpec)
            try:
                self.faults.arm(spec)
            except ValueError as exc:
                raise ValidationFailed({"$.op": str(exc)}) from None
        elif path == "/_admin/faults/clear":
            self.faults.clear()
        else:
            raise NotFound("route_not_found", f"No route {path}.")
        return _json(200, {"ok": True})


def parse_list_query(target: str) -> dto.ListQuery:
    """Parse the list route's query string strictly: unknown or repeated parameters are refused."""
    pairs = parse_qsl(urlsplit(target).query, keep_blank_values=True)
    params: dict[str, str] = {}
    errors: dict[str, str] = {}
    for key, value in pairs:
        if key not in _LIST_PARAMS:
            errors[f"$.{key}"] = "unknown parameter"
        elif key in params:
            errors[f"$.{key}"] = "given more than once"
        params[key] = value
    channel = params.get("channel", "")
    if not channel:
        errors["$.channel"] = "required"
    status = params.get("status", "open")
    if status not in _STATUS_VIEWS:
        errors["$.status"] = f"expected one of {', '.join(sorted(_STATUS_VIEWS))}"
    sort = params.get("sort", "")
    if sort and sort not in _SORTS:
        errors["$.sort"] = f"expected one of {', '.join(sorted(_SORTS))}"
    include = params.get("includeSubtasks", "false")
    if include not in ("true", "false"):
        errors["$.includeSubtasks"] = "expected `true` or `false`"
    limit = dto.DEFAULT_LIMIT
    raw_limit = params.get("limit")
    if raw_limit is not None:
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= dto.MAX_LIMIT:
            errors["$.limit"] = f"expected an integer from 1 to {dto.MAX_LIMIT}"
        else:
            limit = int(raw_limit)
    query = params.get("query", "")
    if len(query) > 500:
        errors["$.query"] = "at most 500 characters"
    filters = dto.ListFilters()
    if params.get("filters"):
        try:
            filters = msgspec.json.decode(params["filters"], type=dto.ListFilters)
        except msgspec.ValidationError as exc:
            errors.update({f"$.filters{k[1:]}": v for k, v in field_errors(str(exc)).items()})
        except msgspec.DecodeError:
            errors["$.filters"] = "expected a JSON object"
    if errors:
        raise ValidationFailed(errors)
    return dto.ListQuery(
        channel=channel,
        query=query,
        status=status,
        include_subtasks=include == "true",
        limit=limit,
        cursor=params.get("cursor") or None,
        sort=sort,
        filters=filters,
    )


def field_errors(message: str) -> dict[str, str]:
    """Turn a msgspec validation message into ``{json path: reason}``."""
    reason, _, where = message.partition(" - at `")
    path = where.rstrip("`") if where else "$"
    for pattern, text in ((_MISSING_FIELD, "required"), (_UNKNOWN_FIELD, "unknown field")):
        found = pattern.match(reason)
        if found:
            return {f"{path}.{found['f']}": text}
    return {path: reason}


def _fault_status(fault: dto.FaultSpec) -> Response:
    if fault.status == 429:
        retry = 1 if fault.retry_after_seconds is msgspec.UNSET else fault.retry_after_seconds
        err = RateLimited(
            "rate_limited", "Too many requests; retry later.", details={"retryAfterSeconds": retry}
        )
        return _json(429, err.body(), {"retry-after": str(retry)})
    code = "service_unavailable" if fault.status == 503 else "upstream_failure"
    return _json(fault.status, {"error": {"code": code, "message": "Injected failure."}})


def _echo_credentials(authorization: str) -> Response:
    """A misbehaving upstream: a 403 whose error body repeats the caller's credential."""
    token = authorization.removeprefix("Bearer ")
    body = {
        "error": {
            "code": "not_a_member",
            "message": f"The agent holding {token} is not a member ({authorization}).",
            "fieldErrors": {"$.authorization": authorization, "$.channel": f"not for {token}"},
            "candidates": [{"channel": "general", "note": token}],
        }
    }
    return _json(403, body)


def too_large() -> Response:
    return _json(413, TooLarge("payload_too_large", "The body is larger than 1 MiB.").body())


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status, _encode(body), list((headers or {}).items()))
