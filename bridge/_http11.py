"""The upstream HTTP/1.1 client: h11 over trio streams, a LIFO pool of keep-alive connections.

The bridge sends one small request per tool call to one origin, so it needs little of a general
HTTP client: no redirects, cookies, proxies, auth flows or content decoding (it asks for none).
What it does need is to be cheap and to hold up under concurrency. httpx 0.28 over httpcore 1.0
under trio was measured at about 0.25 ms of bridge CPU per request more than this, and under 16
requests in flight its pool reassigns requests between connections (several connection attempts
per request), so the bridge speaks HTTP/1.1 itself; ``httpx.MockTransport`` stays available for
unit tests through ``UpstreamClient(transport=...)``.

One deadline covers a whole exchange (pool wait, connect, send, receive). Every failure is a
:class:`TransportFailure` whose ``sent`` says whether the request may have reached the server.
"""

from __future__ import annotations

import select
import ssl
import time
from typing import Final
from urllib.parse import urlsplit

import h11
import trio

MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
_RECEIVE_BYTES: Final = 65536


class TransportFailure(Exception):
    """No HTTP answer: `sent` says whether the request may have reached the server."""

    def __init__(self, kind: str, sent: bool) -> None:
        super().__init__(kind)
        self.kind = kind
        self.sent = sent


class _TooLarge(Exception):
    """The response body passed MAX_RESPONSE_BYTES."""


class _Connection:
    __slots__ = ("h11", "idle_since", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def _socket(self) -> trio.socket.SocketType:
        stream = self.stream
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        assert isinstance(stream, trio.SocketStream)
        return stream.socket

    def close_now(self) -> None:
        self._socket().close()

    def closed_by_peer(self) -> bool:
        """An idle keep-alive connection with something to read has been closed (or spoiled)."""
        try:
            readable, _, _ = select.select([self._socket().fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


class Http11Pool:
    """Keep-alive connections to one origin; `request` is the whole exchange."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        max_connections: int = 64,
        keepalive_expiry_seconds: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        user_agent: str,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._https else 80)
        authority = parts.netloc.rpartition("@")[2]  # never send userinfo
        self._host_header = (authority if not default_port else self._host).encode()
        self._fixed: list[tuple[bytes, bytes]] = [
            (b"host", self._host_header),
            (b"user-agent", user_agent.encode()),
            (b"accept", b"application/json"),
        ]
        self._timeout = timeout_seconds
        self._connect_timeout = min(connect_timeout_seconds, timeout_seconds)
        self._expiry = keepalive_expiry_seconds
        self._max_body = max_response_bytes
        self._slots = trio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self._https else None
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await trio.aclose_forcefully(connection.stream)

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes | None,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body) of one exchange; raises TransportFailure."""
        if self._closed:
            raise TransportFailure("closed", sent=False)
        head = [*self._fixed, *headers]
        if body is not None:
            head.append((b"content-length", str(len(body)).encode()))
        request = h11.Request(method=method, target=self._prefix + target, headers=head)
        deadline = trio.current_time() + self._timeout
        with trio.move_on_at(deadline) as scope:
            await self._slots.acquire()
        if scope.cancelled_caught:
            raise TransportFailure("pool_timeout", sent=False)
        try:
            connection = self._reuse() or await self._connect(deadline)
            # From here on the request may have reached the server, whatever fails.
            try:
                with trio.fail_at(deadline):
                    answer = await self._exchange(connection, request, body)
            except trio.TooSlowError:
                await trio.aclose_forcefully(connection.stream)
                raise TransportFailure("timeout", sent=True) from None
            except _TooLarge:
                await trio.aclose_forcefully(connection.stream)
                raise TransportFailure("response_too_large", sent=True) from None
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
                await trio.aclose_forcefully(connection.stream)
                raise TransportFailure("connection_dropped", sent=True) from None
            except BaseException:  # cancelled mid-exchange: the connection is in an unknown state
                await trio.aclose_forcefully(connection.stream)
                raise
            await self._release(connection)
            return answer
        finally:
            self._slots.release()

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < self._expiry and not connection.closed_by_peer():
                return connection
            connection.close_now()
        return None

    async def _connect(self, deadline: float) -> _Connection:
        try:
            with trio.fail_at(min(deadline, trio.current_time() + self._connect_timeout)):
                stream: trio.abc.Stream = await trio.open_tcp_stream(self._host, self._port)
                if self._ssl is not None:
                    tls = trio.SSLStream(stream, self._ssl, server_hostname=self._host)
                    await tls.do_handshake()
                    stream = tls
        except trio.TooSlowError:
            raise TransportFailure("connect_timeout", sent=False) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError):
            raise TransportFailure("connect_failed", sent=False) from None
        return _Connection(stream)

    async def _exchange(
        self, connection: _Connection, request: h11.Request, body: bytes | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        conn = connection.h11
        data = conn.send(request) or b""
        if body:
            data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await connection.stream.send_all(data)
        status = 0
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                received = await connection.stream.receive_some(_RECEIVE_BYTES)
                conn.receive_data(bytes(received))  # b"" is EOF: h11 raises if it is premature
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, list(event.headers)
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self._max_body:
                    raise _TooLarge
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, headers, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                raise h11.RemoteProtocolError("the server closed the connection mid-response")
            # h11.InformationalResponse (1xx) needs nothing: the final response follows.

    async def _release(self, connection: _Connection) -> None:
        conn = connection.h11
        if self._closed or conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            await trio.aclose_forcefully(connection.stream)
            return
        conn.start_next_cycle()
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
