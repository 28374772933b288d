"""Every leaf gets its own salt, whichever threads build rows at once (the writer's and an
erasure's under retention): a salt handed to two events would show when their payloads are
equal (equal digests), which the salt exists to hide."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from agentteam_task_bridge.journal import _tlog


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switched every microsecond: a race between two steps shows in a short run."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def test_no_salt_is_handed_out_twice_across_threads(switch_often: None) -> None:
    taken: list[list[bytes]] = [[] for _ in range(8)]

    def take(into: list[bytes]) -> None:
        for _ in range(40_000):
            into.append(_tlog._salt())

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    salts = [salt for into in taken for salt in into]
    assert len(salts) == 320_000
    assert len(set(salts)) == len(salts)
    assert {len(salt) for salt in salts} == {_tlog.LEAF_SALT_BYTES}
