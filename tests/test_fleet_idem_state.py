"""The idempotency state kept per journal at ingest gives ``report --from`` the statement's check.

Generated fleets of two or three journals sharing key scopes (one workspace, agent and
callback, two keys, two payloads), tasks (claims and updates of tasks 3 to 5, creates returning
1 to 3) and call signatures (the same list call everywhere), written in two parts and shipped
in random batch sizes, in random journal order (a smaller id after a larger one), calls left
open across batches and across the two ships, calls never closed in sessions that end or do
not, erasures by the store's owner between the ships and after: the kept state's result
(``idempotency_kept``) equals the statement over the call lines (``idempotency_from``,
``in_order``), over the whole fleet and each journal alone, whenever every journal's calls are
settled (and it declines exactly when one is not). A shipping login cannot write the state.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import Event, SessionEnded
from agentteam_task_bridge.replay._fleet_idem_kept import idempotency_for_report, idempotency_kept
from agentteam_task_bridge.replay._fleet_idem_state import STATE_TABLES
from agentteam_task_bridge.replay._fleet_idempotency import idempotency_from
from agentteam_task_bridge.replay._idempotency import REPEAT_WINDOW
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import IDEM_CHANNEL, _Calls, _task, idempotency_events
from .journal_helpers import KEY
from .pg_cluster import Cluster

_create = st.tuples(
    st.just("create"),
    st.sampled_from(["k-1", "k-2🎌"]),
    st.sampled_from(["a", "b"]),
    st.lists(st.integers(1, 3), max_size=2),
    st.booleans(),  # reused
    st.sampled_from([None, None, "idempotency_conflict"]),
    st.sampled_from([True, True, False]),  # in a callback
    st.sampled_from([True, True, True, False]),  # an outcome
)
_claim = st.tuples(
    st.just("claim"),
    st.booleans(),
    st.lists(st.sampled_from([3, 4]), max_size=2),
    st.lists(st.sampled_from([3, 4]), max_size=2),
)
_update = st.tuples(
    st.just("update"),
    st.sampled_from([3, 4, 5]),
    st.booleans(),  # changed
    st.sampled_from([True, True, True, False]),  # an outcome
    st.sampled_from([False, False, True]),  # cancelled in flight
)
_list = st.tuples(st.just("list"))
_session = st.tuples(
    st.lists(st.one_of(_create, _claim, _update, _list, _list), min_size=1, max_size=7),
    st.sampled_from([True, True, True, False]),  # ended
)
_fleet = st.lists(st.lists(_session, min_size=1, max_size=3), min_size=2, max_size=3)
_NAMES = ["idem-b", "idem-a", "idem-c"]


def _events(name: str, sessions: list[tuple[list[Any], bool]]) -> list[Event]:
    events: list[Event] = []
    for s, (ops, ended) in enumerate(sessions):
        calls = _Calls(f"{name}-s{s}")
        calls.started()
        for op in ops:
            _call(calls, op)
        if ended:
            calls.ended()
        events += calls.events
    return events


def _call(calls: _Calls, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "create":
        _, key, title, numbers, reused, error, callback, outcome = op
        body: dict[str, Any] = {"channel": IDEM_CHANNEL, "tasks": [{"title": title}]}
        body["idempotencyKey"] = key
        if callback:
            body.update(workflowRunId="run-🚀", callbackEffectId="cb-流")
        data = {"channel": IDEM_CHANNEL, "tasks": [_task(n) for n in numbers], "reused": reused}
        arguments = {"channel": IDEM_CHANNEL, "tasks": [{"title": title}], "idempotency_key": key}
        calls.call(
            "task_create",
            arguments,
            body=body,
            data=data,
            error=error,
            callback=callback,
            outcome=outcome,
        )
    elif kind == "claim":
        _, claimed, changed, unchanged = op
        arguments = {"channel": IDEM_CHANNEL, "numbers": sorted({*changed, *unchanged}) or [3]}
        arguments["claimed"] = claimed
        data = {"channel": IDEM_CHANNEL, "claimed": claimed, "changed": changed}
        data["unchanged"] = unchanged
        calls.call("task_set_claim", arguments, body=arguments, route="/set-claim", data=data)
    elif kind == "update":
        _, number, changed, outcome, cancelled = op
        arguments = {"channel": IDEM_CHANNEL, "number": number, "patch": {"title": "新 🎯"}}
        data = {"changed": changed, "task": _task(number)}
        calls.call(
            "task_update",
            arguments,
            body=arguments,
            route="/update",
            data=data,
            outcome=outcome,
            cancelled=cancelled,
        )
    else:
        body = {"channel": IDEM_CHANNEL, "limit": 20}
        calls.call("task_list", {"channel": IDEM_CHANNEL}, body=body, data={"items": []})


def _erase_one(url: str, rng: random.Random) -> None:
    """The store's owner erases one call event's payload (its call lines refold)."""
    with psycopg.connect(url, autocommit=True) as owner:
        rows = owner.execute(
            "SELECT journal_id, seq FROM agentteam.events"
            " WHERE kind IN ('call_result', 'upstream_request', 'call_received')"
            " AND payload <> %s ORDER BY journal_id, seq",
            (journal.ERASED_PAYLOAD,),
        ).fetchall()
        if rows:
            jid, seq = rows[rng.randrange(len(rows))]
            owner.execute(
                "SELECT agentteam.erase_stored(%s, %s, NULL, 'test', 'a generated erasure')",
                (jid, [seq]),
            )


def _settled(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT bool_and(i.calls IS NOT DISTINCT FROM c.calls) FROM agentteam.call_counts c"
            " LEFT JOIN agentteam.idem_journals i USING (journal_id)"
        ).fetchone()
    return bool(row and row[0])


def _same(url: str, journal_id: str | None = None) -> bool:
    """The kept state's check equals the statement's over the same journals."""
    calls = "true" if journal_id is None else "c.journal_id = %(j)s"
    present = idempotency_from(url, calls=calls, call_params={"j": journal_id}, in_order=True)
    kept = idempotency_kept(url, journal=journal_id, window=REPEAT_WINDOW)
    assert kept is not None
    assert to_json(kept) == to_json(present)
    return True


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(fleet=_fleet, seed=st.integers(0, 2**32 - 1))
def test_the_kept_state_gives_the_statement_s_check(
    pg_cluster: Cluster, fleet: list[list[tuple[list[Any], bool]]], seed: int
) -> None:
    rng = random.Random(seed)
    names = rng.sample(_NAMES, len(fleet))
    url = pg_cluster.create_database("idem")
    with tempfile.TemporaryDirectory() as tmp:
        paths: dict[str, Path] = {}
        rest: dict[str, list[Event]] = {}
        for name, sessions in zip(names, fleet, strict=True):
            events = _events(name, sessions)
            cut = rng.randrange(1, len(events) + 1)
            paths[name] = Path(tmp) / f"{name}.db"
            with journal.open_sync_writer(paths[name], key=KEY, journal_id=name) as writer:
                writer.append_many(events[:cut])
            rest[name] = events[cut:]
        for round_ in range(2):
            order = rng.sample(names, len(names))
            for name in order:
                shipped = replay.ship([paths[name]], url, batch_size=rng.randint(3, 40))
                assert shipped.ok
            if round_ == 0:
                if rng.random() < 0.5:
                    _erase_one(url, rng)
                for name in names:
                    if rest[name]:
                        with journal.open_sync_writer(
                            paths[name], key=KEY, journal_id=name
                        ) as writer:
                            writer.append_many(rest[name])
        if rng.random() < 0.5:
            _erase_one(url, rng)
    open_tail = any(not ended for sessions in fleet for _, ended in sessions)
    if not _settled(url):
        assert open_tail  # only a session never ended leaves calls after a frontier
        assert idempotency_kept(url, window=REPEAT_WINDOW) is None
        return
    assert _same(url)
    assert _same(url, sorted(names)[-1])


def test_the_shared_idempotency_fleet_settled_gives_the_statement_s_check(pg_url: str) -> None:
    """The three journals sharing keys and tasks (every finding, a claim set in one journal and
    repeated in the next, a baseline created in one and replayed in the others), their last
    sessions ended so every call is settled, shipped last journal first: equal, with the
    findings only the earlier journals decide; the local report's check is the same."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for index in (2, 0, 1):
            path = Path(tmp) / f"idem-{index}.db"
            end = Event(session_id=f"idem-t{index}", payload=SessionEnded(reason="eof"))
            with journal.open_sync_writer(path, key=KEY, journal_id=f"idem-{index}") as writer:
                writer.append_many([*idempotency_events(index), end])
            paths.append(path)
        assert replay.ship(paths, pg_url, batch_size=7).ok
        local = replay.report(paths, accept_unverified=True).idempotency
    kept = idempotency_kept(pg_url, window=REPEAT_WINDOW)
    assert kept is not None and _same(pg_url)
    assert to_json(kept) == to_json(local)  # the local report's checker, too
    later = {(f.journal_id, f.rule) for f in kept.findings}
    # decided by an earlier journal's claim set and baseline
    assert {("idem-1", "claim_repeat_changed"), ("idem-2", "replay_allocated_numbers")} <= later
    for index in range(3):
        assert _same(pg_url, f"idem-{index}")


def test_a_repeat_naming_other_tasks_is_judged_with_the_earlier_journals_changes(
    pg_url: str,
) -> None:
    """Two identical creates in one journal returning other tasks (1, then 5) compare epochs of
    different tasks: task 5 was changed once by the journal before, so the repeat is clean (1
    after the first, 1 found by the second), which the journal alone would not show."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, ops in (
            (
                "rq-b",
                [
                    ("create", "k-1", "a", [1], False, None, True, True),
                    ("create", "k-1", "a", [5], True, None, True, True),
                ],
            ),
            ("rq-a", [("update", 5, True, True, False)]),
        ):
            path = Path(tmp) / f"{name}.db"
            with journal.open_sync_writer(path, key=KEY, journal_id=name) as writer:
                writer.append_many(_events(name, [(ops, True)]))
            paths.append(path)
        assert replay.ship(paths, pg_url).ok
    kept = idempotency_kept(pg_url, window=REPEAT_WINDOW)
    assert kept is not None and _same(pg_url)
    assert [h.repeats for h in kept.hints if h.tool == "task_create"] == [1]
    alone = idempotency_kept(pg_url, journal="rq-b", window=REPEAT_WINDOW)
    assert alone is not None and _same(pg_url, "rq-b")
    assert [h.repeats for h in alone.hints if h.tool == "task_create"] == [0]


def test_a_report_over_calls_never_settled_falls_back_to_the_statement(pg_url: str) -> None:
    """A call still open in a session still open: the kept state declines, the report's check
    is the statement's all the same; the session's end settles it and the state serves."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "open.db"
        calls = _Calls("open-s0")
        calls.started()
        _call(calls, ("update", 4, True, True, False))
        _call(calls, ("update", 4, True, False, False))  # never answered
        _call(calls, ("update", 4, False, True, False))
        with journal.open_sync_writer(path, key=KEY, journal_id="open") as writer:
            writer.append_many(calls.events)
        assert replay.ship([path], pg_url).ok
        assert idempotency_kept(pg_url, window=REPEAT_WINDOW) is None
        args: dict[str, Any] = {"whole": True, "journal": None, "calls": "true", "call_params": {}}
        fallback = idempotency_for_report(pg_url, **args)
        assert to_json(fallback) == to_json(idempotency_from(pg_url, in_order=True))
        with journal.open_sync_writer(path, key=KEY, journal_id="open") as writer:
            writer.append_many([Event(session_id="open-s0", payload=SessionEnded(reason="eof"))])
        assert replay.ship([path], pg_url).ok
        assert idempotency_kept(pg_url, window=REPEAT_WINDOW) is not None
        assert _same(pg_url)


def test_a_call_whose_session_died_is_settled_by_the_next_session(pg_url: str) -> None:
    """A bridge killed with a call in flight never ends its session; the journal's next session
    (its writer gone: one writer holds a journal) settles that call, so the journal is folded
    to its end and the kept state serves. An outcome shipped for it later resets the journal's
    state and it is folded again: still the statement's check."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "killed.db"
        killed = _Calls("killed-s0")
        killed.started()
        _call(killed, ("update", 4, True, True, False))
        _call(killed, ("update", 4, True, False, False))  # in flight when the bridge was killed
        after = _Calls("killed-s1")
        after.started()
        _call(after, ("update", 4, False, True, False))
        _call(after, ("create", "k-1", "t", [7], False, None, True, True))
        after.ended()
        with journal.open_sync_writer(path, key=KEY, journal_id="killed") as writer:
            writer.append_many(killed.events)
        assert replay.ship([path], pg_url).ok
        assert idempotency_kept(pg_url, journal="killed", window=REPEAT_WINDOW) is None
        with journal.open_sync_writer(path, key=KEY, journal_id="killed") as writer:
            writer.append_many(after.events)
        assert replay.ship([path], pg_url).ok
        assert idempotency_kept(pg_url, journal="killed", window=REPEAT_WINDOW) is not None
        assert _same(pg_url, "killed")
        # The killed call's outcome, late (an author of the journal, or a clock): a reset.
        late = Event(
            session_id="killed-s0",
            call_id="killed-s0.2",
            mcp_method_name="tools/call",
            gen_ai_tool_name="task_update",
            payload=journal.CallResult(result={"data": {"changed": True}, "meta": {}}),
        )
        with journal.open_sync_writer(path, key=KEY, journal_id="killed") as writer:
            writer.append_many([late])
        assert replay.ship([path], pg_url).ok
        assert idempotency_kept(pg_url, journal="killed", window=REPEAT_WINDOW) is not None
        assert _same(pg_url, "killed")


@pytest.mark.parametrize("table", STATE_TABLES)
def test_a_shipping_login_cannot_write_the_state(
    pg_url: str, shipping_login: Any, table: str
) -> None:
    """The state is the server's: a shipping login forging it (an insert, an update, a delete)
    is refused, and it cannot run the function that keeps it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.db"
        calls = _Calls("one-s0")
        calls.started()
        _call(calls, ("update", 4, True, True, False))
        calls.ended()
        with journal.open_sync_writer(path, key=KEY, journal_id="one") as writer:
            writer.append_many(calls.events)
        assert replay.ship([path], pg_url).ok
    _, login = shipping_login()
    with psycopg.connect(login, autocommit=True) as conn:
        for statement in (
            f"UPDATE agentteam.{table} SET journal_id = journal_id",
            f"DELETE FROM agentteam.{table}",
            f"INSERT INTO agentteam.{table} (journal_id) VALUES ('one')",
            "SELECT agentteam.fold_idem('one', 0)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def _claimed(calls: _Calls, changed: Any, unchanged: Any = (), numbers: Any = (3,)) -> None:
    """A claim whose result lists ``changed`` and ``unchanged`` as the upstream wrote them."""
    unchanged = list(unchanged) if isinstance(unchanged, tuple) else unchanged
    data = {"channel": IDEM_CHANNEL, "claimed": True, "changed": changed, "unchanged": unchanged}
    arguments = {"channel": IDEM_CHANNEL, "numbers": list(numbers), "claimed": True}
    calls.call("task_set_claim", arguments, body=arguments, route="/set-claim", data=data)


def _created(calls: _Calls, tasks: Any, *, reused: bool = False, extra: Any = None) -> None:
    """A keyed create in a callback whose result's tasks are ``tasks``, as written."""
    task = {"title": "a", **(extra or {})}
    body = {"channel": IDEM_CHANNEL, "tasks": [task], "idempotencyKey": "k"}
    body.update(workflowRunId="run-🚀", callbackEffectId="cb-流")
    data = {"channel": IDEM_CHANNEL, "tasks": tasks, "reused": reused}
    arguments = {"channel": IDEM_CHANNEL, "tasks": [{"title": "a"}], "idempotency_key": "k"}
    calls.call("task_create", arguments, body=body, data=data, callback=True)


def _updated(calls: _Calls, number: Any) -> None:
    arguments = {"channel": IDEM_CHANNEL, "number": number, "patch": {"title": "x"}}
    data = {"changed": True, "task": _task(3)}
    calls.call("task_update", arguments, body=arguments, route="/update", data=data)


def _numbered(number: Any) -> dict[str, Any]:
    """Task 1's identity with its number written otherwise."""
    return {**_task(1), "number": number}


_SHAPES: dict[str, Any] = {
    # a list that is not one: read as empty, as the store reads it
    "changed null": lambda c: (_claimed(c, [3]), _claimed(c, None, [3])),
    "unchanged null": lambda c: (_claimed(c, [3], None), _claimed(c, [], [3])),
    "changed text": lambda c: (_claimed(c, "34"), _claimed(c, [3])),
    "changed object": lambda c: (_claimed(c, {"3": 1}), _claimed(c, ["3"])),
    "tasks null": lambda c: (_created(c, None), _created(c, None, reused=True)),
    "tasks text": lambda c: (_created(c, "ab"), _created(c, "ab", reused=True)),
    # a number that is not one: true is not task 1, [1] is a task of its own
    "claim true then 1": lambda c: (_claimed(c, [True], numbers=[1]), _claimed(c, [1], [1])),
    "claim list": lambda c: (_claimed(c, [[1]]), _claimed(c, [[1]])),
    "update true": lambda c: (_claimed(c, [1], numbers=[1]), _updated(c, True), _claimed(c, [1])),
    "created true": lambda c: (
        _created(c, [_task(1)]),
        _created(c, [_numbered(True)], reused=True),
    ),
    "baseline true": lambda c: (
        _created(c, [_numbered(True)]),
        _created(c, [_task(1)], reused=True),
    ),
    # a number by its value: 1.0 is 1
    "claim 1.0": lambda c: (_claimed(c, [1.0]), _claimed(c, [1])),
    "payload 1.0": lambda c: (
        _created(c, [_task(1)], extra={"p": [1, {"q": 2}]}),
        _created(c, [_task(1)], reused=True, extra={"p": [1.0, {"q": 2.0}]}),
    ),
    "identity 1.0": lambda c: (_created(c, [_task(1)]), _created(c, [_numbered(1.0)], reused=True)),
}


@pytest.mark.parametrize("shape", list(_SHAPES))
def test_results_of_any_shape_give_the_local_checker_the_store_s_answer(
    pg_url: str, shape: str
) -> None:
    """The upstream's result, whatever its shape, is read by the local checker as the store's
    SQL reads it: the same findings and counts, no crash."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shape.db"
        calls = _Calls("shape-s0")
        calls.started()
        _SHAPES[shape](calls)
        calls.ended()
        with journal.open_sync_writer(path, key=KEY, journal_id="shape") as writer:
            writer.append_many(calls.events)
        local = replay.report([path], accept_unverified=True).idempotency
        assert replay.ship([path], pg_url).ok
    assert _same(pg_url)
    assert to_json(local) == to_json(idempotency_from(pg_url, in_order=True))
