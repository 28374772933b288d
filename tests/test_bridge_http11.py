"""The bridge's HTTP/1.1 pool against scripted loopback servers: keep-alive reuse, a stale idle
connection, every transport failure and whether the request may have been sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import h11
import pytest
import trio

from agentteam_task_bridge.bridge._http11 import Http11Pool, TransportFailure
from agentteam_task_bridge.bridge._registry import TOOLS
from agentteam_task_bridge.bridge._upstream import UpstreamClient, prepare

Handler = Callable[[trio.SocketStream, h11.Connection, h11.Request, bytes], Awaitable[bool]]


class Server:
    """A loopback HTTP/1.1 server whose `handler` answers each request (returns False to close)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[h11.Request, bytes]] = []
        self.port = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(stream, conn)
                if request is None:
                    return
                self.requests.append((request, body))
                if not await self.handler(stream, conn, request, body):
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.ProtocolError):
            return
        finally:
            await trio.aclose_forcefully(stream)


async def _read_request(
    stream: trio.SocketStream, conn: h11.Connection
) -> tuple[h11.Request | None, bytes]:
    request, body = None, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, body
        else:
            return None, b""


async def answer(
    stream: trio.SocketStream,
    conn: h11.Connection,
    body: bytes = b'{"ok":true}',
    headers: list[tuple[str, str]] | None = None,
    status: int = 200,
) -> bool:
    head = [("content-type", "application/json"), *(headers or [])]
    if not any(name == "transfer-encoding" for name, _ in head):
        head.append(("content-length", str(len(body))))
    data = conn.send(h11.Response(status_code=status, headers=head)) or b""
    data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
    return True


async def ok_handler(
    stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
) -> bool:
    return await answer(stream, conn)


@asynccontextmanager
async def serving(handler: Handler = ok_handler) -> AsyncIterator[Server]:
    server = Server(handler)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


def pool(port: int, timeout: float = 30.0, **options: int | float) -> Http11Pool:
    """A pool whose deadlines only bound a hang (a loaded machine is slow, not broken)."""
    return Http11Pool(
        f"http://127.0.0.1:{port}",
        timeout_seconds=timeout,
        connect_timeout_seconds=30.0,
        user_agent="test-agent",
        **options,  # type: ignore[arg-type]
    )


async def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async with serving() as server:
        client = pool(server.port)
        for _ in range(20):
            status, _, body = await client.request("POST", "/x", [], b"{}")
            assert (status, body) == (200, b'{"ok":true}')
        await client.aclose()
    assert server.connections == 1
    request, body = server.requests[0]
    assert request.target == b"/x" and body == b"{}"
    assert (b"host", b"127.0.0.1:%d" % server.port) in request.headers
    assert (b"content-length", b"2") in request.headers


async def until_idle_closed(client: Http11Pool) -> None:
    """Until the pool's idle connection shows the server's close (or junk) to the pool."""
    with trio.fail_after(30):  # bounds a hang only
        while client._idle and not client._idle[-1].closed_by_peer():  # noqa: ASYNC110
            await trio.sleep(0.001)


async def test_concurrent_requests_open_at_most_one_connection_each_then_reuse() -> None:
    rounds = [trio.Event() for _ in range(3)]
    arrived = 0

    async def together(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        nonlocal arrived
        this_round = rounds[arrived // 8]
        arrived += 1
        if arrived % 8 == 0:
            this_round.set()
        await this_round.wait()  # all eight in flight at once, whatever the machine's load
        return await answer(stream, conn)

    async with serving(together) as server:
        client = pool(server.port)
        for _ in range(3):
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(client.request, "GET", "/y", [], None)
        await client.aclose()
    assert server.connections == 8
    assert len(server.requests) == 24


async def test_an_idle_connection_the_server_closed_is_replaced_not_reported() -> None:
    async def once(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        await answer(stream, conn)
        return False  # close after every answer, without saying so in a header

    async with serving(once) as server:
        client = pool(server.port)
        for _ in range(3):
            await client.request("GET", "/z", [], None)
            await until_idle_closed(client)  # the close has arrived before the next request
        await client.aclose()
    assert server.connections == 3


async def test_bytes_that_arrive_after_an_answer_keep_the_connection_out_of_the_pool() -> None:
    pooled = [trio.Event() for _ in range(3)]
    junk_sent = [trio.Event() for _ in range(3)]

    async def trailing_junk(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        i = len(server.requests) - 1
        await answer(stream, conn)
        await pooled[i].wait()  # after the client has read the answer and pooled the connection
        await stream.send_all(b"\x00HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged")
        junk_sent[i].set()
        await trio.sleep_forever()  # keep the connection open: only the junk spoils it
        return False

    async with serving(trailing_junk) as server:
        client = pool(server.port)
        for i in range(3):
            status, _, body = await client.request("GET", "/j", [], None)
            assert (status, body) == (200, b'{"ok":true}')
            pooled[i].set()
            await junk_sent[i].wait()
            await until_idle_closed(client)  # the junk has arrived on the idle connection
        await client.aclose()
    assert server.connections == 3, "a spoiled idle connection is never reused"


async def test_a_connection_closed_before_the_answer_is_dropped_and_may_have_been_sent() -> None:
    async def hang_up(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        return False

    async with serving(hang_up) as server:
        client = pool(server.port)
        with pytest.raises(TransportFailure) as caught:
            await client.request("POST", "/a", [], b"{}")
    assert (caught.value.kind, caught.value.sent) == ("connection_dropped", True)


async def test_a_malformed_answer_is_a_dropped_connection() -> None:
    async def garbage(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
        return False

    async with serving(garbage) as server:
        client = pool(server.port)
        with pytest.raises(TransportFailure) as caught:
            await client.request("GET", "/a", [], None)
    assert (caught.value.kind, caught.value.sent) == ("connection_dropped", True)


async def test_a_slow_answer_times_out_within_the_deadline_and_may_have_been_sent() -> None:
    async def stall(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        await trio.sleep_forever()  # without the deadline, the request would hang
        return False

    async with serving(stall) as server:
        client = pool(server.port, timeout=0.2)
        with trio.fail_after(60), pytest.raises(TransportFailure) as caught:
            await client.request("POST", "/a", [], b"{}")
    assert (caught.value.kind, caught.value.sent) == ("timeout", True)


async def test_nothing_listening_is_a_connect_failure_never_sent() -> None:
    async with serving() as server:
        port = server.port
    client = pool(port)
    with pytest.raises(TransportFailure) as caught:
        await client.request("POST", "/a", [], b"{}")
    assert (caught.value.kind, caught.value.sent) == ("connect_failed", False)


async def test_a_full_pool_waits_then_times_out_never_sent() -> None:
    async with serving() as server:
        client = pool(server.port, timeout=0.2, max_connections=1)
        # Every exchange holds its slot no longer than its own deadline, so a request only runs out
        # of time waiting when the slots stay taken: take the only one here.
        await client._slots.acquire()
        with pytest.raises(TransportFailure) as caught:
            await client.request("GET", "/a", [], None)
        assert (caught.value.kind, caught.value.sent) == ("pool_timeout", False)
        client._slots.release()
        status, _, _ = await client.request("GET", "/a", [], None)
    assert status == 200 and server.connections == 1


async def test_a_deadline_spent_before_sending_is_never_sent() -> None:
    """The send has no scheduling point, so a deadline the slot's wait (or the connect) used up
    is checked before it: the request stays unsent, and the connection stays usable."""
    async with serving() as server:
        client = pool(server.port)
        await client.request("POST", "/first", [], b"{}")
        client._timeout = 0.0  # the deadline is spent as soon as the request starts
        with pytest.raises(TransportFailure) as caught:
            await client.request("POST", "/late", [], b"{}")
        assert (caught.value.kind, caught.value.sent) == ("pool_timeout", False)
        client._timeout = 30.0
        status, _, _ = await client.request("POST", "/again", [], b"{}")
        await client.aclose()
    assert status == 200 and server.connections == 1
    assert [request.target for request, _ in server.requests] == [b"/first", b"/again"]


async def test_an_oversized_answer_is_refused() -> None:
    async def big(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        return await answer(stream, conn, b"x" * 5000)

    async with serving(big) as server:
        client = pool(server.port, max_response_bytes=4096)
        with pytest.raises(TransportFailure) as caught:
            await client.request("GET", "/a", [], None)
        assert (caught.value.kind, caught.value.sent) == ("response_too_large", True)
    assert server.connections == 1


async def test_a_cancelled_exchange_does_not_return_its_connection_to_the_pool() -> None:
    arrived = trio.Event()

    async def held(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        if request.target == b"/a":
            arrived.set()
            await trio.sleep_forever()  # until the client gives up on it
        return await answer(stream, conn)

    async with serving(held) as server:
        client = pool(server.port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.request, "GET", "/a", [], None)
            await arrived.wait()  # the request is in the server: cancel mid-exchange
            nursery.cancel_scope.cancel()
        status, _, _ = await client.request("GET", "/b", [], None)
        await client.aclose()
    assert status == 200
    assert server.connections == 2


async def test_upstream_client_sends_the_prepared_request_and_keeps_only_listed_headers() -> None:
    async def chunked(
        stream: trio.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
    ) -> bool:
        head = [
            ("content-type", "application/json"),
            ("transfer-encoding", "chunked"),
            ("link", '<https://a>; rel="successor-version"'),
            ("link", '<https://b>; rel="help"'),
            ("set-cookie", "secret=1"),
        ]
        data = conn.send(h11.Response(status_code=200, headers=head)) or b""
        for part in (b'{"items":', b"[]}"):
            data += conn.send(h11.Data(data=part)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
        return True

    async with serving(chunked) as server:
        client = UpstreamClient(f"http://127.0.0.1:{server.port}/prefix/")
        prepared = prepare(TOOLS["task_list"], "/api/tasks", {"channel": "a b&c", "limit": 5}, {})
        reply = await client.exchange(prepared, "tok-123")
        await client.aclose()
    assert reply.status == 200 and reply.body == b'{"items":[]}'
    assert reply.headers == {
        "content-type": "application/json",
        "link": '<https://a>; rel="successor-version", <https://b>; rel="help"',
    }
    request, body = server.requests[0]
    assert request.method == b"GET" and body == b""
    assert request.target == b"/prefix/api/tasks?channel=a%20b%26c&limit=5"
    headers = dict(request.headers)
    assert headers[b"authorization"] == b"Bearer tok-123"
    assert headers[b"accept"] == b"application/json"
    assert b"content-type" not in headers


async def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with serving() as server:
        client = pool(server.port)
        for headers, target in (
            ([(b"authorization", b"Bearer t\r\nx-admin: 1")], "/a"),
            ([(b"authorization", b"Bearer t\n")], "/a"),
            ([], "/a b"),
            ([], "/a\r\nx: 1"),
        ):
            with pytest.raises(TransportFailure) as caught:
                await client.request("GET", target, headers, None)
            assert (caught.value.kind, caught.value.sent) == ("invalid_request", False)
        status, _, _ = await client.request("GET", "/ok", [(b"authorization", b"Bearer t")], None)
        await client.aclose()
    assert status == 200
    assert [request.target for request, _ in server.requests] == [b"/ok"]
