"""A trio loop in a background thread, for synchronous callers such as hypothesis properties.

Hypothesis drives a *synchronous* property many times and shrinks what fails; the bridge and the
reference runtime live in trio. ``background(setup)`` runs ``setup()`` (an async context
manager) in a trio loop on a thread and hands back its value and a ``Portal`` whose ``run``
calls an async function in that loop and returns its result.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar

import trio

T = TypeVar("T")
R = TypeVar("R")


class Portal:
    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token

    def run(self, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        return trio.from_thread.run(fn, *args, trio_token=self._token)


@contextmanager
def background(
    setup: Callable[[], AbstractAsyncContextManager[T]], *, start_timeout: float = 60.0
) -> Iterator[tuple[T, Portal]]:
    """Enter `setup()` in a trio loop on a thread; exit it (in that loop) when the block ends."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        stop = trio.Event()
        async with setup() as value:
            box.update(value=value, token=trio.lowlevel.current_trio_token(), stop=stop)
            ready.set()
            await stop.wait()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name="reliability-trio", daemon=True)
    thread.start()
    if not ready.wait(start_timeout):
        raise TimeoutError("the background trio loop did not start")
    if "error" in box:
        raise box["error"]
    portal = Portal(box["token"])
    try:
        yield box["value"], portal
    finally:
        try:
            trio.from_thread.run_sync(box["stop"].set, trio_token=box["token"])
        except trio.RunFinishedError:
            pass
        thread.join(60)
        if "error" in box:
            raise box["error"]
