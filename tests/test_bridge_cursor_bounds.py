"""List paging under every cursor size and data change (contract 6.3, bridge/_cursor.py).

A property test walks a list through the production page path (`page_request`, `page_answer`,
and `Cursors.issue` as the budget cut calls it) against a simulated keyset upstream: upstream
cursors of 1-1024 characters, task numbers up to 2**53, upstream pages shorter than asked, any
`limit` per page, pages cut by the byte budget after any item, and deletes, inserts and key
changes (rank, priority, `updated_at`) between pages. Every cursor handed out must be at most
2048 characters and accepted by the `task_list` input validation; every task that stays in the
view with its key unchanged is given exactly once. Two fixed walks pin what failed before: a
search page given one item at a time at the widest cursor and numbers, and search results that
inserts push onto the next upstream page. Unit level by design: the runtime's own cursors are
short and its numbers small, so only a simulated upstream reaches the widths.
"""

from __future__ import annotations

import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.bridge._cursor import (
    MAX_UPSTREAM_CURSOR,
    Cursors,
    page_answer,
    page_request,
)
from agentteam_task_bridge.bridge._inputs import TaskListInput
from agentteam_task_bridge.bridge._validate import validate

MAX_NUMBER = 2**53
PRIORITIES = ["low", "normal", "high", "urgent"]
RANKS = {p: i + 1 for i, p in enumerate(PRIORITIES)}
# The characters an upstream cursor may hold (bridge/_cursor.py): printable ASCII but space,
# `"` and `\`.
CURSOR_CHARS = "".join(c for c in string.printable[:94] if c not in '"\\')
SORTS = ["number", "updated", "priority", "relevance"]


@dataclass
class Task:
    number: int
    priority: str
    stamp: int  # updated_at, as a counter
    score: float  # the hidden relevance rank: lower first

    def item(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "priority": self.priority,
            "updatedAt": f"{self.stamp:064d}",  # the widest updated_at an item may hold
        }


@dataclass
class Upstream:
    """A keyset upstream: a cursor names the place of the last item of its page."""

    sort: str
    tasks: dict[int, Task]
    cursor_lengths: Any  # draws the length of each cursor it issues
    shortfall: Any  # draws how many items fewer than asked a page holds
    places: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def place(self, task: Task) -> tuple[Any, ...]:
        if self.sort == "updated":
            return (-task.stamp, -task.number)
        if self.sort == "priority":
            return (-RANKS[task.priority], task.number)
        if self.sort == "relevance":
            return (task.score, task.number)
        return (task.number,)

    def list(self, args: dict[str, Any]) -> dict[str, Any]:
        after = self.places[args["cursor"]] if "cursor" in args else None
        ordered = sorted(self.tasks.values(), key=self.place)
        rest = [t for t in ordered if after is None or self.place(t) > after]
        limit = args["limit"]
        size = max(1, limit - self.shortfall()) if rest else 0
        page = rest[:size]
        body: dict[str, Any] = {"channel": "c", "items": [t.item() for t in page]}
        if len(rest) > size:
            length = self.cursor_lengths()
            tag = f"{len(self.places)}~"
            cursor = tag + "".join(CURSOR_CHARS[i % len(CURSOR_CHARS)] for i in range(length))
            cursor = cursor[: max(length, len(tag))]
            self.places[cursor] = self.place(page[-1])
            body["nextCursor"] = cursor
        return body


def _checked(cursor: str, arguments: dict[str, Any]) -> None:
    assert len(cursor) <= 2048, len(cursor)
    validate(TaskListInput, {**arguments, "cursor": cursor})  # a strict client sends it back


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), sort=st.sampled_from(SORTS))
def test_every_cursor_fits_and_every_steady_task_comes_once(data: Any, sort: str) -> None:
    draw = data.draw
    count = draw(st.integers(1, 120))
    wide = draw(st.booleans())  # numbers near 2**53, or small ones
    low = MAX_NUMBER - 10_000 if wide else 1
    numbers = sorted(draw(st.sets(st.integers(low, low + 5_000), min_size=count, max_size=count)))
    clock = [0]

    def task(number: int) -> Task:
        clock[0] += 1
        priority = draw(st.sampled_from(PRIORITIES))
        return Task(number, priority, clock[0], draw(st.floats(-50, 0, allow_nan=False)))

    tasks = {n: task(n) for n in numbers}
    long_cursors = draw(st.booleans())
    lengths = (
        st.integers(MAX_UPSTREAM_CURSOR - 30, MAX_UPSTREAM_CURSOR)
        if long_cursors
        else st.integers(1, MAX_UPSTREAM_CURSOR)
    )
    upstream = Upstream(
        sort,
        tasks,
        cursor_lengths=lambda: draw(lengths),
        shortfall=lambda: draw(st.sampled_from([0, 0, 0, 1, 5])),
    )
    steady = set(tasks)  # in the view throughout, key never changed
    arguments: dict[str, Any] = (
        {"channel": "c", "query": "q"} if sort == "relevance" else {"channel": "c", "sort": sort}
    )
    if sort == "relevance":
        arguments["sort"] = "relevance"
    cursors = Cursors.ephemeral()
    given_numbers: list[int] = []
    cursor: str | None = None
    for _ in range(400):  # bounded: pages that never end are a failure
        limit = draw(st.sampled_from([1, 2, 3, 7, 20, 100]))
        args = {**arguments, "limit": limit}
        if cursor is not None:
            args["cursor"] = cursor
        upstream_args, state = page_request(args, "ws", cursors)
        assert upstream_args["limit"] >= 1
        body = upstream.list(upstream_args)
        page, state = page_answer(args, body, state, cursors)
        items = page["items"]
        cursor = page.get("nextCursor")
        if len(items) > 1 and draw(st.booleans()):  # the byte budget keeps the first `keep`
            keep = draw(st.integers(1, len(items) - 1))
            items = items[:keep]
            cursor = cursors.issue(state, items)
        given_numbers += [i["number"] for i in items]
        if cursor is None:
            break
        _checked(cursor, arguments)
        for _ in range(draw(st.integers(0, 2))):  # changes between pages
            move = draw(st.sampled_from(["insert", "delete", "rekey"]))
            if move == "insert" and max(tasks) < MAX_NUMBER:
                number = max(tasks) + 1
                tasks[number] = task(number)
            elif move == "delete" and tasks:
                number = draw(st.sampled_from(sorted(tasks)))
                del tasks[number]
                steady.discard(number)
            elif move == "rekey" and tasks and sort != "number":
                number = draw(st.sampled_from(sorted(tasks)))
                tasks[number] = task(number)
                steady.discard(number)
    else:
        raise AssertionError("the pages never ended")
    counts = Counter(given_numbers)
    assert sorted(n for n in steady if counts[n] != 1) == []
    if sort == "number":  # no key ever changes: nothing at all twice
        assert [n for n, c in counts.items() if c > 1] == []


@pytest.mark.parametrize("length", [1, 300, 700, MAX_UPSTREAM_CURSOR])
def test_a_relevance_page_given_one_item_at_a_time_keeps_its_cursor_in_bounds(
    length: int,
) -> None:
    # The defect left open: the longest upstream cursor, numbers of 16 digits, one upstream page
    # of many items given one by one (each page cut by the budget after its first item).
    tasks = {
        n: Task(n, "normal", n, -float(n % 97)) for n in range(MAX_NUMBER - 299, MAX_NUMBER + 1)
    }
    upstream = Upstream("relevance", tasks, cursor_lengths=lambda: length, shortfall=lambda: 0)
    arguments = {"channel": "c", "query": "q"}
    cursors = Cursors.ephemeral()
    given_numbers: list[int] = []
    cursor: str | None = None
    widest = 0
    for _ in range(1000):
        args = {**arguments, "limit": 100, **({"cursor": cursor} if cursor else {})}
        upstream_args, state = page_request(args, "ws", cursors)
        page, state = page_answer(args, upstream.list(upstream_args), state, cursors)
        items = page["items"][:1]
        given_numbers += [i["number"] for i in items]
        cursor = cursors.issue(state, items) if len(page["items"]) > 1 else page.get("nextCursor")
        if cursor is None:
            break
        _checked(cursor, arguments)
        widest = max(widest, len(cursor))
    assert sorted(given_numbers) == sorted(tasks)  # each once, none skipped
    assert widest > 1900 or length < MAX_UPSTREAM_CURSOR  # the bound was reached, and held


def test_search_results_pushed_onto_the_next_upstream_page_are_not_given_again() -> None:
    # Tasks 1-3 given (a page cut after them), then five inserts ranked before them: the
    # pages that follow reach the end of their upstream page before 1-3, which the upstream's
    # next page then holds again.
    tasks = {n: Task(n, "normal", n, float(n)) for n in range(1, 11)}
    upstream = Upstream("relevance", tasks, cursor_lengths=lambda: 40, shortfall=lambda: 0)
    arguments = {"channel": "c", "query": "q"}
    cursors = Cursors.ephemeral()

    def page(limit: int, cursor: str | None, keep: int | None = None) -> tuple[list[int], Any]:
        args = {**arguments, "limit": limit, **({"cursor": cursor} if cursor else {})}
        upstream_args, state = page_request(args, "ws", cursors)
        answer, state = page_answer(args, upstream.list(upstream_args), state, cursors)
        items = answer["items"][:keep]
        onward = cursors.issue(state, items) if keep else answer.get("nextCursor")
        return [i["number"] for i in items], onward

    given, cursor = page(10, None, keep=3)  # the budget keeps 3 of 10
    for n in range(11, 16):
        tasks[n] = Task(n, "normal", n, -float(n))  # ranked before every other
    while cursor is not None:
        numbers, cursor = page(2, cursor)
        given += numbers
    assert sorted(given) == list(range(1, 16)), given
