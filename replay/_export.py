"""``export``: OpenTelemetry spans (OTLP JSON) and raw events (JSONL), streamed to a file.

Spans follow the OpenTelemetry MCP semantic conventions: one SERVER span per call, named
``tools/call {gen_ai.tool.name}``, with ``mcp.method.name``, ``mcp.session.id``,
``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``jsonrpc.request.id``,
``network.transport = pipe`` and ``error.type`` (the error code) on failure; one CLIENT child span
per upstream request, named after its HTTP method, with ``http.request.method``, ``url.path``,
``http.response.status_code`` and ``error.type`` (the status, 400 and above). Trace and span ids
are derived from the journal and call ids, so an export is reproducible. The OTLP file is one
``ExportTraceServiceRequest`` in the protobuf JSON mapping, written span by span.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final

import msgspec

from journal import Record, UpstreamRequest, UpstreamResponse

from ._source import Progress, open_journals
from ._story import CallStory, iter_stories, parse_wall

__all__ = ["ExportResult", "export_jsonl", "export_otlp"]

SCOPE_NAME: Final = "agentteam-replay"
SERVICE_NAME: Final = "agentteam-task-bridge"
_SPAN_KIND_SERVER: Final = 2
_SPAN_KIND_CLIENT: Final = 3
_STATUS_OK: Final = 1
_STATUS_ERROR: Final = 2
_encode = msgspec.json.Encoder().encode


class ExportResult(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    output: str
    events: int = 0
    spans: int = 0
    calls: int = 0


def export_jsonl(
    paths: Sequence[str | Path], out: IO[str], *, progress: Progress | None = None
) -> ExportResult:
    """Every event as one JSON object per line: its columns, the payload decoded."""
    events = 0
    with open_journals(paths) as journals:
        for record in journals.records(progress):
            row = msgspec.to_builtins(record)
            row.pop("payload_json", None)
            out.write(_encode(row).decode())
            out.write("\n")
            events += 1
    return ExportResult(format="jsonl", output=getattr(out, "name", "-"), events=events)


def export_otlp(
    paths: Sequence[str | Path], out: IO[str], *, progress: Progress | None = None
) -> ExportResult:
    """One span per call (and a child per upstream request), as an OTLP JSON trace request."""
    spans = calls = 0
    resource = {"attributes": [_attr("service.name", SERVICE_NAME)]}
    head = {"resource": resource, "scopeSpans": [{"scope": {"name": SCOPE_NAME}, "spans": []}]}
    opening, _, closing = _encode({"resourceSpans": [head]}).decode().rpartition('"spans":[]')
    out.write(opening + '"spans":[')
    with open_journals(paths) as journals:
        for story in iter_stories(journals.records(progress)):
            calls += 1
            for span in call_spans(story):
                out.write(("," if spans else "") + "\n" + _encode(span).decode())
                spans += 1
    out.write("\n]" + closing + "\n")
    return ExportResult(format="otlp", output=getattr(out, "name", "-"), spans=spans, calls=calls)


def call_spans(story: CallStory) -> list[dict[str, Any]]:
    """The SERVER span of one call and the CLIENT spans of its upstream requests."""
    trace_id = _hex(f"{story.journal_id}/{story.call_id}", 32)
    span_id = _hex(f"{story.journal_id}/{story.call_id}/call", 16)
    first, last = story.records[0], story.records[-1]
    tool = story.tool or "unknown"
    attributes = [
        _attr("mcp.method.name", first.mcp_method_name or "tools/call"),
        _attr("mcp.session.id", story.session_id),
        _attr("gen_ai.operation.name", "execute_tool"),
        _attr("gen_ai.tool.name", tool),
        _attr("network.transport", "pipe"),
        _attr("agentteam.journal.id", story.journal_id),
        _attr("agentteam.call.id", story.call_id),
        _attr("agentteam.call.status", story.status),
    ]
    if first.jsonrpc_request_id is not None:
        attributes.append(_attr("jsonrpc.request.id", first.jsonrpc_request_id))
    code = story.error_code
    status: dict[str, Any] = {"code": _STATUS_OK}
    if code is not None:
        attributes.append(_attr("error.type", code))
        status = {"code": _STATUS_ERROR, "message": code}
    elif story.status in ("in_doubt", "incomplete", "cancelled"):
        attributes.append(_attr("error.type", story.status))
        status = {"code": _STATUS_ERROR, "message": story.in_doubt or story.status}
    spans = [
        {
            "traceId": trace_id,
            "spanId": span_id,
            "name": f"{first.mcp_method_name or 'tools/call'} {tool}",
            "kind": _SPAN_KIND_SERVER,
            "startTimeUnixNano": str(_ns(first)),
            "endTimeUnixNano": str(_ns(last)),
            "attributes": attributes,
            "status": status,
        }
    ]
    pending: tuple[Record, UpstreamRequest] | None = None
    for record in story.records:
        p = record.payload
        if isinstance(p, UpstreamRequest):
            if pending is not None:
                spans.append(_client_span(trace_id, span_id, story, pending, None))
            pending = (record, p)
        elif isinstance(p, UpstreamResponse) and pending is not None:
            spans.append(_client_span(trace_id, span_id, story, pending, (record, p)))
            pending = None
    if pending is not None:
        spans.append(_client_span(trace_id, span_id, story, pending, None))
    return spans


def _client_span(
    trace_id: str,
    parent: str,
    story: CallStory,
    sent: tuple[Record, UpstreamRequest],
    answer: tuple[Record, UpstreamResponse] | None,
) -> dict[str, Any]:
    record, req = sent
    start = _ns(record)
    attributes = [
        _attr("http.request.method", req.method),
        _attr("url.path", req.route),
        _attr("agentteam.upstream.attempt", req.attempt),
    ]
    status: dict[str, Any] = {"code": _STATUS_OK}
    end = _ns(story.records[-1])
    if answer is None:
        attributes.append(_attr("error.type", "no_response"))
        status = {"code": _STATUS_ERROR, "message": "no response recorded"}
    else:
        response = answer[1]
        end = _ns(answer[0])
        if response.duration_ms is not None:
            end = start + int(response.duration_ms * 1e6)
        attributes.append(_attr("http.response.status_code", response.status))
        if response.status >= 400:
            attributes.append(_attr("error.type", str(response.status)))
            status = {"code": _STATUS_ERROR}
    return {
        "traceId": trace_id,
        "spanId": _hex(f"{story.journal_id}/{story.call_id}/{record.seq}", 16),
        "parentSpanId": parent,
        "name": req.method,
        "kind": _SPAN_KIND_CLIENT,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attributes,
        "status": status,
    }


def _attr(key: str, value: str | int | bool | float) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _hex(text: str, digits: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def _ns(record: Record) -> int:
    moment = parse_wall(record.ts_wall)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
