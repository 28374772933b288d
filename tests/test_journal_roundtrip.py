"""Every kind goes in and comes back out unchanged; readers filter, stream and stay in order."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal

from .journal_helpers import KEY, SAMPLE_PAYLOADS, SESSION, all_kinds, event, write_journal

WALL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.mark.parametrize("kind", journal.KINDS)
def test_every_kind_round_trips_with_the_sync_writer(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event(kind)])
    with journal.open_reader(path) as reader:
        [record] = reader.events()
    assert record.kind == kind
    assert record.kind_version == 1
    assert record.payload == SAMPLE_PAYLOADS[kind]
    assert record.seq == 1
    assert record.prev_hash == journal.GENESIS_HASH
    assert record.hash == journal.row_hash(_row(path, 1))
    assert WALL.match(record.ts_wall)


async def test_every_kind_round_trips_with_the_trio_writer(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        seqs = [await writer.append(e) for e in all_kinds()]
    assert seqs == list(range(1, len(journal.KINDS) + 1))
    with journal.open_reader(path) as reader:
        records = list(reader.events())
    assert [r.kind for r in records] == list(journal.KINDS)
    assert [r.payload for r in records] == [SAMPLE_PAYLOADS[k] for k in journal.KINDS]


def test_filter_columns_follow_the_payload_and_envelope(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, all_kinds())
    with journal.open_reader(path) as reader:
        by_kind = {r.kind: r for r in reader.events()}
    response = by_kind["upstream_response"]
    assert (response.http_response_status_code, response.error_type) == (409, "409")
    assert response.duration_ms == 3.25
    assert by_kind["call_error"].error_type == "task_conflict"
    assert by_kind["call_rejected"].error_type == "invalid_arguments"
    assert by_kind["call_result"].duration_ms == 5.5
    received = by_kind["call_received"]
    assert received.gen_ai_tool_name == "task_create"
    assert received.mcp_method_name == "tools/call"
    assert received.jsonrpc_request_id == "7"
    assert by_kind["session_started"].call_id is None


def test_sequence_and_chain_continue_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    first = write_journal(path, all_kinds()[:3])
    second = write_journal(path, all_kinds()[3:])
    assert first.journal_id == second.journal_id
    with journal.open_reader(path) as reader:
        records = list(reader.events())
        assert [r.seq for r in records] == list(range(1, len(journal.KINDS) + 1))
        assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(records))
        assert journal.verify(reader, key=KEY).ok
        assert [r.ts_mono_ns for r in records] == sorted(r.ts_mono_ns for r in records)


def test_a_second_journal_id_for_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")], journal_id="journal-a")
    with pytest.raises(journal.JournalFormatError, match="journal-a"):
        journal.open_sync_writer(path, key=KEY, journal_id="journal-b")
    with journal.open_reader(path) as reader:
        assert reader.journal_id == "journal-a"


@pytest.fixture
def mixed_journal(tmp_path: Path) -> Iterator[journal.Reader]:
    path = tmp_path / "j.db"
    events = [event("session_started")]
    for call, tool in (("c1", "task_list"), ("c2", "task_create"), ("c3", "task_list")):
        events += [
            event("call_received", call_id=call, tool=tool),
            event("upstream_request", call_id=call, tool=tool),
            event("call_result", call_id=call, tool=tool),
        ]
    events.append(journal.Event(session_id="session-2", payload=SAMPLE_PAYLOADS["session_started"]))
    write_journal(path, events)
    with journal.open_reader(path) as reader:
        yield reader


@pytest.mark.parametrize(
    ("filters", "expected_seqs"),
    [
        ({}, list(range(1, 12))),
        ({"call_id": "c2"}, [5, 6, 7]),
        ({"tool": "task_list"}, [2, 3, 4, 8, 9, 10]),
        ({"kind": "call_result"}, [4, 7, 10]),
        ({"kind": ["session_started", "call_received"]}, [1, 2, 5, 8, 11]),
        ({"session_id": "session-2"}, [11]),
        ({"session_id": SESSION, "kind": "upstream_request", "tool": "task_list"}, [3, 9]),
        ({"since_seq": 8}, [9, 10, 11]),
        ({"since_seq": 2, "until_seq": 4}, [3, 4]),
    ],
)
def test_reader_filters(
    mixed_journal: journal.Reader, filters: dict[str, Any], expected_seqs: list[int]
) -> None:
    assert [r.seq for r in mixed_journal.events(**filters)] == expected_seqs


def test_reader_streams_lazily(mixed_journal: journal.Reader) -> None:
    stream = mixed_journal.events()
    assert isinstance(stream, Iterator)
    assert next(stream).seq == 1
    assert mixed_journal.count() == 11
    assert mixed_journal.head()[0] == 11


def test_append_many_is_all_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.append(event("call_received"))
        bad = journal.Event(session_id=SESSION, payload=journal.CallResult(result={"x": object()}))
        with pytest.raises(journal.EventEncodeError):
            writer.append_many([event("call_result"), bad])
        assert writer.append(event("call_result")) == 2
    with journal.open_reader(path) as reader:
        assert [r.kind for r in reader.events()] == ["call_received", "call_result"]
        assert journal.verify(reader, key=KEY).ok


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def recipe_writer(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, journal.SyncWriter]]:
    """One journal the recipe's examples append to (creating a journal per example costs more
    than the example): every example's rows are recomputed from the one before them."""
    path = tmp_path_factory.mktemp("recipe") / "j.db"
    with journal.open_sync_writer(path, key=KEY) as writer:
        yield path, writer


@settings(max_examples=60, deadline=None)
@given(
    arguments=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    tool=st.none() | st.text(max_size=20),
    duration=st.none() | st.floats(min_value=0, max_value=1e9),
)
def test_documented_plain_sqlite3_recipe_recomputes_every_hash(
    recipe_writer: tuple[Path, journal.SyncWriter],
    arguments: dict[str, Any],
    tool: str | None,
    duration: float | None,
) -> None:
    path, writer = recipe_writer
    first, _ = writer.append_many(
        [
            journal.Event(
                session_id=SESSION,
                call_id="c1",
                gen_ai_tool_name=tool,
                payload=journal.CallReceived(arguments=arguments),
            ),
            journal.Event(
                session_id=SESSION, call_id="c1", payload=journal.CallResult(duration_ms=duration)
            ),
        ],
    )
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    before = conn.execute("SELECT hash FROM events WHERE seq = ?", (first - 1,)).fetchone()
    prev = journal.GENESIS_HASH if before is None else before["hash"]
    rows = list(conn.execute("SELECT * FROM events WHERE seq >= ? ORDER BY seq", (first,)))
    assert [row["seq"] for row in rows] == [first, first + 1]
    for row in rows:
        # The recipe of journal._canonical's docstring, verbatim.
        leaf = ("salt", "payload_sha256", "tree_hashes")  # not hashed (absent before schema 10)
        cols = {k: row[k] for k in row.keys() if k not in ("hash", "payload", *leaf)}
        cols["payload"] = "\0"
        text = json.dumps(cols, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text = text.replace('"payload":"\\u0000"', '"payload":' + row["payload"], 1)
        assert hashlib.sha256(text.encode()).hexdigest() == row["hash"]
        assert row["prev_hash"] == prev
        prev = row["hash"]
    conn.close()


def test_payload_text_is_sorted_compact_json(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    payload = _row(path, 1)[14]
    assert payload == msgspec.json.encode(json.loads(payload), order="sorted").decode()
    assert "✓" in payload  # UTF-8, not escaped
    assert ", " not in payload and '": ' not in payload


@pytest.mark.parametrize("kind", journal.KINDS)
def test_the_stored_payload_is_the_canonical_text_of_its_json_image(
    tmp_path: Path, kind: str
) -> None:
    # The writer encodes the Struct itself; the rule is stated for its JSON image.
    path = tmp_path / "j.db"
    write_journal(path, [event(kind)])
    image = msgspec.to_builtins(SAMPLE_PAYLOADS[kind])
    assert _row(path, 1)[14] == msgspec.json.encode(image, order="sorted").decode()


def _row(path: Path, seq: int) -> tuple[Any, ...]:
    conn = sqlite3.connect(path)
    try:
        cols = ", ".join(journal.COLUMNS)
        row: tuple[Any, ...] = conn.execute(
            f"SELECT {cols} FROM events WHERE seq = ?", (seq,)
        ).fetchone()
        return row
    finally:
        conn.close()
