"""The runtime store's seams: typed rows match the schema, cursors verify, the facade delegates.

The operations themselves are proven over HTTP by the other `test_runtime_*` files; these pin
the boundaries between the store's modules, in-process and without a server.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from agentteam_task_bridge.runtime import Principal, Store, seed_local
from agentteam_task_bridge.runtime._cursor import Cursors
from agentteam_task_bridge.runtime._dto import CreateRequest, GetRequest, NewTask
from agentteam_task_bridge.runtime._errors import ApiError
from agentteam_task_bridge.runtime._resolve import find_board
from agentteam_task_bridge.runtime._rows import (
    Row,
    StoredTask,
    TaskRow,
    columns,
    many,
    one,
    scalar,
    values,
)


@pytest.fixture
def store() -> Iterator[Store]:
    fresh = Store.open(":memory:", cursor_secret=b"s" * 32)
    seed_local(fresh)
    yield fresh
    fresh.close()


def _table_columns(c: sqlite3.Connection, table: str) -> list[str]:
    return values(c, "SELECT name FROM pragma_table_info(?) ORDER BY cid", (table,))


def test_a_task_row_reads_every_column_of_tasks_but_the_workspace_and_deletion(
    store: Store,
) -> None:
    # A column a migration adds must be read (a TaskRow field) or left out here on purpose.
    table = set(_table_columns(store.connection, "tasks"))
    assert set(TaskRow.__struct_fields__) == table - {"workspace_id", "deleted_at"}
    assert set(StoredTask.__struct_fields__) == table - {"workspace_id"}


def test_the_select_list_is_generated_from_the_fields_in_order() -> None:
    class Pair(Row, frozen=True):
        number: int
        label: str

    assert columns(Pair) == "t.number AS number, t.label AS label"
    assert (
        columns(Pair, "x", label="upper(x.title)") == "x.number AS number, upper(x.title) AS label"
    )


def test_rows_are_read_by_name_and_a_one_column_query_by_value() -> None:
    class Pair(Row, frozen=True):
        number: int
        label: str

    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE t (label TEXT, number INTEGER)")
    c.executemany("INSERT INTO t VALUES (?, ?)", [("二", 2), ("😀", 1)])
    sql = f"SELECT {columns(Pair)} FROM t ORDER BY t.number"
    assert many(c, Pair, sql) == [Pair(1, "😀"), Pair(2, "二")]
    assert one(c, Pair, sql + " LIMIT 0") is None
    assert scalar(c, "SELECT count(*) FROM t") == 2
    assert scalar(c, "SELECT label FROM t WHERE number = 9") is None
    assert values(c, "SELECT number FROM t ORDER BY number DESC") == [2, 1]
    # Columns in another order than the fields are refused, never silently swapped.
    with pytest.raises(TypeError):
        many(c, Pair, "SELECT t.label AS label, t.number AS number FROM t")


def test_a_cursor_round_trips_and_binds_to_its_query_and_secret() -> None:
    cursors = Cursors(b"k" * 32)
    cursor = cursors.encode("digest-a", ["2026-01-01T00:00:00.000000Z", 7])
    assert cursor.isascii()
    assert cursors.decode(cursor, "digest-a") == ["2026-01-01T00:00:00.000000Z", 7]
    with pytest.raises(ApiError) as other_query:
        cursors.decode(cursor, "digest-b")
    assert other_query.value.code == "cursor_mismatch"
    with pytest.raises(ApiError) as other_secret:
        Cursors(b"x" * 32).decode(cursor, "digest-a")
    assert other_secret.value.code == "cursor_invalid"


@pytest.mark.parametrize(
    "forged",
    ["", ".", "abc", "abc.0123456789abcdef", "é.é", "😀😀😀😀.😀", "二" * 64, "x" * 10_000],
)
def test_anything_but_an_issued_cursor_is_cursor_invalid(forged: str) -> None:
    with pytest.raises(ApiError) as refused:
        Cursors(b"k" * 32).decode(forged, "digest-a")
    assert refused.value.code == "cursor_invalid"


def test_an_edited_cursor_body_is_refused() -> None:
    cursors = Cursors(b"k" * 32)
    body, _, mac = cursors.encode("d", [1]).partition(".")
    edited = body[:-1] + ("A" if body[-1] != "A" else "B")
    with pytest.raises(ApiError) as refused:
        cursors.decode(edited + "." + mac, "d")
    assert refused.value.code == "cursor_invalid"


def test_the_facade_runs_an_operation_in_one_transaction(store: Store) -> None:
    me = Principal("ws_local", "agt_local")
    created = store.create_tasks(me, CreateRequest(channel="general", tasks=[NewTask("二😀")]))
    assert created["tasks"][0]["title"] == "二😀"
    assert store.get_task(me, GetRequest("general", 1))["task"]["title"] == "二😀"
    before = store.stats()
    with pytest.raises(ApiError):
        store.create_tasks(me, CreateRequest(channel="nope", tasks=[NewTask("x")]))
    assert store.stats() == before
    assert not store.connection.in_transaction


def test_now_is_later_than_any_instant_on_the_board(store: Store) -> None:
    me = Principal("ws_local", "agt_local")
    store.create_tasks(me, CreateRequest(channel="general", tasks=[NewTask("t")]))
    # Another process's clock ran ahead: this one must still hand out a later instant.
    store.connection.execute("UPDATE tasks SET updated_at = '2999-01-01T00:00:00.000000Z'")
    with store.transaction() as c:
        general = find_board(c, "ws_local", "general")
        assert general is not None
        assert store.now(c, general) > "2999-01-01T00:00:00.000000Z"
