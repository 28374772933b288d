"""The one HTTP operation of each tool (contract section 13.3), over a shared httpx pool.

`prepare` turns validated model input into the upstream request (camelCase DTO, hidden context
injected, encoded once). `exchange` sends it and classifies transport failures; the call flow
decides about refresh, replay and journaling, so every step stays visible in one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from ._errors import ToolError
from ._registry import ToolSpec

_encode = msgspec.json.Encoder().encode
_USER_AGENT = "agentteam-task-bridge"
# Response headers worth keeping in the journal; nothing else is recorded.
KEPT_HEADERS = ("content-type", "retry-after", "deprecation", "sunset", "link", "x-request-id")


@dataclass(frozen=True, slots=True)
class Prepared:
    method: str
    route: str  # the route template with ids filled in, no host
    params: dict[str, str] | None
    body: bytes | None
    # What the journal records as the upstream body (the DTO as sent; no header, no token).
    journal_body: Any


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]
    duration_ms: float


class TransportFailure(Exception):
    """No HTTP answer: `sent` says whether the request may have reached the server."""

    def __init__(self, kind: str, sent: bool) -> None:
        super().__init__(kind)
        self.kind = kind
        self.sent = sent


@lru_cache(maxsize=256)
def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camelize(value: Any) -> Any:
    """Rename every key of a builtins tree from snake_case to the upstream camelCase."""
    if isinstance(value, dict):
        return {camel(k): camelize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camelize(v) for v in value]
    return value


def prepare(
    spec: ToolSpec, base_route: str, arguments: dict[str, Any], injected: dict[str, str]
) -> Prepared:
    """Build the upstream request from validated, canonical (snake_case) arguments."""
    dto = camelize(arguments)
    dto.update(injected)
    route = base_route + spec.upstream.suffix
    if spec.upstream.method == "GET":
        params = {k: _query_value(v) for k, v in dto.items()}
        return Prepared("GET", route, params, None, dto)
    return Prepared("POST", route, None, _encode(dto), dto)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return _encode(value).decode()
    return str(value)


def base_route(workspace_id: str, agent_id: str) -> str:
    return (
        f"/api/v1/workspaces/{quote(workspace_id, safe='')}/agents/"
        f"{quote(agent_id, safe='')}/runtime/tasks"
    )


class UpstreamClient:
    """A pooled HTTP client for one Agent Runtime base URL."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_seconds: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(timeout_seconds, connect=min(3.0, timeout_seconds)),
            limits=httpx.Limits(
                max_connections=64, max_keepalive_connections=64, keepalive_expiry=30.0
            ),
            headers={"user-agent": _USER_AGENT, "accept": "application/json"},
            transport=transport,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def exchange(self, prepared: Prepared, token: str) -> Reply:
        headers = {"authorization": f"Bearer {token}"}
        if prepared.body is not None:
            headers["content-type"] = "application/json"
        request = self._client.build_request(
            prepared.method,
            prepared.route,
            params=prepared.params,
            content=prepared.body,
            headers=headers,
        )
        started = time.perf_counter()
        try:
            response = await self._client.send(request)
            body = response.content
        except httpx.ConnectError:
            raise TransportFailure("connect_failed", sent=False) from None
        except httpx.ConnectTimeout:
            raise TransportFailure("connect_timeout", sent=False) from None
        except httpx.PoolTimeout:
            raise TransportFailure("pool_timeout", sent=False) from None
        except httpx.TimeoutException:
            raise TransportFailure("timeout", sent=True) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise TransportFailure("connection_dropped", sent=True) from None
        headers_kept = {k: response.headers[k] for k in KEPT_HEADERS if k in response.headers}
        return Reply(
            response.status_code, body, headers_kept, (time.perf_counter() - started) * 1000
        )


def transport_error(failure: TransportFailure, *, mutation: bool, has_key: bool) -> ToolError:
    if not failure.sent:
        return ToolError("upstream_unreachable")
    if mutation:
        hint = (
            " Retrying with the same idempotency_key is safe."
            if has_key
            else " Check with task_get or task_list before retrying."
        )
        return ToolError(
            "outcome_unknown",
            "The request was sent but no answer came back; it may have taken effect." + hint,
            retryable=has_key,
        )
    return ToolError("upstream_timeout" if failure.kind == "timeout" else "upstream_failure")
