"""The upstream HTTP/1.1 client: a lean codec over trio streams, a LIFO pool of keep-alive
connections.

The bridge sends one small request per tool call to one origin, so it needs little of a general
HTTP client: no redirects, cookies, auth flows or content decoding (it asks for none). What an
operator's network needs it does: an HTTP forward proxy chosen from ``HTTP_PROXY`` /
``HTTPS_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` (:mod:`bridge._proxy`; a CONNECT tunnel for https,
absolute-form targets for http, ``Proxy-Authorization`` from the proxy URL's userinfo), the
system trust store or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, IPv6 literals, and a named reason for
every failed connection (a TLS certificate, hostname or protocol failure, a refused tunnel). All
of it is decided once per origin, when the pool is built: the per-request path is unchanged.
What it does need is to be cheap and to hold up under concurrency. httpx 0.28 over httpcore 1.0
under trio was measured at about 0.25 ms of bridge CPU per request more than this, and under 16
requests in flight its pool reassigns requests between connections (several connection attempts
per request), so the bridge speaks HTTP/1.1 itself; tests and ``rerun`` give
``UpstreamClient(transport=...)`` a scripted transport of the same shape (``bridge.testing``).

The codec is the client half of RFC 9112 a bridge needs, and strict about what it accepts: a
request is one ``bytes`` built from a header block fixed per origin (field values checked for
CR, LF and NUL, so a token cannot inject a header); a response is a status line, header fields
(no obs-fold, at most 64 KiB of head), then a body framed by ``Content-Length`` (repeats must
agree), ``Transfer-Encoding: chunked`` (never both, never another coding; trailer fields are
checked like header fields, then dropped) or the connection's end; 1xx answers are skipped, HEAD,
204 and 304 have no body. Anything else is malformed, and the connection is dropped. h11 0.16,
which the bridge used before, cost about 0.2 ms of CPU per exchange more for the same work; it
stays the oracle of the codec's tests.

One deadline covers a whole exchange (pool wait, connect, send, receive). Every failure is a
:class:`TransportFailure` whose ``sent`` says whether the request may have reached the server.
"""

from __future__ import annotations

import os
import re
import select
import ssl
import time
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import trio

from ._exceptions import BridgeError

if TYPE_CHECKING:
    from ._network import Proxy

MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
MAX_HEAD_BYTES: Final = 64 * 1024  # status line and header fields of one response
_RECEIVE_BYTES: Final = 65536
_STATUS_LINE: Final = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9][0-9])(?: [\t \x21-\x7e\x80-\xff]*)?")
_FIELD_NAME: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")
_UNSAFE_VALUE: Final = re.compile(rb"[\r\n\0]")
_BAD_FIELD_VALUE: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # field-vchar, SP, HTAB only
_UNSAFE_TARGET: Final = re.compile(rb"[\x00-\x20\x7f]")
_NO_BODY_STATUS: Final = frozenset({204, 304})


class TransportFailure(BridgeError):
    """No HTTP answer: `sent` says whether the request may have reached the server; `reason`,
    for a connection that could not be made, says why (for operators: stderr and the journal)."""

    def __init__(self, kind: str, sent: bool, reason: str | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.sent = sent
        self.reason = reason


class _TunnelRefused(Exception):
    """The proxy did not open the CONNECT tunnel; the message says how it answered."""


class _TooLarge(Exception):
    """The response body passed MAX_RESPONSE_BYTES."""


class _Malformed(Exception):
    """The answer is not HTTP/1.1 this client accepts, or the connection ended inside it."""


def _field_line(line: bytes) -> tuple[bytes, bytes]:
    """One `name: value` line of a head or a trailer, name lowercased; refuses what h11 does."""
    name, colon, value = line.partition(b":")
    if not colon or _FIELD_NAME.fullmatch(name) is None:  # obs-fold starts with SP/HTAB
        raise _Malformed("a malformed header field")
    value = value.strip(b" \t")
    if _BAD_FIELD_VALUE.search(value):
        raise _Malformed("a control character in a header field")
    return name.lower(), value


class _Connection:
    __slots__ = ("answered", "buffer", "idle_since", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()  # received and not yet consumed
        self.idle_since = 0.0
        # The status and fields of the current exchange's head, once read: a proxy that refuses a
        # request may close before reading its body (tinyproxy), and the reset ends the answer.
        self.answered: tuple[int, list[tuple[bytes, bytes]]] | None = None

    async def send(self, data: bytes) -> None:
        """Send a request. Over plain TCP the socket takes it at once (it is small and the
        connection idle): one `send` without the scheduling point `send_all` makes after it
        (~15 us); what the socket does not take goes through `send_all`. The response's wait
        is the exchange's point of cancellation."""
        stream = self.stream
        sent = 0
        if isinstance(stream, trio.SocketStream):
            try:
                sent = os.write(stream.socket.fileno(), data)
            except BlockingIOError:
                sent = 0
        if sent < len(data):
            await stream.send_all(data[sent:] if sent else data)

    async def _receive(self) -> None:
        data = await self.stream.receive_some(_RECEIVE_BYTES)
        if not data:
            raise _Malformed("the server closed the connection mid-response")
        self.buffer += data

    async def _find(self, separator: bytes, limit: int) -> int:
        """Index of the first separator in the buffer, receiving as needed (within limit bytes)."""
        start = 0
        while (end := self.buffer.find(separator, start)) < 0:
            if len(self.buffer) > limit:
                raise _Malformed(f"no {separator!r} within {limit} bytes")
            start = max(0, len(self.buffer) - len(separator) + 1)
            await self._receive()
        if end > limit:
            raise _Malformed(f"no {separator!r} within {limit} bytes")
        return end

    async def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._receive()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def read_response(
        self, method: str, max_body: int
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        """(status, headers with lower-cased names, body, whether the connection can be reused)."""
        while True:
            status, minor, headers = await self._read_head()
            if status >= 200:
                break
            if status == 101:
                raise _Malformed("an upgrade nobody asked for")
        self.answered = status, headers
        lengths = [value for name, value in headers if name == b"content-length"]
        codings = [value for name, value in headers if name == b"transfer-encoding"]
        reusable = minor == 1 and not any(
            name == b"connection"
            and b"close" in [token.strip() for token in value.lower().split(b",")]
            for name, value in headers
        )
        # The framing is checked even where no body follows (h11 does too).
        if codings and (
            lengths or [c.strip().lower() for c in b",".join(codings).split(b",")] != [b"chunked"]
        ):
            raise _Malformed("a transfer coding other than chunked alone")
        if any(not value.isdigit() or value != lengths[0] for value in lengths):
            raise _Malformed("a bad or conflicting Content-Length")
        if method == "HEAD" or status in _NO_BODY_STATUS:
            return status, headers, b"", reusable and not self.buffer
        if codings:
            body = await self._read_chunked(max_body)
        elif lengths:
            size = int(lengths[0])
            if size > max_body:
                raise _TooLarge
            body = await self._take(size)
        else:  # delimited by the end of the connection
            while True:
                if len(self.buffer) > max_body:
                    raise _TooLarge
                data = await self.stream.receive_some(_RECEIVE_BYTES)
                if not data:
                    break
                self.buffer += data
            body, reusable = bytes(self.buffer), False
            self.buffer.clear()
        # A keep-alive answer leaves nothing behind; bytes after it mean the stream is spoiled.
        return status, headers, body, reusable and not self.buffer

    async def _read_lines(self) -> list[bytes]:
        """The lines before the next empty line (at most MAX_HEAD_BYTES of them), consumed."""
        end = await self._find(b"\r\n\r\n", MAX_HEAD_BYTES)
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[: end + 4]
        return lines

    async def _read_head(self) -> tuple[int, int, list[tuple[bytes, bytes]]]:
        lines = await self._read_lines()
        matched = _STATUS_LINE.fullmatch(lines[0])
        if matched is None:
            raise _Malformed("not an HTTP/1.x status line")
        return int(matched[2]), int(matched[1]), [_field_line(line) for line in lines[1:]]

    async def _read_chunked(self, max_body: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            end = await self._find(b"\r\n", MAX_HEAD_BYTES)
            matched = _CHUNK_SIZE.fullmatch(self.buffer, 0, end)
            if matched is None:
                raise _Malformed("a bad chunk size")
            size = int(matched[1], 16)
            del self.buffer[: end + 2]
            if size == 0:
                break
            total += size
            if total > max_body:
                raise _TooLarge
            chunks.append(await self._take(size))
            if await self._take(2) != b"\r\n":
                raise _Malformed("a chunk without its CRLF")
        if await self._find(b"\r\n", MAX_HEAD_BYTES) == 0:
            del self.buffer[:2]  # no trailer fields
        else:  # trailer fields, bounded and checked like the head's, then dropped
            for line in await self._read_lines():
                _field_line(line)
        return b"".join(chunks)

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


_PROXY_STATUS: Final = {
    401: "proxy authentication required",  # tinyproxy's answer to CONNECT
    403: "forbidden by the proxy",
    407: "proxy authentication required",
    502: "the proxy could not reach the server",
    503: "the proxy is unavailable",
    504: "the proxy timed out reaching the server",
}
# The alerts a server sends about the client's certificate (RFC 8446 6.2), as OpenSSL names them.
_CLIENT_CERT_ALERTS: Final = (
    "BAD_CERTIFICATE",
    "UNSUPPORTED_CERTIFICATE",
    "CERTIFICATE_REVOKED",
    "CERTIFICATE_EXPIRED",
    "CERTIFICATE_UNKNOWN",
    "UNKNOWN_CA",
    "ACCESS_DENIED",
)
_HOSTNAME_MISMATCH: Final = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
# The Bearer scheme among a WWW-Authenticate value's challenges (RFC 9110: a scheme starts the
# value or follows a comma; a quoted parameter holding the word only errs towards the API's).
_BEARER: Final = re.compile(rb"(?:^|,)\s*bearer(?:[\s,]|$)", re.IGNORECASE)


def _from_proxy(status: int, fields: list[tuple[bytes, bytes]], credentials_sent: bool) -> bool:
    """Whether a forwarding proxy answered for itself. A 407 is the proxy's; so is a 401 that
    challenges for the proxy only (``Proxy-Authenticate``, no ``WWW-Authenticate``) and, when the
    bridge sent the proxy credentials, a 401 whose challenges offer no ``Bearer``: the bridge
    authenticates to the API with a bearer token only, and tinyproxy answers a wrong password with
    ``401`` and ``WWW-Authenticate: Basic realm="Tinyproxy"``. A 401 without any challenge (the
    reference runtime's) or one offering Bearer is the API's."""
    if status == 407:
        return True
    challenges = [value for name, value in fields if name == b"www-authenticate"]
    if not challenges:
        return any(name == b"proxy-authenticate" for name, _ in fields)
    return credentials_sent and not any(_BEARER.search(value) for value in challenges)


def connect_failure_reason(exc: BaseException, where: str) -> str:
    """Why a connection could not be made, in one line with a stable prefix: ``TLS certificate
    verify failed: ...``, ``TLS hostname mismatch: ...``, ``TLS protocol error: ...``, or
    ``cannot connect to host:port: ...``. trio reports TLS failures as BrokenResourceError
    caused by the ssl error, so the chain is walked."""
    cause = _ssl_error(exc)
    client_cert = _client_certificate_reason(cause)
    if client_cert is not None:
        return client_cert
    if isinstance(cause, ssl.SSLCertVerificationError):
        message = cause.verify_message or cause.reason or "the certificate was refused"
        if cause.verify_code in _HOSTNAME_MISMATCH or "mismatch" in message.lower():
            return f"TLS hostname mismatch: {message}"
        return f"TLS certificate verify failed: {message}"
    if isinstance(cause, ssl.SSLError):
        return f"TLS protocol error: {(cause.reason or str(cause)).lower().replace('_', ' ')}"
    if isinstance(exc, _Malformed):  # only the proxy's answer to CONNECT is read here
        return f"the proxy's answer to CONNECT is not HTTP/1.1 ({exc})"
    if isinstance(exc, trio.BrokenResourceError):
        return f"the connection to {where} closed during set-up"
    return f"cannot connect to {where}: {_os_error_text(exc)}"


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The ssl error behind exc (trio wraps it in BrokenResourceError), if any."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    return cause


def _client_certificate_reason(cause: ssl.SSLError | None) -> str | None:
    """``TLS client certificate required: ...`` / ``TLS client certificate rejected: ...`` for
    the server's alerts about the client's certificate (TLS 1.3 sends them after the client's
    handshake is done, on the first read), else None."""
    if cause is None or isinstance(cause, ssl.SSLCertVerificationError):
        return None
    alert = (cause.reason or "").upper()
    text = alert.lower().replace("_", " ")
    if "CERTIFICATE_REQUIRED" in alert:
        return (
            f"TLS client certificate required: the server asked for one ({text}); set "
            "AGENTTEAM_CLIENT_CERT and AGENTTEAM_CLIENT_KEY"
        )
    if any(name in alert for name in _CLIENT_CERT_ALERTS):
        return f"TLS client certificate rejected by the server: {text}"
    return None


def _os_error_text(exc: BaseException) -> str:
    """The errno text of a failed connect: ``[Errno 111] Connection refused``; trio's "all
    attempts to connect ... failed" keeps each attempt's errno (its cause, a group)."""
    leaves: list[str] = []

    def collect(error: BaseException | None) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        elif isinstance(error, OSError) and error.errno is not None:
            text = f"[Errno {error.errno}] {os.strerror(error.errno)}"
            if text not in leaves:
                leaves.append(text)
        elif error is not None and error.__cause__ is not None:
            collect(error.__cause__)

    collect(exc)
    if not leaves and exc.__cause__ is not None:
        collect(exc.__cause__)
    if isinstance(exc, OSError) and exc.errno is None and leaves:
        return f"{exc}: {'; '.join(leaves)}"
    return "; ".join(leaves) or str(exc)


class Http11Pool:
    """Keep-alive connections to one origin; `request` is the whole exchange."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_seconds: float,
        connect_timeout_seconds: float,
        max_connections: int = 64,
        keepalive_expiry_seconds: float = 4.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        user_agent: str,
        proxy: Proxy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname  # an IPv6 literal without its brackets, as sockets take it
        self._port = parts.port or (443 if self._https else 80)
        default_port = self._port == (443 if self._https else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._authority = f"{host}:{self._port}".encode()
        self._host_header = host.encode() if default_port else self._authority
        self._prefix = parts.path.rstrip("/").encode()
        self.proxy = proxy
        # Where the socket goes: the origin, or the proxy (a tunnel for https, absolute-form
        # request targets for http; either way decided here, once).
        self._dial = (proxy.host, proxy.port) if proxy else (self._host, self._port)
        self._tunnel = proxy is not None and self._https
        self._forwarded = proxy is not None and not self._https  # the proxy answers requests
        self._proxy_credentials = bool(self._forwarded and proxy and proxy.authorization)
        fixed = b"host: %s\r\nuser-agent: %s\r\naccept: application/json\r\n" % (
            self._host_header,
            user_agent.encode(),
        )
        if proxy is not None and not self._https:
            self._prefix = b"http://" + self._host_header + self._prefix
            if proxy.authorization is not None:
                fixed += b"proxy-authorization: %s\r\n" % proxy.authorization
        if _UNSAFE_VALUE.search(fixed.replace(b"\r\n", b"")):
            raise ValueError("a control character in the host, user agent or proxy credentials")
        self._fixed = fixed
        self._timeout = timeout_seconds
        self._connect_timeout = min(connect_timeout_seconds, timeout_seconds)
        self._expiry = keepalive_expiry_seconds
        self._max_body = max_response_bytes
        self._slots = trio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            self._ssl = ssl_context or ssl.create_default_context()
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
        request = self._encode(method, target, headers, body)
        deadline = trio.current_time() + self._timeout
        try:
            self._slots.acquire_nowait()  # a free slot: no scheduling point (~15 us)
        except trio.WouldBlock:
            with trio.move_on_at(deadline) as scope:
                await self._slots.acquire()
            if scope.cancelled_caught:
                raise TransportFailure("pool_timeout", sent=False) from None
        try:
            reused = self._reuse()
            connection = reused or await self._connect(deadline)
            if trio.current_time() >= deadline:
                # The slot's wait or the connect took the whole deadline: the send below has no
                # scheduling point to stop it, so say so here, with the request still unsent.
                await self._release(connection, reusable=True)
                kind = "pool_timeout" if reused else "connect_timeout"
                raise TransportFailure(
                    kind, sent=False, reason="the deadline passed before sending"
                )
            # From here on the request may have reached the server, whatever fails.
            exchanged = None
            try:
                # A plain scope, not `fail_at` (a generator-based context manager: ~5 us a call).
                with trio.CancelScope(deadline=deadline):
                    exchanged = await self._exchange(connection, request, method)
            except _TooLarge:
                await trio.aclose_forcefully(connection.stream)
                raise TransportFailure("response_too_large", sent=True) from None
            except (
                OSError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                _Malformed,
            ) as exc:
                await trio.aclose_forcefully(connection.stream)
                cause = _ssl_error(exc)
                refused = _client_certificate_reason(cause)
                if refused is not None:
                    # TLS 1.3: the server checks the client's certificate before it reads any
                    # application data, so the request was not acted on.
                    raise TransportFailure("connect_failed", sent=False, reason=refused) from None
                answered = connection.answered  # the head came, then the connection ended
                refusal = self._proxy_refusal(*answered) if answered is not None else None
                if refusal is not None:
                    raise refusal from None
                reason = connect_failure_reason(exc, "") if cause is not None else None
                raise TransportFailure("connection_dropped", sent=True, reason=reason) from None
            except BaseException:  # cancelled mid-exchange: the connection is in an unknown state
                await trio.aclose_forcefully(connection.stream)
                raise
            if exchanged is None:  # the deadline passed
                await trio.aclose_forcefully(connection.stream)
                raise TransportFailure("timeout", sent=True)
            status, fields, content, reusable = exchanged
            await self._release(connection, reusable)
            if status in (401, 407) and (refusal := self._proxy_refusal(status, fields)):
                raise refusal
            return status, fields, content
        finally:
            self._slots.release()

    def _proxy_refusal(
        self, status: int, fields: list[tuple[bytes, bytes]]
    ) -> TransportFailure | None:
        """The failure to raise when a forwarding proxy answered for itself: the request never
        reached the API (not sent, so a mutation is not in doubt)."""
        if status not in (401, 407) or not self._forwarded:
            return None
        if not _from_proxy(status, fields, self._proxy_credentials):
            return None
        assert self.proxy is not None
        return TransportFailure(
            "connect_failed",
            sent=False,
            reason=f"the proxy {self.proxy} answered {status} (proxy authentication "
            f"required); check the credentials in {self.proxy.variable}",
        )

    def _encode(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes | None
    ) -> bytes:
        """The request as sent; a field value with CR, LF or NUL (a token cannot smuggle a header
        in) or a target with a space or control character is refused before anything is sent."""
        try:
            verb, path = method.encode("ascii"), self._prefix + target.encode("ascii")
        except UnicodeEncodeError:
            raise TransportFailure("invalid_request", sent=False) from None
        if _FIELD_NAME.fullmatch(verb) is None or not path or _UNSAFE_TARGET.search(path):
            raise TransportFailure("invalid_request", sent=False)
        line = b"%s %s HTTP/1.1\r\n" % (verb, path)
        parts = [line, self._fixed]
        for name, value in headers:
            if _UNSAFE_VALUE.search(value):
                raise TransportFailure("invalid_request", sent=False)
            parts += (name, b": ", value, b"\r\n")
        if body is not None:
            parts += (b"content-length: %d\r\n\r\n" % len(body), body)
        else:
            parts.append(b"\r\n")
        return b"".join(parts)

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < self._expiry and not connection.closed_by_peer():
                return connection
            connection.close_now()
        return None

    async def probe(self) -> None:
        """Open one connection (through the proxy, tunnel and TLS handshake included) and send
        one request on it (``GET`` of the base path, no credentials: any HTTP answer from the
        API will do), so what only shows then (a TLS 1.3 client certificate alert, a proxy's
        407) fails here; raises TransportFailure with the reason."""
        connection = await self._connect(trio.current_time() + self._connect_timeout)
        await self._release(connection, True)
        await self.request("GET", "/", [], None)

    async def _connect(self, deadline: float) -> _Connection:
        host, port = self._dial
        via = f" through the proxy {self.proxy}" if self.proxy else ""
        try:
            with trio.fail_at(min(deadline, trio.current_time() + self._connect_timeout)):
                stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
                try:
                    if self._tunnel:
                        await self._open_tunnel(stream)
                    if self._ssl is not None:
                        tls = trio.SSLStream(stream, self._ssl, server_hostname=self._host)
                        await tls.do_handshake()
                        stream = tls
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
        except trio.TooSlowError:
            raise TransportFailure(
                "connect_timeout", sent=False, reason=f"connecting{via} timed out"
            ) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError, _Malformed) as exc:
            reason = connect_failure_reason(exc, f"{host}:{port}")
            raise TransportFailure("connect_failed", sent=False, reason=reason + via) from None
        except _TunnelRefused as exc:
            raise TransportFailure("connect_failed", sent=False, reason=str(exc)) from None
        return _Connection(stream)

    async def _open_tunnel(self, stream: trio.abc.Stream) -> None:
        """CONNECT host:port through the proxy; any 2xx opens the tunnel (RFC 9110 9.3.6)."""
        assert self.proxy is not None
        head = b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n" % (self._authority, self._authority)
        if self.proxy.authorization is not None:
            head += b"proxy-authorization: %s\r\n" % self.proxy.authorization
        await stream.send_all(head + b"\r\n")
        answer = _Connection(stream)
        status, _, _ = await answer._read_head()
        if not 200 <= status < 300:
            what = _PROXY_STATUS.get(status, "refused")
            raise _TunnelRefused(
                f"the proxy {self.proxy} answered {status} ({what}) to CONNECT "
                f"{self._authority.decode()}"
            )
        if answer.buffer:
            raise _Malformed("bytes after the proxy's answer to CONNECT")

    async def _exchange(
        self, connection: _Connection, request: bytes, method: str
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        connection.answered = None
        await connection.send(request)
        return await connection.read_response(method, self._max_body)

    async def _release(self, connection: _Connection, reusable: bool) -> None:
        if self._closed or not reusable:
            await trio.aclose_forcefully(connection.stream)
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
