"""A refused request is journaled with a size-capped prefix and the sha256 of the whole, never
the whole; a request the bridge accepts is journaled in full, however large."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import _call
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import open_bridge
from .bridge_inprocess import error_of, inprocess_bridge, verified

EMOJI = "\U0001f600"  # 4 UTF-8 bytes
CJK = "\u6f22"  # 3 UTF-8 bytes


def _received(path: Path) -> list[dict[str, Any]]:
    with journal.open_reader(path) as reader:
        return [
            r.payload.arguments
            for r in reader.events(kind="call_received")
            if isinstance(r.payload, journal.CallReceived)
        ]


async def test_a_huge_refused_request_is_journaled_as_prefix_and_digest(tmp_path: Path) -> None:
    arguments = {"channel": "general", "tasks": [{"title": (EMOJI + CJK) * 300_000}]}
    whole = msgspec.json.encode(arguments)
    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(lambda r: httpx.Response(500))) as (
        bridge,
        _,
    ):
        result = await bridge.call("task_create", arguments, {}, 1)
    assert error_of(result)["code"] == "invalid_arguments"
    [capped] = _received(path)
    assert capped["capped"]["bytes"] == len(whole)
    assert capped["capped"]["sha256"] == hashlib.sha256(whole).hexdigest()
    prefix = capped["capped"]["prefix"]
    assert whole.startswith(prefix.encode())  # cut on a character boundary
    assert len(prefix.encode()) <= 4096
    assert path.stat().st_size < 1 << 20
    verified(path)


async def test_a_large_valid_request_is_journaled_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The largest valid request is about 210 KiB (one rich task at every maximum, in 4-byte
    # characters), under the cap; lower the cap to see the bridge tell valid from refused.
    monkeypatch.setattr(_call, "_MAX_JOURNALED_ARGUMENTS", 64 * 1024)
    task = {
        "title": EMOJI * 200,
        "description": EMOJI * 10_000,
        "checklist": [{"text": CJK * 500, "done": False} for _ in range(50)],
    }
    arguments = {"channel": "general", "tasks": [task]}
    assert len(msgspec.json.encode(arguments)) > 64 * 1024
    sent: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    path = tmp_path / "j.db"
    async with inprocess_bridge(path, httpx.MockTransport(refuse)) as (bridge, _):
        result = await bridge.call("task_create", arguments, {}, 1)
    assert error_of(result)["code"] != "invalid_arguments"
    assert len(sent) == 1  # it was valid: it was sent
    assert _received(path) == [arguments]
    verified(path)


@pytest.mark.slow  # 45 MB through stdio and the validator: bounded, a few seconds
async def test_three_15_mb_frames_do_not_make_a_big_journal(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"
    async with open_bridge(file_runtime.bridge_env(), path, runtime=file_runtime) as bridge:
        for i in range(3):
            arguments = {"channel": "general", "tasks": [{"title": str(i) + "x" * (15 << 20)}]}
            await bridge.fails("task_create", arguments, code="invalid_arguments")
        await bridge.ok("task_list", {"channel": "general"})
    size = sum(p.stat().st_size for p in tmp_path.glob("j.db*"))
    assert size < 2 << 20, size
    received = _received(path)
    assert [r["capped"]["bytes"] > 15 << 20 for r in received[:3]] == [True] * 3
    assert len({r["capped"]["sha256"] for r in received[:3]}) == 3
