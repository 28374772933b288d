"""Journals for the fleet tests: many small journals of plausible calls, written by the writer."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any, Final

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import (
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Event,
    InjectedField,
    SessionEnded,
    SessionStarted,
    UpstreamRequest,
    UpstreamResponse,
)

from .journal_helpers import KEY
from .replay_helpers import consolidated_copy, tamper

ROUTE: Final = "/api/v1/workspaces/ws-1/agents/{agent}/runtime/tasks"


def call_events(session: str, call: str, agent: str, n: int) -> list[Event]:
    """One call's events; ``n`` picks its shape (result, upstream error, rejection, old name)."""
    tool = ("task_create", "task_list", "task_get", "task_update")[n % 4]

    def ev(payload: Any, *, name: str | None = tool) -> Event:
        return Event(
            session_id=session,
            call_id=call,
            mcp_method_name="tools/call",
            gen_ai_tool_name=name,
            jsonrpc_request_id=n,
            payload=payload,
        )

    shape = n % 5
    requested = "list_tasks" if shape == 4 else tool
    events = [ev(CallReceived(arguments={"channel": "eng", "n": n}), name=requested)]
    if shape == 3:
        events.append(
            ev(
                CallRejected(
                    error_code="invalid_arguments",
                    message="number must be positive ✓ 数字",
                    field_errors={"$.number": "must be ≥ 1"},
                )
            )
        )
        return events
    if shape == 4:
        events.append(
            ev(
                DeprecatedUsage(
                    use_kind="tool_name",
                    old_name="list_tasks",
                    replacement="task_list",
                    client_name="cursor",
                    client_version="1.0",
                    agent_id=agent,
                ),
                name="task_list",
            )
        )
        tool = "task_list"
    events.append(
        ev(
            ContextInjected(
                fields=[
                    InjectedField(name="workspace_id", source="env", value="ws-1"),
                    InjectedField(name="agent_id", source="env", value=agent),
                ]
            ),
            name=tool,
        )
    )
    method = "GET" if tool == "task_list" else "POST"
    body = None if method == "GET" else {"channel": "eng", "title": f"t{n} 🦀"}
    events.append(
        ev(UpstreamRequest(method=method, route=ROUTE.format(agent=agent), body=body), name=tool)
    )
    status = 500 if shape == 2 else 200
    answer = {"error": {"code": "boom"}} if status == 500 else {"number": n, "channel": "eng"}
    events.append(
        ev(UpstreamResponse(status=status, body=answer, duration_ms=1.5 + n % 7), name=tool)
    )
    if status == 500:
        events.append(
            ev(
                CallError(
                    error_code="upstream_unavailable",
                    retryable=True,
                    message="the runtime failed",
                    duration_ms=3.0 + n % 11,
                ),
                name=tool,
            )
        )
    else:
        data = {"channel": "eng", "number": n}
        events.append(
            ev(CallResult(result={"data": data, "meta": {}}, duration_ms=2.0 + n % 13), name=tool)
        )
    return events


def journal_events(index: int, calls: int) -> list[Event]:
    session = f"s{index}"
    agent = f"agent-{index % 3}"
    events = [
        Event(
            session_id=session,
            payload=SessionStarted(
                bridge_version="0.1.0",
                compat_policy="hint",
                client_name=("claude-code", "cursor")[index % 2],
                client_version="2.1.0",
                protocol_version="2025-11-25",
                workspace_id="ws-1",
                agent_id=agent,
            ),
        )
    ]
    for n in range(calls):
        events += call_events(session, f"{session}.{n}", agent, n + index)
    events.append(
        Event(session_id=session, payload=SessionEnded(reason="stdin closed", calls=calls))
    )
    return events


def write_fleet_journal(path: Path, index: int, calls: int, *, checkpoint_every: int = 10) -> str:
    """A journal of ``calls`` calls, signed with the test KEY; its journal id."""
    with journal.open_sync_writer(
        path, key=KEY, journal_id=f"fleet-{index:04d}", checkpoint_every=checkpoint_every
    ) as writer:
        writer.append_many(journal_events(index, calls))
    return f"fleet-{index:04d}"


def write_v1_fleet_journal(path: Path, index: int, calls: int) -> str:
    """As :func:`write_fleet_journal`, a v1 journal's file (a hash chain, no Merkle leaves)."""
    from agentteam_task_bridge.journal import _schema

    conn = _schema.connect_writer(path)
    _schema.ensure_identity(conn, f"fleet-{index:04d}", merkle=False)
    conn.close()
    return write_fleet_journal(path, index, calls)


def write_fleet(directory: Path, journals: int, calls: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(journals):
        path = directory / f"journal-{index}.db"
        write_fleet_journal(path, index, calls)
        paths.append(path)
    return paths


def append_calls(path: Path, journal_id: str, start: int, calls: int) -> None:
    """More calls in a new session of an existing journal."""
    with journal.open_sync_writer(path, key=KEY, journal_id=journal_id) as writer:
        events = journal_events(start, calls)
        writer.append_many(events)


def truncate_to(path: Path, seq: int) -> None:
    """Cut the journal's events after ``seq`` and its checkpoints beyond it (an attacker's edit)."""
    tamper(
        path,
        "DELETE FROM events WHERE seq > ?",
        "DELETE FROM checkpoints WHERE seq > ?",
        params=(seq,),
    )


def drop_before(path: Path, seq: int) -> None:
    """Remove events 1..seq and the checkpoints up to it: what a later segment holds."""
    tamper(
        path,
        "DELETE FROM events WHERE seq <= ?",
        "DELETE FROM checkpoints WHERE seq <= ?",
        params=(seq,),
    )


def split_in_segments(path: Path, at: int, directory: Path) -> tuple[Path, Path]:
    """The journal as two files, events 1..at and at+1.. (a rolled-over journal's shape)."""
    first = consolidated_copy(path, directory / "seg1.db")
    second = consolidated_copy(path, directory / "seg2.db")
    truncate_to(first, at)
    drop_before(second, at)
    return first, second


def rewrite_payload(path: Path, seq: int, payload: str) -> None:
    """Rewrite one event's payload and re-hash the chain from there (a re-chained history)."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in names:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE events SET payload = ? WHERE seq = ?", (payload, seq))
        previous = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq - 1,)).fetchone()
        prev = previous[0] if previous else journal.GENESIS_HASH
        cols = ", ".join(journal.COLUMNS)
        rows = conn.execute(f"SELECT {cols} FROM events WHERE seq >= ? ORDER BY seq", (seq,))
        for row in list(rows):
            row = (*row[:15], prev, row[16])
            digest = journal.row_hash(row)
            conn.execute(
                "UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, digest, row[0])
            )
            prev = digest
        conn.commit()
    finally:
        conn.close()


def reseal_merkle(path: Path, since_seq: int = 1) -> bytes | None:
    """What a thorough insider does after editing a v2 journal's events from ``since_seq`` on:
    the leaves before it kept, every later event's salt, payload digest and stored tree hashes
    made anew, so the Merkle log agrees with the edited history and only a signature can tell.
    Returns the new tree root (None for a v1 journal)."""
    from agentteam_task_bridge.journal import _merkle, _tlog

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        meta = "SELECT value FROM journal_meta WHERE key = 'merkle_log'"
        if conn.execute(meta).fetchone() is None:
            return None
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        # The tree before since_seq, as the writer reads it (this file's border copy included).
        tree = _tlog.load_border(conn, since_seq - 1) if since_seq > 1 else _merkle.Frontier()
        in_events = _tlog.leaf_store(conn) == "events"  # else aside (a file made before 0010)
        conn.execute("DELETE FROM event_leaves WHERE seq >= ?", (since_seq,))
        cols = ", ".join(journal.COLUMNS)
        rows = f"SELECT {cols} FROM events WHERE seq >= ? ORDER BY seq"
        for row in conn.execute(rows, (since_seq,)).fetchall():
            built = journal.Row._make(row)
            leaf = _tlog.leaf_extras(built, tree)
            if in_events:
                conn.execute(
                    "UPDATE events SET salt = ?, payload_sha256 = ?, tree_hashes = ? WHERE seq = ?",
                    (*leaf, built.seq),
                )
            else:
                conn.execute(_tlog.INSERT_LEAF, (built.seq, *leaf))
        return tree.root()
    finally:
        conn.close()


def copy_file(path: Path, target: Path) -> Path:
    shutil.copy(path, target)
    return target


# --- idempotency: keyed creates, claims and repeats, right and wrong, across journals --------

IDEM_WS: Final = "ws-🦀"
IDEM_AGENT: Final = "agent-数字"
IDEM_CHANNEL: Final = "eng-中文"
IDEM_ROUTE: Final = f"/api/v1/workspaces/{IDEM_WS}/agents/{IDEM_AGENT}/runtime/tasks"
SHARED_KEY: Final = "键🔑-shared"


def _task(number: int, scope: str | None = None) -> dict[str, Any]:
    return {"channel": IDEM_CHANNEL, "number": number, "scope_id": scope or f"tsk_{number}"}


class _Calls:
    """Events of calls in one session; ``call`` writes one call's events in order."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.events: list[Event] = []
        self.count = 0

    def started(self) -> None:
        self.events.append(
            Event(
                session_id=self.session,
                payload=SessionStarted(
                    bridge_version="0.1.0",
                    compat_policy="hint",
                    client_name="claude-code",
                    client_version="2.1.0",
                    workspace_id=IDEM_WS,
                    agent_id=IDEM_AGENT,
                ),
            )
        )

    def ended(self) -> None:
        self.events.append(Event(session_id=self.session, payload=SessionEnded(reason="eof")))

    def open(self, tool: str) -> tuple[str, Any]:
        self.count += 1
        call_id = f"{self.session}.{self.count}"

        def ev(payload: Any) -> Event:
            return Event(
                session_id=self.session,
                call_id=call_id,
                mcp_method_name="tools/call",
                gen_ai_tool_name=tool,
                jsonrpc_request_id=self.count,
                payload=payload,
            )

        return call_id, ev

    def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        body: dict[str, Any] | None = None,
        route: str = "",
        data: dict[str, Any] | None = None,
        error: str | None = None,
        callback: bool = False,
        outcome: bool = True,
        cancelled: bool = False,
    ) -> None:
        _, ev = self.open(tool)
        self.events += self.steps(
            ev, tool, arguments, body, route, data, error, callback, outcome, cancelled
        )

    def steps(
        self,
        ev: Any,
        tool: str,
        arguments: dict[str, Any],
        body: dict[str, Any] | None,
        route: str,
        data: dict[str, Any] | None,
        error: str | None,
        callback: bool,
        outcome: bool,
        cancelled: bool,
    ) -> list[Event]:
        fields = [
            InjectedField(name="workspace_id", source="env", value=IDEM_WS),
            InjectedField(name="agent_id", source="env", value=IDEM_AGENT),
        ]
        if callback:
            fields += [
                InjectedField(name="workflow_run_id", source="_meta", value="run-🚀"),
                InjectedField(name="callback_effect_id", source="_meta", value="cb-流"),
            ]
        events = [ev(CallReceived(arguments=arguments)), ev(ContextInjected(fields=fields))]
        if body is not None:
            events.append(ev(UpstreamRequest(method="POST", route=IDEM_ROUTE + route, body=body)))
        if cancelled:
            return [*events, ev(journal.CallCancelled(reason="client cancelled"))]
        if not outcome:
            return events
        if body is not None:
            status = 409 if error else 200
            events.append(ev(UpstreamResponse(status=status, body=data or {}, duration_ms=1.0)))
        if error:
            events.append(ev(CallError(error_code=error, retryable=False, message="✗ 冲突")))
        else:
            events.append(ev(CallResult(result={"data": data or {}, "meta": {}})))
        return events


def _create(calls: _Calls, key: str, title: str, tasks: list[dict[str, Any]], **how: Any) -> None:
    arguments = {"channel": IDEM_CHANNEL, "tasks": [{"title": title}], "idempotency_key": key}
    body = {
        "channel": IDEM_CHANNEL,
        "tasks": [{"title": title}],
        "idempotencyKey": key,
        "workflowRunId": "run-🚀",
        "callbackEffectId": "cb-流",
    }
    reused = how.pop("reused", False)
    data = {"channel": IDEM_CHANNEL, "tasks": tasks, "reused": reused}
    calls.call("task_create", arguments, body=body, data=data, callback=True, **how)


def _claim(calls: _Calls, claimed: bool, changed: list[int], unchanged: list[int]) -> None:
    arguments = {"channel": IDEM_CHANNEL, "numbers": [3], "claimed": claimed}
    data = {
        "channel": IDEM_CHANNEL,
        "claimed": claimed,
        "changed": changed,
        "unchanged": unchanged,
        "failures": [],
    }
    calls.call("task_set_claim", arguments, body=arguments, route="/set-claim", data=data)


def _update(calls: _Calls, number: int, changed: bool, **how: Any) -> None:
    arguments = {"channel": IDEM_CHANNEL, "number": number, "patch": {"title": "新しい 🎯"}}
    data = {"changed": changed, "task": _task(number)}
    calls.call("task_update", arguments, body=arguments, route="/update", data=data, **how)


def idempotency_events(index: int) -> list[Event]:
    """Journal ``index`` of three (0, 1, 2) sharing keys and tasks: baselines and sound replays,
    conflicts, a conflict not reported, replays allocating numbers or returning other tasks,
    keys outside a callback, claims repeated right and wrong, idempotent and unsafe repeats,
    calls closed out of order, by their session's end and never."""
    calls = _Calls(f"idem-s{index}")
    calls.started()
    # The shared key: created in journal 0, replayed soundly in 1, allocated again in 2.
    first = [_task(1)]
    if index == 0:
        _create(calls, SHARED_KEY, "共有 🦀", first)
    elif index == 1:
        _create(calls, SHARED_KEY, "共有 🦀", first, reused=True)
    else:
        _create(calls, SHARED_KEY, "共有 🦀", [_task(70 + index)])
    _create(calls, SHARED_KEY, "共有 🦀", first, reused=True)
    _create(calls, SHARED_KEY, "другой", [], error="idempotency_conflict")
    if index == 1:
        _create(calls, SHARED_KEY, "другой", [_task(2)])  # another payload honoured
    own = f"k-{index}-🎌"
    _create(calls, own, "自分", [_task(10 + index)])
    _create(calls, own, "自分", [_task(10 + index, "tsk_other")], reused=True)
    # Keys outside a callback: sent upstream, and honoured without a request.
    outside = {"channel": IDEM_CHANNEL, "tasks": [{"title": "外"}], "idempotencyKey": "k-外"}
    calls.call(
        "task_create",
        {"channel": IDEM_CHANNEL, "tasks": [{"title": "外"}], "idempotency_key": "k-外"},
        body=outside,
        data={"tasks": [_task(20)], "reused": False},
    )
    calls.call(
        "task_create",
        {"channel": IDEM_CHANNEL, "tasks": [], "idempotency_key": "  空白🦀\u3000 "},
        data={"tasks": [], "reused": False},
    )
    # Claims of task 3 (shared by the journals): claim, repeat (unchanged), a repeat that
    # changes it, a release, and a claim reported unchanged although it was released.
    _claim(calls, True, [3], [])
    _claim(calls, True, [], [3])
    _claim(calls, True, [3], [])
    _claim(calls, False, [3], [])
    _claim(calls, True, [], [3])
    # Updates of task 4: a change, an idempotent repeat, a repeat that changes it.
    _update(calls, 4, True)
    _update(calls, 4, False)
    _update(calls, 4, True)
    # Task 6: a change, a repeat cancelled in flight (in doubt), a repeat after the failure.
    _update(calls, 6, True)
    _update(calls, 6, False, cancelled=True)
    _update(calls, 6, False)
    # Two repeats of one update interleaved: the second to start ends first.
    _, first_ev = calls.open("task_update")
    _, second_ev = calls.open("task_update")
    body = {"channel": IDEM_CHANNEL, "number": 5, "patch": {"title": "交互 🧵"}}
    early = calls.steps(
        first_ev, "task_update", body, body, "/update", None, None, False, True, False
    )
    late = calls.steps(
        second_ev, "task_update", body, body, "/update", {"changed": True}, None, False, True, False
    )
    calls.events += early[:3] + late + early[3:-1]
    calls.events.append(first_ev(CallResult(result={"data": {"changed": False}, "meta": {}})))
    # Sent and never answered: closed by the session's end, and (another session) by none.
    _update(calls, 8, True, outcome=False)
    calls.ended()
    more = _Calls(f"idem-t{index}")
    more.started()
    _update(more, 9, True)
    _update(more, 9, True, outcome=False)
    return calls.events + more.events


def write_idempotency_fleet(directory: Path) -> list[Path]:
    """Three journals (``idem-0``..``idem-2``) of ``idempotency_events``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(3):
        path = directory / f"idem-{index}.db"
        with journal.open_sync_writer(path, key=KEY, journal_id=f"idem-{index}") as writer:
            writer.append_many(idempotency_events(index))
        paths.append(path)
    return paths
