"""List paging against a scripted upstream that misbehaves, and cursors sent back wrongly.

An upstream `nextCursor` that loops back to a page of the same walk is `upstream_malformed`,
not pages that never end; an item an upstream repeats on its next page, a page shorter than
asked, a cursor sent twice give every task once; a cursor from another workspace or argument
set is `cursor_mismatch`, a cursor the bridge could not have handed out `cursor_invalid` (the
upstream never sees it). In-process over the production call path (bridge/_cursor.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentteam_task_bridge.bridge._cursor import MAX_UPSTREAM_CURSOR, Cursors
from agentteam_task_bridge.bridge.testing import upstream_task

from .bridge_inprocess import error_of, inprocess_bridge, verified

Pages = dict[str, tuple[list[int], str | None]]  # upstream cursor ("": none) -> numbers, next


class Upstream:
    """Answers `list` from `pages`, whatever `limit` asks."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.asked: list[tuple[str, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor", "")
        self.asked.append((cursor, int(request.url.params["limit"])))
        numbers, onward = self.pages[cursor]
        body: dict[str, Any] = {
            "channel": "general",
            "items": [upstream_task(number=n, priority="normal") for n in numbers],
        }
        if onward is not None:
            body["nextCursor"] = onward
        return httpx.Response(200, content=msgspec.json.encode(body))


@asynccontextmanager
async def _bridge(tmp_path: Path, upstream: Upstream, workspace: str = "ws_1") -> Any:
    path = tmp_path / f"{workspace}.db"
    async with inprocess_bridge(path, httpx.MockTransport(upstream), workspace_id=workspace) as (
        bridge,
        _,
    ):
        yield bridge
    verified(path)


async def _list(bridge: Any, arguments: dict[str, Any], rid: int) -> dict[str, Any]:
    result = await bridge.call("task_list", arguments, {}, rid)
    answer: dict[str, Any] = result.structured_content
    return answer


async def _walk(bridge: Any, arguments: dict[str, Any]) -> Iterator[Any]:
    """The numbers of each page, then the error that ended the walk (None: the last page)."""
    pages: list[Any] = []
    cursor: str | None = None
    for rid in range(1, 30):  # bounded: pages that never end are a failure
        answer = await _list(bridge, {**arguments, **({"cursor": cursor} if cursor else {})}, rid)
        if "error" in answer:
            return iter([*pages, answer["error"]["code"]])
        pages.append([item["number"] for item in answer["data"]["items"]])
        cursor = answer["meta"].get("next_cursor")
        if cursor is None:
            return iter([*pages, None])
        assert len(cursor) <= 2048
    raise AssertionError(f"the pages never ended: {pages}")


SEARCH = {"channel": "general", "query": "q"}
BROWSE = {"channel": "general"}


@pytest.mark.parametrize("arguments", [BROWSE, SEARCH, {**BROWSE, "sort": "priority"}])
@pytest.mark.parametrize(
    "pages",
    [
        {"": ([1, 2], "A"), "A": ([3, 4], "A")},  # to itself
        {"": ([1, 2], "A"), "A": ([3, 4], "B"), "B": ([5], "A")},  # to a page before
        {"": ([1], "A"), "A": ([2], "B"), "B": ([3], "C"), "C": ([4], "D"), "D": ([5], "B")},
    ],
)
async def test_an_upstream_cursor_that_loops_back_is_malformed_not_endless(
    tmp_path: Path, pages: Pages, arguments: dict[str, Any]
) -> None:
    async with _bridge(tmp_path, Upstream(pages)) as bridge:
        walk = list(await _walk(bridge, arguments))
    given = [n for page in walk[:-1] for n in page]
    assert walk[-1] == "upstream_malformed", walk
    assert len(given) == len(set(given))  # nothing twice before the loop is seen


@pytest.mark.parametrize("arguments", [BROWSE, SEARCH, {**BROWSE, "sort": "priority"}])
@pytest.mark.parametrize(
    "pages",
    [
        {"": ([1, 2, 3], "A"), "A": ([3, 4, 5], "B"), "B": ([5, 6], None)},
        {"": ([1], "A"), "A": ([1, 2], "B"), "B": ([2, 3], None)},  # 1-2 items of 20 asked
    ],
)
async def test_items_an_upstream_repeats_on_its_next_page_are_given_once(
    tmp_path: Path, arguments: dict[str, Any], pages: Pages
) -> None:
    async with _bridge(tmp_path, Upstream(pages)) as bridge:
        walk = list(await _walk(bridge, {**arguments, "limit": 20}))
    given = [n for page in walk[:-1] for n in page]
    assert walk[-1] is None and given == sorted(set(given)), walk
    assert set(given) == {n for numbers, _ in pages.values() for n in numbers}


async def test_a_cursor_sent_twice_gives_the_same_page(tmp_path: Path) -> None:
    pages: Pages = {"": ([1, 2, 3, 4, 5], None)}
    async with _bridge(tmp_path, Upstream(pages)) as bridge:
        first = await _list(bridge, {**BROWSE, "limit": 2}, 1)
        cursor = first["meta"]["next_cursor"]
        again = [await _list(bridge, {**BROWSE, "limit": 2, "cursor": cursor}, i) for i in (2, 3)]
    assert [[i["number"] for i in a["data"]["items"]] for a in again] == [[3, 4], [3, 4]]


async def test_a_cursor_of_another_workspace_or_argument_set_is_a_mismatch(
    tmp_path: Path,
) -> None:
    pages: Pages = {"": ([1, 2, 3], None)}
    shared = Cursors.ephemeral()  # one installation's key, two workspaces
    async with _bridge(tmp_path, Upstream(pages)) as here:
        here.cursors = shared
        cursor = (await _list(here, {**BROWSE, "limit": 1}, 1))["meta"]["next_cursor"]
        other_arguments = await _list(here, {**BROWSE, "status": "done", "cursor": cursor}, 2)
    async with _bridge(tmp_path, Upstream(pages), workspace="ws_2") as there:
        there.cursors = shared
        other_workspace = await _list(there, {**BROWSE, "cursor": cursor}, 1)
    assert error_of_answer(other_arguments) == "cursor_mismatch"
    assert error_of_answer(other_workspace) == "cursor_mismatch"


def error_of_answer(answer: dict[str, Any]) -> str:
    code: str = answer["error"]["code"]
    return code


@pytest.mark.parametrize(
    "cursor",
    ["c" * (MAX_UPSTREAM_CURSOR + 1), "a b", "tab\there", "é", 'a"b', "back\\slash"],
)
async def test_a_cursor_the_bridge_could_not_have_handed_out_is_invalid(
    tmp_path: Path, cursor: str
) -> None:
    upstream = Upstream({"": ([1], None)})
    async with _bridge(tmp_path, upstream) as bridge:
        result = await bridge.call("task_list", {**BROWSE, "cursor": cursor}, {}, 1)
    assert error_of(result)["code"] == "cursor_invalid"
    assert upstream.asked == []  # refused before any upstream call


async def test_a_relevance_page_longer_than_its_cursor_can_follow_is_malformed(
    tmp_path: Path,
) -> None:
    # The longest upstream cursor leaves room for 38 numbers: an upstream that answers 100
    # items where at most 38 were asked could not be continued within 2048 characters.
    long = "c" * MAX_UPSTREAM_CURSOR
    upstream = Upstream({long: (list(range(1, 101)), None)})
    async with _bridge(tmp_path, upstream) as bridge:
        result = await bridge.call("task_list", {**SEARCH, "limit": 100, "cursor": long}, {}, 1)
    assert error_of(result)["code"] == "upstream_malformed"
    assert upstream.asked == [(long, 38)]


@pytest.mark.parametrize("priority", [["high"], {"rank": 4}, 3, True, 2.5])
@pytest.mark.parametrize("continued", [False, True])
async def test_a_priority_that_is_not_one_is_malformed_on_any_page(
    tmp_path: Path, priority: Any, continued: bool
) -> None:
    """Under `sort: priority` an item whose priority is no priority (a list, an object, a
    number) is `upstream_malformed`, whether the bridge cuts the page (its cursor's key) or
    continues one (the items after the key), never an internal error."""
    hostile = [upstream_task(number=n, priority=priority) for n in (2, 3, 4)]

    def answer(request: httpx.Request) -> httpx.Response:
        first = request.url.params.get("cursor") is None
        items = [upstream_task(number=1, priority="high")] if continued and first else hostile
        body = {"channel": "general", "items": items, "nextCursor": "A"}
        return httpx.Response(200, content=msgspec.json.encode(body))

    arguments = {**BROWSE, "sort": "priority", "limit": 1}
    async with _bridge(tmp_path, answer) as bridge:  # type: ignore[arg-type]
        if continued:
            first = await _list(bridge, arguments, 1)
            arguments["cursor"] = first["meta"]["next_cursor"]
        answered = await _list(bridge, arguments, 2)
    assert error_of_answer(answered) == "upstream_malformed", answered
