"""Why concurrent httpx requests under trio are slower than one at a time: the client's pool.

Requests from this process to the reference runtime in its own process, 1/8/16/32 in flight, by
three clients over trio: raw h11 on one trio socket per worker (the floor: no pool), httpx
(httpcore 1.x, what the bridge uses) and httpx2 (httpcore2, the pool rewritten; the `mcp` SDK
already depends on it). Two routes: ``/healthz`` (no SQLite: the server's HTTP cost only) and the
task ``/get`` route (one SQLite read on the runtime's event loop). For each run: the client
process's CPU and the runtime's, and for the pooled clients how many times a request was handed
to a connection (``handle_async_request`` on a connection) and how many pool passes ran
(``_assign_requests_to_connections``) per request. A client at 100% CPU with the runtime mostly
idle is client-bound; more than one connection attempt per request is the pool's reassignment
churn.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import h11
import httpcore
import httpcore2
import httpx
import httpx2
import trio

from . import procs
from ._report import Row, ms

SECTION = "direct HTTP under trio: who limits concurrency"
LEVELS = (1, 8, 16, 32)


@contextmanager
def counting(owner: type[Any], name: str) -> Iterator[list[int]]:
    """Count calls of owner.name (a method) while the block runs."""
    original = getattr(owner, name)
    counter = [0]

    if _is_async(original):

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return await original(*args, **kwargs)

        setattr(owner, name, async_wrapper)
    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)
    try:
        yield counter
    finally:
        setattr(owner, name, original)


def _is_async(function: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(function)


Request = Callable[[], Awaitable[None]]


class _RawH11:
    """One keep-alive connection per worker, spoken with h11 directly (no pool at all)."""

    def __init__(
        self, host: str, port: int, method: str, target: str, headers: list[Any], body: bytes
    ):
        self._address = (host, port)
        self._head = h11.Request(method=method, target=target, headers=headers)
        self._body = body
        self._streams: dict[int, tuple[trio.SocketStream, h11.Connection]] = {}

    async def request(self, worker: int) -> None:
        if worker not in self._streams:
            stream = await trio.open_tcp_stream(*self._address)
            self._streams[worker] = (stream, h11.Connection(h11.CLIENT))
        stream, conn = self._streams[worker]
        data = conn.send(self._head) or b""
        if self._body:
            data += conn.send(h11.Data(data=self._body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
        status = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                break
        if status != 200:
            raise RuntimeError(f"raw h11: status {status}")
        conn.start_next_cycle()

    async def aclose(self) -> None:
        for stream, _ in self._streams.values():
            await stream.aclose()


def _pooled_sender(
    client: Any, name: str, method: str, target: str, content: bytes, headers: dict[str, str]
) -> Callable[[int], Awaitable[None]]:
    async def send(_: int) -> None:
        response = await client.request(method, target, content=content, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: status {response.status_code}")

    return send


async def _measure(
    runtime: procs.RuntimeProcess,
    label: str,
    level: int,
    total: int,
    send: Callable[[int], Awaitable[None]],
    counters: tuple[list[int], list[int]] | None,
) -> Row:
    counter = iter(range(total))
    latencies: list[float] = []

    async def worker(w: int) -> None:
        for _ in counter:
            start = time.perf_counter()
            await send(w)
            latencies.append(time.perf_counter() - start)

    if counters:
        counters[0][0] = counters[1][0] = 0
    own, server = procs.own_cpu_seconds(), procs.cpu_seconds(runtime.process.pid)
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for w in range(level):
            nursery.start_soon(worker, w)
    elapsed = time.perf_counter() - start
    own_pct = 100 * (procs.own_cpu_seconds() - own) / elapsed
    server_pct = 100 * (procs.cpu_seconds(runtime.process.pid) - server) / elapsed
    compare = f"client CPU {own_pct:3.0f}%, runtime CPU {server_pct:3.0f}%"
    if counters:
        compare += (
            f", {counters[0][0] / total:.1f} connection attempts"
            f" and {counters[1][0] / total:.1f} pool passes per request"
        )
    return Row(
        SECTION,
        f"{label}, {level} in flight",
        ms(latencies, 0.5),
        ms(latencies, 0.99),
        total / elapsed,
        compare=compare,
    )


async def run(runtime: procs.RuntimeProcess, *, quick: bool) -> list[Row]:
    total = 600 if quick else 3000
    host, port = runtime.url.removeprefix("http://").split(":")
    auth = f"Bearer {runtime.token}"
    body = b'{"channel":"general","number":1}'
    seed_headers = {"authorization": auth, "content-type": "application/json"}
    rows: list[Row] = []
    async with httpx.AsyncClient(base_url=runtime.url) as seeding:
        await seeding.post(
            runtime.task_route,
            content=b'{"channel":"general","tasks":[{"title":"http bench"}]}',
            headers=seed_headers,
        )
    routes = {
        "/healthz": ("GET", "/healthz", b""),
        "task /get": ("POST", runtime.task_route + "/get", body),
    }
    for route_label, (method, target, content) in routes.items():
        headers = [("host", f"{host}:{port}"), ("authorization", auth)]
        if content:
            headers += [("content-type", "application/json"), ("content-length", str(len(content)))]
        for level in LEVELS:
            raw = _RawH11(host, int(port), method, target, headers, content)
            await _measure(runtime, "warm", level, 50, raw.request, None)
            rows.append(
                await _measure(runtime, f"{route_label}: raw h11", level, total, raw.request, None)
            )
            await raw.aclose()
        for name, module, core in (("httpx", httpx, httpcore), ("httpx2", httpx2, httpcore2)):
            limits = module.Limits(max_connections=64, max_keepalive_connections=64)
            async with module.AsyncClient(base_url=runtime.url, limits=limits) as client:
                request_headers = {"authorization": auth, "content-type": "application/json"}

                send = _pooled_sender(client, name, method, target, content, request_headers)

                for level in LEVELS:
                    await _measure(runtime, "warm", level, 50, send, None)
                    with (
                        counting(core.AsyncHTTPConnection, "handle_async_request") as attempts,
                        counting(core.AsyncConnectionPool, "_assign_requests_to_connections") as p,
                    ):
                        rows.append(
                            await _measure(
                                runtime, f"{route_label}: {name}", level, total, send, (attempts, p)
                            )
                        )
    return rows
