"""Live OpenTelemetry: spans of a real session reach a real OTLP/HTTP receiver on loopback,
linked to the client's `traceparent`; the runtime receives trace context; the journal names the
trace. Off, nothing of the OpenTelemetry SDK is imported."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import open_bridge
from .replay_helpers import replay_cli

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
META = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=1"}


class Receiver:
    """An OTLP/HTTP receiver: decodes each protobuf request by its path, keeps the spans
    (`/v1/traces`) and the metrics export requests (`/v1/metrics`, raw bodies too)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.bodies: list[bytes] = []
        self.requests = 0
        self.arrived = threading.Condition()
        spans, lock = self.spans, self.arrived
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest()
                    metrics.ParseFromString(body)
                    with lock:
                        receiver.metrics.append(metrics)
                        receiver.bodies.append(body)
                        lock.notify_all()
                    self._answer(ExportMetricsServiceResponse().SerializeToString())
                    return
                assert self.path == "/v1/traces", self.path
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock:
                    receiver.requests += 1
                    receiver.bodies.append(body)
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            spans.extend(scope.spans)
                    lock.notify_all()
                self._answer(ExportTraceServiceResponse().SerializeToString())

            def _answer(self, answer: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, count: int, name_prefix: str, timeout: float = 30.0) -> bool:
        """Until `count` spans named so have arrived; the timeout only bounds a hang."""
        with self.arrived:
            return self.arrived.wait_for(
                lambda: sum(1 for s in self.spans if s.name.startswith(name_prefix)) >= count,
                timeout,
            )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


async def test_a_session_s_spans_follow_the_client_s_trace_to_the_runtime(
    file_runtime: Runtime, receiver: Receiver, tmp_path: Path
) -> None:
    env = {
        **file_runtime.bridge_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    path = tmp_path / "journal.db"
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "traced"}]}, META)
        await bridge.ok("task_get", {"channel": "general", "number": 1}, META)
        await bridge.fails("task_get", {"channel": "general", "number": 99}, code="task_not_found")
    # The bridge flushes its batch on exit.
    assert await trio.to_thread.run_sync(receiver.wait_for, 3, "tools/call")
    server = [s for s in receiver.spans if s.name.startswith("tools/call")]
    client = [s for s in receiver.spans if s.kind == 3]  # SPAN_KIND_CLIENT
    traced = [s for s in server if s.trace_id.hex() == TRACE_ID]
    assert [s.name for s in traced] == ["tools/call task_create", "tools/call task_get"]
    assert all(s.parent_span_id.hex() == PARENT_ID for s in traced)
    first = attributes(traced[0])
    assert first["mcp.method.name"] == "tools/call"
    assert first["mcp.protocol.version"] and first["gen_ai.tool.name"] == "task_create"
    assert first["gen_ai.operation.name"] == "execute_tool"
    assert first["mcp.session.id"].startswith("s") and first["network.transport"] == "pipe"
    [failed] = [s for s in server if s.trace_id.hex() != TRACE_ID]
    assert attributes(failed)["error.type"] == "tool_error"
    # one CLIENT span per upstream request, the child of its call's SERVER span
    assert len(client) == 3
    parents = {s.span_id for s in server}
    assert all(s.parent_span_id in parents for s in client)
    upstream = attributes(client[0])
    assert upstream["http.request.method"] == "POST"
    assert upstream["url.full"].startswith(file_runtime.url + "/api/v1/workspaces/")
    assert upstream["server.address"] == "127.0.0.1"
    assert upstream["server.port"] == int(file_runtime.url.rsplit(":", 1)[1])
    assert 200 <= upstream["http.response.status_code"] < 300 and "error.type" not in upstream
    assert attributes(client[2])["error.type"] == "404"
    # the runtime received W3C trace context on every request, naming the CLIENT span
    seen = [tp for tp in file_runtime.traceparents if tp]
    assert len(seen) == 3
    client_ids = {s.span_id.hex() for s in client}
    assert {tp.split("-")[2] for tp in seen} == client_ids
    assert [tp.split("-")[1] for tp in seen][:2] == [TRACE_ID, TRACE_ID]
    # and the journal names each call's trace and SERVER span
    with journal.open_reader(path) as reader:
        received = [r.payload for r in reader.events(kind="call_received")]
    assert [(p.trace_id, p.span_id) for p in received] == [
        (s.trace_id.hex(), s.span_id.hex()) for s in server
    ]
    with journal.open_reader(path) as reader:
        first_call = next(reader.events(kind="call_received")).call_id
    shown = replay_cli("show", path, str(first_call))
    assert f"trace {TRACE_ID}, span {traced[0].span_id.hex()}" in shown.stdout


async def test_off_nothing_of_the_sdk_is_imported_and_the_client_trace_passes_through(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    env = {**file_runtime.bridge_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    path = tmp_path / "journal.db"
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"}, META)
        imported = bridge.stderr()
    assert "import time:" in imported  # the probe itself works
    assert "opentelemetry.sdk" not in imported and "opentelemetry.exporter" not in imported
    # The start-up probe's one request carries none; the call carries the client's.
    assert list(file_runtime.traceparents) == [None, META["traceparent"]]
    with journal.open_reader(path) as reader:
        [received] = [r.payload for r in reader.events(kind="call_received")]
    assert (received.trace_id, received.span_id) == (TRACE_ID, PARENT_ID)


async def test_otel_environment_without_the_extra_is_one_warning_and_no_spans(
    file_runtime: Runtime, receiver: Receiver, tmp_path: Path
) -> None:
    # A path entry that shadows the SDK with a package that cannot be imported.
    shadow = tmp_path / "shadow" / "opentelemetry" / "sdk"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {
        **file_runtime.bridge_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "PYTHONPATH": str(tmp_path / "shadow"),
    }
    async with open_bridge(env, tmp_path / "journal.db", runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"})
        stderr = bridge.stderr()
    assert "the [otel] extra is not installed" in stderr
    assert receiver.requests == 0 and not receiver.metrics
