"""The one HTTP operation of each tool (contract section 13.3), over a shared keep-alive pool.

`prepare` turns validated model input into the upstream request (camelCase DTO, hidden context
injected, encoded once). `exchange` sends it and classifies transport failures; the call flow
decides about refresh, replay and journaling, so every step stays visible in one place.

The seam below `exchange` is one :class:`Transport`, shaped like ``Http11Pool.request``: the
bridge's own pool in production, a scripted one (``bridge.testing``) in unit tests and in
``agentteam-replay rerun``. Whichever it is, a request without an HTTP answer is a
``TransportFailure`` whose kind and ``sent`` say how far it got, so every path below the call
flow classifies failures the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

import msgspec

from ._http11 import Http11Pool, TransportFailure
from ._network import Proxy, proxy_for, tls_context
from ._registry import ToolSpec

__all__ = [
    "KEPT_HEADERS",
    "Prepared",
    "Reply",
    "Transport",
    "TransportFailure",
    "UpstreamClient",
    "camelize",
    "prepare",
]

_encode = msgspec.json.Encoder().encode
_USER_AGENT = "agentteam-task-bridge"
# Response headers worth keeping in the journal; nothing else is recorded.
KEPT_HEADERS = ("content-type", "retry-after", "deprecation", "sunset", "link", "x-request-id")
_KEPT = frozenset(name.encode() for name in KEPT_HEADERS)
_JSON_CONTENT = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class Prepared:
    method: str
    route: str  # the route template with ids filled in, no host
    params: dict[str, str] | None
    body: bytes | None
    # What the journal records as the upstream body (the DTO as sent; no header, no token).
    journal_body: Any

    def target(self) -> str:
        """The request target: the route, and the query of a GET."""
        if not self.params:
            return self.route
        return self.route + "?" + urlencode(self.params, quote_via=quote)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]
    duration_ms: float


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


class Transport(Protocol):
    """What carries one request to the upstream: ``Http11Pool`` in production.

    ``request`` answers (status, header fields with lower-case names, body) or raises
    ``TransportFailure``; ``target`` is the route with its query, ``headers`` the per-request
    fields (the transport adds its own fixed ones: host, user agent)."""

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]: ...

    async def aclose(self) -> None: ...


class UpstreamClient:
    """The HTTP client for one Agent Runtime base URL: the bridge's own HTTP/1.1 pool, or the
    given ``transport`` (a scripted one from ``bridge.testing``). Failures come out as
    TransportFailure either way."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_seconds: float = 10.0,
        keepalive_seconds: float = 4.0,
        env: Mapping[str, str] | None = None,
        transport: Transport | None = None,
    ) -> None:
        """``env`` holds the proxy and CA variables (see :mod:`bridge._network`); without it
        the connection is direct and trusts the system store. Raises NetworkConfigError for a
        proxy or CA setting that cannot be used."""
        if transport is None:
            env = env or {}
            https = urlsplit(base_url).scheme == "https"
            transport = Http11Pool(
                base_url,
                timeout_seconds=timeout_seconds,
                connect_timeout_seconds=3.0,
                keepalive_expiry_seconds=keepalive_seconds,
                user_agent=_USER_AGENT,
                proxy=proxy_for(base_url, env),
                ssl_context=tls_context(env) if https else None,
            )
        self._transport = transport

    @property
    def proxy(self) -> Proxy | None:
        """The proxy every request goes through, if the environment chose one."""
        transport = self._transport
        return transport.proxy if isinstance(transport, Http11Pool) else None

    async def probe(self) -> None:
        """Open a connection now (proxy, tunnel, TLS); TransportFailure says why it cannot."""
        if isinstance(self._transport, Http11Pool):
            await self._transport.probe()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def exchange(
        self, prepared: Prepared, token: str, trace: list[tuple[bytes, bytes]] | None = None
    ) -> Reply:
        """One request; `trace` is the W3C trace context headers to send with it, if any."""
        started = time.perf_counter()
        headers = [(b"authorization", b"Bearer " + token.encode())]
        if prepared.body is not None:
            headers.append(_JSON_CONTENT)
        if trace:
            headers += trace
        status, raw_headers, body = await self._transport.request(
            prepared.method, prepared.target(), headers, prepared.body
        )
        return Reply(
            status, body, _kept_headers(raw_headers), (time.perf_counter() - started) * 1000
        )


def _kept_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The KEPT_HEADERS of a response (h11 lower-cases names); repeated ones joined by ", "."""
    kept: dict[str, str] = {}
    for name, value in raw:
        if name in _KEPT:
            key = name.decode()
            text = value.decode("latin-1")
            kept[key] = f"{kept[key]}, {text}" if key in kept else text
    return kept
