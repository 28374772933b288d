"""`replay.export_otlp` / `export_jsonl`: spans by the MCP conventions, and every raw event."""

from __future__ import annotations

import io
import json
from typing import Any

import journal
import replay

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
    failed = [s for s in servers if attributes(s).get("error.type") == "task_not_found"]
    assert len(failed) == 1 and failed[0]["status"]["code"] == 2
    refused = [c for c in clients if attributes(c).get("http.response.status_code") == "401"]
    assert len(refused) == 1 and attributes(refused[0])["error.type"] == "401"
    assert attributes(refused[0])["url.path"].endswith("/runtime/tasks")


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
    assert lines[0]["kind"] == "session_started"
    assert lines[0]["payload"]["client_name"] == "agentteam-tests"
    assert "payload_json" not in lines[0] and lines[0]["hash"]
