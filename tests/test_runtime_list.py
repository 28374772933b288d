"""task_list: browse vs search, status views, subtasks, limits, opaque cursors, stable order."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api


async def _numbers(api: Api, **params: Any) -> list[int]:
    result = await api.ok("list", channel="general", **params)
    return [t["number"] for t in result["items"]]


async def test_browse_lists_open_top_level_tasks_in_number_order(api: Api) -> None:
    await api.create("general", "one", "two", "three")
    await api.ok("update", {"channel": "general", "number": 2, "patch": {"status": "done"}})
    await api.create("general", "child", parent=1)
    assert await _numbers(api) == [1, 3]
    assert await _numbers(api, includeSubtasks="true") == [1, 3, 4]
    assert await _numbers(api, status="done") == [2]


async def test_status_all_needs_a_query(api: Api) -> None:
    error = await api.fails(
        "list", expect=422, code="validation_failed", channel="general", status="all"
    )
    assert "$.status" in error["fieldErrors"]


async def test_search_ranks_by_relevance_over_title_and_description(api: Api) -> None:
    await api.create("general", "unrelated chore")
    await api.ok(
        "create",
        {
            "channel": "general",
            "tasks": [
                {"title": "Fix login", "description": "the login page rejects valid passwords"}
            ],
        },
    )
    await api.create("general", "login banner colour")
    result = await api.ok("list", channel="general", query="login passwords")
    titles = [t["title"] for t in result["items"]]
    assert titles == ["Fix login", "login banner colour"]


async def test_search_with_status_all_finds_done_tasks(api: Api) -> None:
    await api.create("general", "ship the release")
    await api.ok("update", {"channel": "general", "number": 1, "patch": {"status": "done"}})
    assert await _numbers(api, query="release") == []
    assert await _numbers(api, query="release", status="all") == [1]


async def test_search_query_is_never_fts_syntax(api: Api) -> None:
    await api.create("general", 'odd "quotes" AND NEAR(x)')
    assert await _numbers(api, query='"quotes" AND NEAR(') == [1]
    assert await _numbers(api, query="*^-") == []


async def test_limit_defaults_to_20_and_is_bounded(api: Api) -> None:
    await api.create("general", *[f"task {i}" for i in range(25)])
    assert len(await _numbers(api)) == 20
    assert len(await _numbers(api, limit=100)) == 25
    for bad in (0, 101, "x"):
        await api.fails("list", expect=422, code="validation_failed", channel="general", limit=bad)


@pytest.mark.parametrize("sort", ["number", "updated", "priority"])
async def test_cursor_pages_cover_everything_once(api: Api, sort: str) -> None:
    await api.create("general", *[f"task {i}" for i in range(23)])
    for n in (3, 7, 11):
        await api.ok("update", {"channel": "general", "number": n, "patch": {"priority": "high"}})
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"channel": "general", "limit": 5, "sort": sort}
        if cursor:
            params["cursor"] = cursor
        page = await api.ok("list", **params)
        seen += [t["number"] for t in page["items"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert sorted(seen) == list(range(1, 24))
    assert len(seen) == len(set(seen))


async def test_search_cursor_pages(api: Api) -> None:
    await api.create("general", *[f"deploy step {i}" for i in range(7)])
    first = await api.ok("list", channel="general", query="deploy", limit=4)
    second = await api.ok(
        "list", channel="general", query="deploy", limit=4, cursor=first["nextCursor"]
    )
    numbers = [t["number"] for t in first["items"] + second["items"]]
    assert sorted(numbers) == list(range(1, 8))
    assert "nextCursor" not in second


async def test_a_changed_filter_invalidates_the_cursor(api: Api) -> None:
    await api.create("general", *[f"task {i}" for i in range(5)])
    page = await api.ok("list", channel="general", limit=2)
    error = await api.fails(
        "list",
        expect=422,
        code="cursor_mismatch",
        channel="general",
        limit=2,
        status="todo",
        cursor=page["nextCursor"],
    )
    assert "$.cursor" in error["fieldErrors"]
    cursor: str = page["nextCursor"]
    forged = cursor[:-1] + ("1" if cursor[-1] == "0" else "0")  # never the MAC it had
    await api.fails("list", expect=400, code="cursor_invalid", channel="general", cursor=forged)


async def test_no_next_cursor_means_everything_was_returned(api: Api) -> None:
    await api.create("general", "a", "b")
    page = await api.ok("list", channel="general", limit=2)
    assert "nextCursor" not in page and len(page["items"]) == 2


async def test_filters_by_assignee_label_and_priority(api: Api) -> None:
    await api.ok(
        "create",
        {
            "channel": "general",
            "tasks": [
                {"title": "rich", "labels": ["ops"], "priority": "urgent", "assignee": "@alice"}
            ],
        },
    )
    await api.create("general", "plain")
    assert await _numbers(api, filters='{"label":"ops"}') == [1]
    assert await _numbers(api, filters='{"priority":"urgent"}') == [1]
    assert await _numbers(api, filters='{"assignee":"@alice"}') == [1]
    await api.fails(
        "list", expect=422, code="validation_failed", channel="general", filters='{"colour":"red"}'
    )


async def test_unknown_parameters_and_views_are_refused(api: Api) -> None:
    error = await api.fails(
        "list", expect=422, code="validation_failed", channel="general", page=2, status="active"
    )
    assert set(error["fieldErrors"]) == {"$.page", "$.status"}


async def test_unknown_board_answers_with_candidates(api: Api) -> None:
    error = await api.fails("list", expect=404, code="channel_not_found", channel="engg")
    assert error["candidates"][0]["channel"] == "eng"
