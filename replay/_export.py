"""``export``: OpenTelemetry spans (OTLP JSON, to a file or pushed to a collector) and raw
events (JSONL).

Spans follow the OpenTelemetry MCP and HTTP semantic conventions, as the live spans of ``serve``
do: one SERVER span per call, named ``tools/call {gen_ai.tool.name}``, with ``mcp.method.name``,
``mcp.protocol.version``, ``mcp.session.id``, ``gen_ai.operation.name = execute_tool``,
``gen_ai.tool.name``, ``jsonrpc.request.id``, ``network.transport = pipe`` and, on a tool error,
``error.type = tool_error`` (the bridge's code in ``agentteam.error.code``); one CLIENT child span
per upstream request, named ``{method} {url.template}``, with ``http.request.method``,
``url.full``, ``url.template``, ``server.address``, ``server.port``,
``http.response.status_code`` and ``error.type`` (the status, 400 and above). Trace and span ids
are derived from the journal and call ids, so an export is reproducible; a call the live bridge
traced carries a span link to its live span. The OTLP file is one ``ExportTraceServiceRequest``
in the protobuf JSON mapping, written span by span; ``push_otlp`` sends the same spans to an
OTLP/HTTP endpoint in bounded batches, retrying what a collector asks to be retried.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlsplit

import msgspec

from agentteam_task_bridge.journal import (
    TASKS_ROUTE_TEMPLATE,
    CallReceived,
    Record,
    UpstreamRequest,
    UpstreamResponse,
)

from ._source import Progress, open_journals
from ._story import CallStory, iter_stories, parse_wall
from ._terminal import json_shown

__all__ = ["ExportResult", "export_jsonl", "export_otlp", "push_otlp"]

SCOPE_NAME: Final = "agentteam-replay"
SERVICE_NAME: Final = "agentteam-task-bridge"
_SPAN_KIND_SERVER: Final = 2
_SPAN_KIND_CLIENT: Final = 3
_STATUS_OK: Final = 1
_STATUS_ERROR: Final = 2
BATCH_SPANS: Final = 512
BATCH_BYTES: Final = 4 << 20
RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
MAX_ATTEMPTS: Final = 5
_encode = msgspec.json.Encoder().encode


class ExportResult(msgspec.Struct, frozen=True, kw_only=True):
    format: str
    output: str
    events: int = 0
    spans: int = 0
    calls: int = 0
    requests: int = 0  # OTLP/HTTP requests sent by a push
    retries: int = 0


class PushError(Exception):
    """A collector refused a batch, or stayed unreachable through every retry."""


def export_jsonl(
    paths: Sequence[str | Path], out: IO[str], *, progress: Progress | None = None
) -> ExportResult:
    """Every event as one JSON object per line: its columns, the payload decoded."""
    events = 0
    with open_journals(paths) as journals:
        for record in journals.records(progress):
            row = msgspec.to_builtins(record)
            row.pop("payload_json", None)
            out.write(json_shown(_encode(row).decode()))
            out.write("\n")
            events += 1
    return ExportResult(format="jsonl", output=getattr(out, "name", "-"), events=events)


def export_otlp(
    paths: Sequence[str | Path], out: IO[str], *, progress: Progress | None = None
) -> ExportResult:
    """One span per call (and a child per upstream request), as an OTLP JSON trace request."""
    spans = calls = 0
    opening, closing = _request_frame()
    out.write(opening)
    for count, span in _spans(paths, progress):
        out.write(("," if spans else "") + "\n" + json_shown(span.decode()))
        spans, calls = spans + 1, count
    out.write("\n" + closing + "\n")
    return ExportResult(format="otlp", output=getattr(out, "name", "-"), spans=spans, calls=calls)


def push_otlp(
    paths: Sequence[str | Path],
    endpoint: str,
    *,
    progress: Progress | None = None,
    batch_spans: int = BATCH_SPANS,
    batch_bytes: int = BATCH_BYTES,
    timeout_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> ExportResult:
    """The spans of ``export_otlp``, POSTed to an OTLP/HTTP endpoint (``.../v1/traces``; the
    path is added to a bare collector URL) as JSON requests of at most ``batch_spans`` spans and
    about ``batch_bytes`` bytes. 429, 502, 503, 504 and connection failures are retried with
    exponential backoff (honouring ``Retry-After``), up to MAX_ATTEMPTS a batch; any other
    refusal stops the push with :class:`PushError`. Memory stays bounded by one batch."""
    import httpx

    url = endpoint if urlsplit(endpoint).path.rstrip("/") else endpoint.rstrip("/") + "/v1/traces"
    opening, closing = _request_frame()
    requests = retries = spans = calls = 0
    batch: list[bytes] = []
    size = 0
    with httpx.Client(timeout=timeout_seconds, trust_env=True) as client:

        def send() -> None:
            nonlocal requests, retries, batch, size
            body = (opening + ",".join(b.decode() for b in batch) + closing).encode()
            for attempt in range(1, MAX_ATTEMPTS + 1):
                try:
                    answer = client.post(
                        url, content=body, headers={"content-type": "application/json"}
                    )
                except httpx.TransportError as exc:
                    failure = f"{type(exc).__name__}"
                    delay = 0.5 * 2.0 ** (attempt - 1)
                else:
                    if answer.status_code < 300:
                        requests += 1
                        batch, size = [], 0
                        return
                    failure = f"HTTP {answer.status_code}"
                    if answer.status_code not in RETRY_STATUSES:
                        raise PushError(f"{_safe(url)} refused a batch: {failure}")
                    delay = _retry_after(answer.headers.get("retry-after"), attempt)
                if attempt == MAX_ATTEMPTS:
                    raise PushError(f"{_safe(url)}: {failure} after {attempt} attempts")
                retries += 1
                sleep(delay)

        for count, span in _spans(paths, progress):
            if batch and (len(batch) >= batch_spans or size + len(span) > batch_bytes):
                send()
            batch.append(span)
            size += len(span)
            spans, calls = spans + 1, count
        if batch:
            send()
    return ExportResult(
        format="otlp",
        output=_safe(url),
        spans=spans,
        calls=calls,
        requests=requests,
        retries=retries,
    )


def _request_frame() -> tuple[str, str]:
    """The ExportTraceServiceRequest around the spans: (text before them, text after them)."""
    resource = {"attributes": [_attr("service.name", SERVICE_NAME)]}
    head = {"resource": resource, "scopeSpans": [{"scope": {"name": SCOPE_NAME}, "spans": []}]}
    opening, _, closing = _encode({"resourceSpans": [head]}).decode().rpartition('"spans":[]')
    return opening + '"spans":[', "]" + closing


def _spans(paths: Sequence[str | Path], progress: Progress | None) -> Iterator[tuple[int, bytes]]:
    """(calls so far, one encoded span) for every span of every call, streamed."""
    calls = 0
    with open_journals(paths) as journals:
        for story in iter_stories(journals.records(progress)):
            calls += 1
            for span in call_spans(story):
                yield calls, _encode(span)


def _retry_after(value: str | None, attempt: int) -> float:
    try:
        return min(60.0, max(0.0, float(value))) if value else 0.5 * 2.0 ** (attempt - 1)
    except ValueError:
        return 0.5 * 2.0 ** (attempt - 1)


def _safe(url: str) -> str:
    """A URL as printed: any userinfo replaced."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc="[REDACTED]@" + host).geturl()


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
    session = story.session
    if session is not None and session.protocol_version:
        attributes.append(_attr("mcp.protocol.version", session.protocol_version))
    code = story.error_code
    status: dict[str, Any] = {"code": _STATUS_OK}
    if code is not None:
        # A tool error is `tool_error` in the MCP conventions; the bridge's code is kept beside.
        attributes.append(_attr("error.type", "tool_error"))
        attributes.append(_attr("agentteam.error.code", code))
        status = {"code": _STATUS_ERROR, "message": code}
    elif story.status in ("in_doubt", "incomplete", "cancelled"):
        attributes.append(_attr("error.type", story.status))
        status = {"code": _STATUS_ERROR, "message": story.in_doubt or story.status}
    server: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": f"{first.mcp_method_name or 'tools/call'} {tool}",
        "kind": _SPAN_KIND_SERVER,
        "startTimeUnixNano": str(_ns(first)),
        "endTimeUnixNano": str(_ns(last)),
        "attributes": attributes,
        "status": status,
    }
    received = first.payload
    if isinstance(received, CallReceived) and received.trace_id and received.span_id:
        server["links"] = [{"traceId": received.trace_id, "spanId": received.span_id}]
    spans = [server]
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
    template = TASKS_ROUTE_TEMPLATE + req.route.partition("/runtime/tasks")[2]
    attributes = [
        _attr("http.request.method", req.method),
        _attr("url.path", req.route),
        _attr("url.template", template),
        _attr("agentteam.upstream.attempt", req.attempt),
    ]
    api = urlsplit(story.session.api_url) if story.session and story.session.api_url else None
    if api is not None and api.hostname:
        host = f"[{api.hostname}]" if ":" in api.hostname else api.hostname
        port = api.port or (443 if api.scheme == "https" else 80)
        attributes += [
            _attr("url.full", f"{api.scheme}://{host}:{port}{req.route}"),
            _attr("server.address", api.hostname),
            _attr("server.port", port),
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
        "name": f"{req.method} {template}",
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
