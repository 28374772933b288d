"""A cut list under changes between its pages, for every sort, against the reference runtime.

Every task that stays in the view with its sort key unchanged is given exactly once while
others are inserted, deleted, closed, retitled, reprioritised and ranked anew between pages, at
random limits, with pages cut by the byte budget; every cursor handed out fits the inputs'
2048 characters. The search tasks all have two words, one `deploy`, so their relevance ranks tie
and the order between them is their number's; a task retitled `deploy deploy` ranks anew,
alone. A search gets no inserts between pages: the runtime's own cursor is the bm25 value of its
page's last task, and an insert moves every value (the runtime's pages then skip or repeat, under
any client); the bridge's guarantee is on top of the upstream's. One case runs through
`agentteam-bridge serve` as a subprocess (the wire), the others in-process.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .bridge_harness import BridgeSession

WIDE = "\U0001f600"  # four UTF-8 bytes
LABELS = [f"{i:02d}" + WIDE * 48 for i in range(20)]  # labels at their maxima: pages get cut
PRIORITIES = ["low", "normal", "high", "urgent"]
CHANNEL = "eng"


async def _create(bridge: BridgeSession, rng: random.Random, i: int) -> int:
    task = {
        "title": f"deploy w{i:04d}",
        "labels": LABELS[: rng.randint(12, 20)],
        "priority": rng.choice(PRIORITIES),
    }
    created = await bridge.ok("task_create", {"channel": CHANNEL, "tasks": [task]})
    number: int = created["data"]["tasks"][0]["number"]
    return number


async def _walk(
    bridge: BridgeSession,
    arguments: dict[str, Any],
    rng: random.Random,
    between: Callable[[], Awaitable[None]],
) -> tuple[list[int], int]:
    """Every number the pages give, calling `between` after each page; and how many pages the
    byte budget cut."""
    given: list[int] = []
    cursor: str | None = None
    cut = 0
    for _ in range(300):  # bounded: pages that never end are a failure
        args = {**arguments, "limit": rng.choice([1, 2, 5, rng.randint(6, 100), 100])}
        if cursor is not None:
            args["cursor"] = cursor
        page = await bridge.ok("task_list", args)
        given += [item["number"] for item in page["data"]["items"]]
        cut += "$.data.items" in page["meta"].get("truncated_fields", [])
        cursor = page["meta"].get("next_cursor")
        if cursor is None:
            return given, cut
        assert len(cursor) <= 2048
        await between()
    raise AssertionError("the pages never ended")


async def _steady_tasks_come_once(bridge: BridgeSession, sort: str, seed: int) -> None:
    rng = random.Random(seed)
    alive = {await _create(bridge, rng, i) for i in range(36)}
    steady = set(alive)  # in the view throughout, sort key unchanged
    made = [100]

    async def update(number: int, patch: dict[str, Any], rekeys: bool) -> None:
        await bridge.ok("task_update", {"channel": CHANNEL, "number": number, "patch": patch})
        if rekeys or sort == "updated":  # any update moves a task to the front of `updated`
            steady.discard(number)

    async def between() -> None:
        for _ in range(rng.randint(1, 3)):
            move = rng.choice(["insert", "delete", "close", "retitle", "priority", "rank"])
            number = rng.choice(sorted(alive)) if alive else None
            if sort == "relevance" and move == "insert":
                move = "close"  # see the module's docstring
            if move == "insert" or number is None:
                made[0] += 1
                alive.add(await _create(bridge, rng, made[0]))
            elif move == "delete":
                await bridge.ok("task_delete", {"channel": CHANNEL, "number": number})
                alive.discard(number)
                steady.discard(number)
            elif move == "close":  # leaves the open view
                await update(number, {"status": "done"}, rekeys=True)
                alive.discard(number)
            elif move == "retitle":  # same words count, one `deploy`: the same rank
                await update(number, {"title": f"deploy v{rng.randint(0, 9999):04d}"}, False)
            elif move == "priority":
                await update(number, {"priority": rng.choice(PRIORITIES)}, sort == "priority")
            else:  # two `deploy`s, as many words: ranked anew under relevance, alone
                await update(number, {"title": "deploy deploy"}, sort == "relevance")

    arguments: dict[str, Any] = {"channel": CHANNEL}
    if sort == "relevance":
        arguments["query"] = "deploy"
    else:
        arguments["sort"] = sort
    given, cut = await _walk(bridge, arguments, rng, between)
    counts = Counter(given)
    assert sorted(n for n in steady if counts[n] != 1) == [], (given, sorted(steady))
    if sort == "number":  # a number never changes: nothing twice at all
        assert [n for n, c in counts.items() if c > 1] == []
    assert cut > 0  # the byte budget, not only `limit`, ended pages


@pytest.mark.parametrize(
    ("sort", "seed"),
    [("number", 1), ("updated", 2), ("priority", 3), ("priority", 4), ("relevance", 5)],
)
async def test_steady_tasks_come_once_whatever_changes_between_pages(
    bridge: BridgeSession, sort: str, seed: int
) -> None:
    await _steady_tasks_come_once(bridge, sort, seed)


@pytest.mark.wire
async def test_a_search_cut_into_pages_gives_steady_tasks_once_over_the_wire(
    bridge: BridgeSession,
) -> None:
    await _steady_tasks_come_once(bridge, "relevance", 6)
