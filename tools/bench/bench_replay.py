"""Benchmark of ``agentteam-replay`` over a large generated journal, beside a plain sqlite3 scan.

Run: ``python -m tools.bench.bench_replay [--events N] [--quick] [--dir PATH] [--keep FILE]``
(default one million events; ``--quick`` 100,000; ``--keep`` generates the journal into FILE
once and reuses it). The journal is generated in a temporary directory with the
journal's own writer: sessions of calls shaped like the bridge's (received, injected, upstream
request and response, result; errors, rejections, 401 refresh-and-replays, keyed creates and their
replays, claims, lists). Printed: events per second of ``replay.verify`` (hash chain, sequence,
checkpoints, call grammar and invariants, one pass) beside a plain ``sqlite3`` scan recomputing
the same hashes with the documented recipe (PRODUCT's target: at least 0.7x), of
``journal.verify`` (chain only) for reference, and of ``replay.check_idempotency`` and
``replay.audit``, and of ``replay.report`` writing its HTML page (issue 30's target: at most
1.5x the time of ``audit``, the page under 2 MB).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge.testing import upstream_task

KEY = b"bench-replay-key-0123456789abcde"
WORKSPACE, AGENT = "ws_bench", "agt_bench"
ROUTE = f"/api/v1/workspaces/{WORKSPACE}/agents/{AGENT}/runtime/tasks"
CALLS_PER_SESSION = 2_000
T = TypeVar("T")


def _task(number: int, title: str) -> dict[str, Any]:
    return upstream_task(
        channel="eng",
        number=number,
        scopeId=f"tsk_{number:016x}",
        title=title,
        updatedAt="2026-12-02T16:48:24.526760Z",
    )


def _snake(task: dict[str, Any]) -> dict[str, Any]:
    renamed = {"scopeId": "scope_id", "subtaskCount": "subtask_count", "updatedAt": "updated_at"}
    return {renamed.get(k, k): v for k, v in task.items()}


def _call(i: int, session: str) -> list[journal.Event]:
    """The events of the i-th call: a mix like a working agent's."""
    kind = i % 10
    number = i // 10 + 1
    ctx = [
        journal.InjectedField(
            name="workspace_id", source="env:AGENTTEAM_WORKSPACE_ID", value=WORKSPACE
        ),
        journal.InjectedField(name="agent_id", source="env:AGENTTEAM_AGENT_ID", value=AGENT),
        journal.InjectedField(name="bearer_token", source="command:X", value="[redacted]"),
    ]
    tool, route = "task_get", ROUTE + "/get"
    arguments: dict[str, Any] = {}
    body: dict[str, Any] = {}
    answer: dict[str, Any] = {}
    if kind in (0, 1):  # a create (every other one keyed in a callback; the keyed one replayed)
        tool = "task_create"
        arguments = {"channel": "eng", "tasks": [{"title": f"Task {number}"}]}
        body = dict(arguments)
        if kind == 1:
            arguments["idempotency_key"] = f"key-{number}"
            body.update(idempotencyKey=f"key-{number}", workflowRunId="run", callbackEffectId="cb")
            ctx += [
                journal.InjectedField(name="workflow_run_id", source="_meta", value="run"),
                journal.InjectedField(name="callback_effect_id", source="_meta", value="cb"),
            ]
        route = ROUTE
        answer = {
            "channel": "eng",
            "parent": None,
            "tasks": [_task(number, f"Task {number}")],
            "reused": False,
        }
    elif kind in (2, 3, 4):  # lists with a few items
        tool, route = "task_list", ROUTE
        arguments = {"channel": "eng"}
        body = {"channel": "eng", "limit": 20}
        answer = {"channel": "eng", "items": [_task(n, f"Task {n}") for n in range(1, 4)]}
    elif kind == 5:
        tool, route = "task_set_claim", ROUTE + "/set-claim"
        arguments = {"channel": "eng", "numbers": [number], "claimed": True}
        body = arguments
        answer = {
            "channel": "eng",
            "claimed": True,
            "count": 1,
            "changed": [number],
            "unchanged": [],
            "failures": [],
            "tasks": [_task(number, "t")],
        }
    else:
        arguments = {"channel": "eng", "number": number}
        body = arguments
        answer = {"task": _task(number, "t")}
    call_id = f"{session}.{i}"

    def ev(payload: journal.Payload) -> journal.Event:
        return journal.Event(
            session_id=session,
            call_id=call_id,
            mcp_method_name="tools/call",
            gen_ai_tool_name=tool,
            jsonrpc_request_id=i,
            payload=payload,
        )

    events = [ev(journal.CallReceived(arguments=arguments, jsonrpc_request_id=i))]
    if kind == 9:  # a rejection
        events.append(ev(journal.CallRejected(error_code="invalid_arguments", message="bad")))
        return events
    events.append(ev(journal.ContextInjected(fields=ctx)))
    request = journal.UpstreamRequest(
        method="GET" if route == ROUTE and tool == "task_list" else "POST", route=route, body=body
    )
    events.append(ev(request))
    if kind == 8:  # a 401, a refresh and the replay
        events.append(
            ev(
                journal.UpstreamResponse(
                    status=401, body={"error": {"code": "token_expired"}}, duration_ms=1.1
                )
            )
        )
        events.append(
            ev(journal.TokenRefreshed(source="command:X", reason="upstream answered 401"))
        )
        events.append(
            ev(journal.UpstreamRequest(method=request.method, route=route, body=body, attempt=2))
        )
    if kind == 7:  # an upstream error
        events.append(
            ev(
                journal.UpstreamResponse(
                    status=404, body={"error": {"code": "task_not_found"}}, duration_ms=1.4
                )
            )
        )
        events.append(
            ev(
                journal.CallError(
                    error_code="task_not_found",
                    retryable=False,
                    message="No such task.",
                    duration_ms=2.0,
                )
            )
        )
        return events
    events.append(
        ev(
            journal.UpstreamResponse(
                status=200,
                body=answer,
                duration_ms=2.5,
                headers={"content-type": "application/json"},
            )
        )
    )
    data: dict[str, Any] = {
        k: ([_snake(t) for t in v] if k in ("tasks", "items") else v) for k, v in answer.items()
    }
    if "task" in data:
        data["task"] = _snake(answer["task"])
    events.append(ev(journal.CallResult(result={"data": data, "meta": {}}, duration_ms=3.0)))
    return events


def _events(n: int, first_session: int = 0) -> Iterator[journal.Event]:
    produced = 0
    session_index = first_session
    while produced < n:
        session = f"s{session_index:08x}"
        yield journal.Event(
            session_id=session,
            mcp_method_name="initialize",
            payload=journal.SessionStarted(
                bridge_version="0.1.0",
                compat_policy="hint",
                client_name="bench",
                client_version="1",
                workspace_id=WORKSPACE,
                agent_id=AGENT,
                api_url="http://127.0.0.1:1",
            ),
        )
        produced += 1
        for i in range(CALLS_PER_SESSION):
            for event in _call(session_index * CALLS_PER_SESSION + i, session):
                yield event
                produced += 1
        yield journal.Event(session_id=session, payload=journal.SessionEnded(reason="eof"))
        produced += 1
        session_index += 1


def generate(
    path: Path,
    n: int,
    *,
    key: journal.SigningKey | bytes = KEY,
    checkpoint_path: Path | None = None,
    first_session: int = 0,
) -> int:
    """Write about n events (whole sessions); return how many."""
    batch: list[journal.Event] = []
    with journal.open_sync_writer(
        path,
        key=key,
        synchronous_full=False,
        checkpoint_every=50_000,
        checkpoint_path=checkpoint_path,
    ) as writer:
        for event in _events(n, first_session):
            batch.append(event)
            if len(batch) == 5_000:
                writer.append_many(batch, durable=False)
                batch.clear()
        if batch:
            writer.append_many(batch, durable=False)
        head, _ = writer.head
    return head


def plain_scan(path: Path) -> int:
    """A plain sqlite3 scan recomputing every hash with the documented recipe."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    count = 0
    # The canonical columns by name (the cheapest read: not the leaf columns of schema 10).
    for row in conn.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events ORDER BY seq"):
        cols = {k: row[k] for k in row.keys() if k not in ("hash", "payload")}
        cols["payload"] = "\0"
        text = json.dumps(cols, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text = text.replace('"payload":"\\u0000"', '"payload":' + row["payload"], 1)
        assert hashlib.sha256(text.encode()).hexdigest() == row["hash"]
        count += 1
    conn.close()
    return count


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.bench_replay",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="default 1,000,000")
    parser.add_argument("--quick", action="store_true", help="100,000 events")
    parser.add_argument("--dir", type=Path, default=None, help="directory for the temp files")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="FILE",
        help="generate the journal into FILE once and reuse it on later runs",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    n = 100_000 if args.quick else args.events
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = args.keep or Path(tmp) / "journal.db"
        if args.keep is not None and path.exists():
            with journal.open_reader(path) as reader:
                events = reader.head()[0]
            print(f"reusing {path}: {events:,} events")
        else:
            seconds, events = _timed(lambda: generate(path, n))
            print(f"generated {events:,} events in {seconds:.1f} s ({events / seconds:,.0f} ev/s)")
        scan_s, scanned = _timed(lambda: plain_scan(path))
        verify_s, verified = _timed(lambda: replay.verify([path], key=KEY))
        assert verified.ok, verified.findings[:3]
        assert verified.events == scanned == events
        chain_s, chain = _timed(lambda: journal.verify(path, key=KEY))
        assert chain.ok
        idem_s, idem = _timed(lambda: replay.check_idempotency([path]))
        audit_s, audited = _timed(lambda: replay.audit([path]))
        report_s, html_bytes = _timed(lambda: _report(path, Path(tmp) / "report.html"))
    plain = events / scan_s
    rows = [
        ("plain sqlite3 scan, hashes recomputed", plain),
        ("replay verify (chain+grammar+invariants)", events / verify_s),
        ("journal.verify (chain only)", events / chain_s),
        ("replay idempotency", events / idem_s),
        ("replay audit", events / audit_s),
        ("replay report --html (verify+audit+...)", events / report_s),
    ]
    print(f"{'case':<42} {'events/s':>10} {'vs scan':>8}")
    for name, rate in rows:
        print(f"{name:<42} {rate:>10,.0f} {rate / plain:>7.2f}x")
    ratio = (events / verify_s) / plain
    verdict = "PASS" if ratio >= 0.7 else "MISS"
    print(f"target: replay verify >= 0.7x the plain scan: {ratio:.2f}x {verdict}")
    slower = report_s / audit_s
    within = "PASS" if slower <= 1.5 and html_bytes < 2_000_000 else "MISS"
    print(
        f"target: report <= 1.5x audit's time, HTML < 2 MB: {slower:.2f}x, "
        f"{html_bytes / 1e6:.2f} MB {within}"
    )
    print(
        f"calls: {verified.journals[0].calls:,}; keyed scopes: {len(idem.groups):,};"
        f" audit calls: {audited.calls:,}; peak RSS {_rss_mb():.0f} MB (whole run)"
    )


def _report(path: Path, html: Path) -> int:
    """``agentteam-replay report --html``: gather and write the page; its size in bytes."""
    from agentteam_task_bridge.replay._report_html import write_html

    # the same trust as verify(key=KEY): the writer's seed stands for its public key
    trusted = list(journal.trust_of(KEY).verifiers.values())
    return write_html(replay.report([path], trusted=trusted), html)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
