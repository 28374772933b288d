"""``row_problem``'s quick path (one set lookup of the row's column types, the whole second of
the last time parsed) says exactly what the column-by-column check says, in any order of rows."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.journal import Row, row_problem
from agentteam_task_bridge.journal._canonical import _type_problem, _wall_problem

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=4),
)
_SECONDS = (
    "2026-12-04T21:30:49",
    "2026-12-04T21:30:50",
    "2026-13-04T21:30:49",
    "1969-12-31T23:59:59",
)
_FRACTIONS = (".123456Z", ".000000Z", ".12345Z", ".1234567Z", ".12345٣Z", ".123456+00:00", "Z", "")
_WALLS = st.one_of(
    st.builds(lambda s, f: s + f, st.sampled_from(_SECONDS), st.sampled_from(_FRACTIONS)),
    st.text(max_size=30),
)


def _good(**changes: Any) -> Row:
    row = Row(
        seq=1,
        journal_id="j",
        session_id="s",
        call_id=None,
        ts_mono_ns=5,
        ts_wall="2026-12-04T21:30:49.123456Z",
        kind="call_received",
        kind_version=1,
        mcp_method_name=None,
        gen_ai_tool_name=None,
        jsonrpc_request_id=None,
        http_response_status_code=None,
        error_type=None,
        duration_ms=None,
        payload="{}",
        prev_hash="0" * 64,
        hash="1" * 64,
    )
    return row._replace(**changes)


@st.composite
def _rows(draw: st.DrawFn) -> Row:
    row = _good(ts_wall=draw(_WALLS))
    for name in draw(st.sets(st.sampled_from(Row._fields), max_size=3)):
        row = row._replace(**{name: draw(_VALUES)})
    return row


@settings(max_examples=400, deadline=None)
@given(st.lists(_rows(), min_size=1, max_size=12))
def test_the_quick_path_agrees_with_the_column_by_column_check(rows: list[Row]) -> None:
    for row in rows:
        expected = _type_problem(row) or (
            _wall_problem(row.ts_wall) if isinstance(row.ts_wall, str) else None
        )
        assert row_problem(row) == expected, row


def test_a_bad_time_in_a_second_already_seen_is_still_found() -> None:
    assert row_problem(_good(ts_wall="2026-12-04T21:30:49.123456Z")) is None
    assert row_problem(_good(ts_wall="2026-12-04T21:30:49.654321Z")) is None
    for wall in ("2026-12-04T21:30:49.12345xZ", "2026-12-04T21:30:49", "2026-12-04T21:30:49.1Z"):
        assert row_problem(_good(ts_wall=wall)) == _wall_problem(wall), wall
    assert row_problem(_good(ts_wall="2026-12-04T21:30:49")) == (
        "ts_wall '2026-12-04T21:30:49' has no UTC offset"
    )
