"""`replay.export_otlp` / `export_jsonl`: spans by the MCP conventions, and every raw event."""

from __future__ import annotations

import io
import json
from typing import Any

from agentteam_task_bridge import journal, replay

from .replay_helpers import Built, everyday_journal

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def test_one_server_span_per_call_with_client_children(everyday_journal: Built) -> None:
    out = io.StringIO()
    result = replay.export_otlp([everyday_journal.path], out)
    document = json.loads(out.getvalue())
    [resource] = document["resourceSpans"]
    assert attributes(resource["resource"])["service.name"] == "agentteam-task-bridge"
    spans = resource["scopeSpans"][0]["spans"]
    assert len(spans) == result.spans
    servers = [s for s in spans if s["kind"] == 2]
    clients = [s for s in spans if s["kind"] == 3]
    assert len(servers) == result.calls == 18
    assert len(clients) == 16  # one per upstream request; the 401 and its replay are two
    by_id = {s["spanId"]: s for s in servers}
    for child in clients:
        parent = by_id[child["parentSpanId"]]
        assert child["traceId"] == parent["traceId"]
        assert int(parent["startTimeUnixNano"]) <= int(child["startTimeUnixNano"])
        assert int(child["endTimeUnixNano"]) >= int(child["startTimeUnixNano"])
    create = attributes(servers[0])
    assert servers[0]["name"] == "tools/call task_create"
    assert create["mcp.method.name"] == "tools/call"
    assert create["gen_ai.tool.name"] == "task_create"
    assert create["gen_ai.operation.name"] == "execute_tool"
    assert create["jsonrpc.request.id"]
    assert create["mcp.protocol.version"] and create["mcp.session.id"]
    failed = [s for s in servers if attributes(s).get("agentteam.error.code") == "task_not_found"]
    assert len(failed) == 1 and failed[0]["status"]["code"] == 2
    assert attributes(failed[0])["error.type"] == "tool_error"  # the MCP conventions' value
    refused = [c for c in clients if attributes(c).get("http.response.status_code") == "401"]
    assert len(refused) == 1 and attributes(refused[0])["error.type"] == "401"
    upstream = attributes(refused[0])
    assert upstream["url.path"].endswith("/runtime/tasks")
    assert upstream["url.template"].endswith("/agents/{agentId}/runtime/tasks")
    assert upstream["url.full"].startswith("http://127.0.0.1:")
    assert upstream["url.full"].endswith(upstream["url.path"])
    assert upstream["server.address"] == "127.0.0.1" and int(upstream["server.port"]) > 0
    assert refused[0]["name"] == "GET " + upstream["url.template"]


def test_the_export_is_reproducible(everyday_journal: Built) -> None:
    first, second = io.StringIO(), io.StringIO()
    replay.export_otlp([everyday_journal.path], first)
    replay.export_otlp([everyday_journal.path], second)
    assert first.getvalue() == second.getvalue()


def test_jsonl_holds_every_event_with_its_payload_decoded(everyday_journal: Built) -> None:
    out = io.StringIO()
    result = replay.export_jsonl([everyday_journal.path], out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    with journal.open_reader(everyday_journal.path) as reader:
        assert len(lines) == result.events == reader.count()
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert [line["kind"] for line in lines[:2]] == ["session_started", "session_handshake"]
    assert lines[1]["payload"]["client_name"] == "agentteam-tests"
    assert "payload_json" not in lines[0] and lines[0]["hash"]


class Collector:
    """An OTLP/HTTP JSON receiver on loopback that answers each request from a script."""

    def __init__(self, answers: list[int]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.answers = answers
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                status = collector.answers.pop(0) if collector.answers else 200
                if status == 200:
                    collector.bodies.append(json.loads(body))
                    collector.paths.append(self.path)
                self.send_response(status)
                self.send_header("content-length", "2")
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_push_sends_bounded_batches_and_retries_what_the_collector_asks(
    everyday_journal: Built,
) -> None:
    file = io.StringIO()
    whole = replay.export_otlp([everyday_journal.path], file)
    expected = json.loads(file.getvalue())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    collector = Collector([503, 429])
    slept: list[float] = []
    try:
        pushed = replay.push_otlp(
            [everyday_journal.path], collector.url, batch_spans=10, sleep=slept.append
        )
    finally:
        collector.close()
    assert (pushed.spans, pushed.calls) == (whole.spans, whole.calls)
    assert pushed.requests == -(-whole.spans // 10) == len(collector.bodies)
    assert pushed.retries == 2 and slept == [0.5, 0.0]  # backoff, then Retry-After: 0
    assert set(collector.paths) == {"/v1/traces"}
    received = [
        span
        for body in collector.bodies
        for span in body["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ]
    assert received == expected and all(
        len(b["resourceSpans"][0]["scopeSpans"][0]["spans"]) <= 10 for b in collector.bodies
    )


def test_push_stops_on_a_refusal_and_the_cli_says_so_in_one_line(everyday_journal: Built) -> None:
    from .replay_helpers import replay_cli

    collector = Collector([400])
    try:
        done = replay_cli("export", everyday_journal.path, "--otlp-endpoint", collector.url)
    finally:
        collector.close()
    assert done.returncode == 2 and "refused a batch: HTTP 400" in done.stderr
    assert done.stderr.count("\n") == 1 and collector.bodies == []
    collector = Collector([])
    try:
        done = replay_cli("export", everyday_journal.path, "--otlp-endpoint", collector.url)
    finally:
        collector.close()
    assert done.returncode == 0 and "pushed" in done.stdout and len(collector.bodies) == 1
