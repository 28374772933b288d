"""A small HTTP/1.1 server over trio and h11: keep-alive, bounded bodies, droppable connections."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import h11
import trio

MAX_BODY_BYTES = 1 << 20
_READ_SIZE = 64 * 1024
_IDLE_TIMEOUT_SECONDS = 300.0

log = logging.getLogger("agentteam.runtime.http")


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


class DropConnection(Exception):
    """Raised by a handler to close the connection without writing a response."""


class BodyTooLarge(Exception):
    pass


Handler = Callable[[Request], Awaitable[Response]]


async def serve_connection(
    stream: trio.SocketStream, handler: Handler, too_large: Callable[[], Response]
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    try:
        while True:
            try:
                request = await _read_request(stream, conn)
            except BodyTooLarge:
                await _send(stream, conn, too_large(), close=True)
                return
            if request is None:
                return
            try:
                response = await handler(request)
            except DropConnection:
                return
            await _send(stream, conn, response, close=False)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError) as exc:
        log.debug("connection ended: %s", exc)
    finally:
        await stream.aclose()


async def _read_request(stream: trio.SocketStream, conn: h11.Connection) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_after(_IDLE_TIMEOUT_SECONDS):
                data = await stream.receive_some(_READ_SIZE)
                conn.receive_data(data)
                continue
            return None
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        if isinstance(event, h11.Request):
            head = event
            length = dict(event.headers).get(b"content-length")
            if length is not None and int(length) > MAX_BODY_BYTES:
                raise BodyTooLarge
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise BodyTooLarge
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
            return Request(
                head.method.decode(), head.target.decode("latin-1"), headers, bytes(body)
            )


async def _send(
    stream: trio.SocketStream, conn: h11.Connection, response: Response, *, close: bool
) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    data = conn.send(h11.Response(status_code=response.status, headers=headers))
    data = (data or b"") + (conn.send(h11.Data(data=response.body)) or b"")
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
