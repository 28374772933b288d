"""The ``calls`` view: one definition of a call's summary row, rendered for each engine.

The journal file's SQLite view (``journal._views.VIEWS``) and the fleet store's PostgreSQL view
(``replay._fleet_schema``) are this one text; only the dialect's spellings differ: a call is
keyed by ``call_id`` in a file (one journal) and by ``(journal_id, call_id)`` in the store, "some
event is" is ``SUM(x) > 0`` against ``bool_or(x)``, a count ``SUM(x)`` against ``COUNT(*) FILTER
(WHERE x)``, the last response's status a correlated subquery against an ordered
``array_agg``. tests/test_call_summary_engines.py compares both views column by column (and
with the Python fold, replay's ``CallStory.summary``, on the columns they share).

Invariants: the outcome is the first of ``OUTCOME_ORDER`` any of the call's events shows,
``incomplete`` when none does; ``duration_ms`` is the outcome's own (``call_result`` or
``call_error``: the bridge's timer, arrival to answer), never the journal's monotonic stamps
(replay's ``bridge_ms``): README "A call is timed two ways".
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

__all__ = ["OUTCOME_ORDER", "Dialect", "calls_view"]

Dialect = Literal["sqlite", "postgresql"]

# (the kind an event of the call has, the call's outcome): the first that matches decides.
OUTCOME_ORDER: Final = (
    ("call_result", "result"),
    ("call_error", "error"),
    ("call_rejected", "rejected"),
    ("call_cancelled", "cancelled"),
    ("upstream_request", "in_doubt"),
)


class _Spelling(NamedTuple):
    events: str  # the events table
    key: tuple[str, ...]  # the columns one call is grouped by
    some: str  # "{}" holds for some event of the call
    tally: str  # how many events of the call "{}" holds for
    last_status: str  # the status of the call's last upstream response
    order: str  # the rows' order, where the view has one


_SPELLINGS: Final[dict[Dialect, _Spelling]] = {
    "sqlite": _Spelling(
        events="events",
        key=("e.call_id",),
        some="SUM({}) > 0",
        tally="SUM({})",
        last_status="(SELECT u.http_response_status_code FROM events u\n"
        "    WHERE u.call_id = e.call_id AND u.kind = 'upstream_response'\n"
        "    ORDER BY u.seq DESC LIMIT 1)",
        order="\nORDER BY first_seq",
    ),
    "postgresql": _Spelling(
        events="agentteam.events",
        key=("e.journal_id", "e.call_id"),
        some="bool_or({})",
        tally="COUNT(*) FILTER (WHERE {})",
        last_status="(array_agg(e.http_response_status_code ORDER BY e.seq DESC)\n"
        "    FILTER (WHERE e.kind = 'upstream_response'))[1]",
        order="",
    ),
}


def calls_view(dialect: Dialect) -> str:
    """The ``calls`` view's SELECT in ``dialect``: one row per call, its outcome (in_doubt when
    a request went upstream without a recorded outcome), duration and upstream traffic."""
    s = _SPELLINGS[dialect]

    def kind(name: str) -> str:
        return f"e.kind = '{name}'"

    keys = "".join(f"\n  {column}," for column in s.key)
    outcomes = "".join(
        f"\n    WHEN {s.some.format(kind(name))} THEN '{said}'" for name, said in OUTCOME_ORDER
    )
    return f"""
SELECT{keys}
  MIN(e.session_id) AS session_id,
  MIN(e.seq) AS first_seq,
  MAX(e.seq) AS last_seq,
  MIN(e.ts_wall) AS started_at,
  MAX(e.ts_wall) AS ended_at,
  MAX(e.gen_ai_tool_name) AS gen_ai_tool_name,
  MAX(e.mcp_method_name) AS mcp_method_name,
  MAX(e.jsonrpc_request_id) AS jsonrpc_request_id,
  CASE{outcomes}
    ELSE 'incomplete'
  END AS outcome,
  MAX(CASE WHEN e.kind IN ('call_error', 'call_rejected') THEN e.error_type END) AS error_type,
  MAX(CASE WHEN e.kind IN ('call_result', 'call_error') THEN e.duration_ms END) AS duration_ms,
  {s.tally.format(kind("upstream_request"))} AS upstream_requests,
  {s.last_status} AS last_http_response_status_code,
  {s.tally.format(kind("deprecated_usage"))} AS deprecated_uses,
  {s.tally.format(kind("token_refreshed"))} AS token_refreshes
FROM {s.events} e
WHERE e.call_id IS NOT NULL
GROUP BY {", ".join(s.key)}{s.order}"""
