"""Live OpenTelemetry metrics from the running bridge, free when off.

On only when both hold: the ``[otel]`` extra is installed and the standard environment asks for
metrics (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` set, or
``OTEL_METRICS_EXPORTER`` other than ``none``; ``OTEL_SDK_DISABLED=true`` wins). Exporters as the
SDK documents them: ``OTEL_METRICS_EXPORTER`` is ``otlp`` (the default: OTLP/HTTP ``/v1/metrics``,
or gRPC when ``OTEL_EXPORTER_OTLP_(METRICS_)PROTOCOL=grpc`` and its exporter is installed),
``console`` (JSON on stderr, never stdout: stdout is the MCP protocol), both, or ``none``; the
export interval is ``OTEL_METRIC_EXPORT_INTERVAL`` (60 s by default), and what is left is exported
once at the session's end, after the journal is closed, within the lifecycle's deadline.

What is measured (the MCP and GenAI semantic conventions where they name it):

* ``mcp.server.operation.duration`` (histogram, seconds, the conventions' buckets): each
  ``tools/call`` from its arrival to its one outcome, with ``mcp.method.name``,
  ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``network.transport = pipe``,
  and on a failure ``error.type`` (``tool_error``, as the spans say, or ``cancelled``) and
  ``agentteam.error.code`` (the tool error's code: ``task_not_found``, ``upstream_timeout``...);
* ``agentteam.bridge.calls`` (counter): the same calls with the same attributes, plus
  ``agentteam.call.outcome`` (``result``, ``error``, ``rejected``, ``cancelled``);
* the journal's health, read from the writer's counters when the reader collects (nothing on the
  call path): ``agentteam.journal.events`` (counter, events appended),
  ``agentteam.journal.queue.depth`` (gauge, appended and neither committed nor lost) and
  ``agentteam.journal.degraded.duration`` (counter, seconds spent degraded: from a failed write
  until its ``journal_gap`` is committed).

Invariants: with metrics off nothing of the SDK is imported and a call pays one ``is None`` test;
on, a call pays one histogram record (the SDK's) and one dict increment (the calls counter, read
when the reader collects), with attributes made once per (tool, outcome, code). Every attribute
value comes from a closed set (the registry's tool names, the error codes, fixed words): a tool
name the bridge does not serve is ``_OTHER``, so nothing a model or an upstream wrote, no secret
and no hidden context (workspace, agent, token) can be exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from ._compat import TOOL_MIGRATIONS
from ._registry import TOOLS
from ._telemetry import SCOPE, Signal, exporter_problem, resource_attributes

log = logging.getLogger("agentteam.bridge.telemetry")

DURATION: Final = "mcp.server.operation.duration"
CALLS: Final = "agentteam.bridge.calls"
JOURNAL_EVENTS: Final = "agentteam.journal.events"
JOURNAL_QUEUE: Final = "agentteam.journal.queue.depth"
JOURNAL_DEGRADED: Final = "agentteam.journal.degraded.duration"
# The MCP semantic conventions' advice for mcp.server.operation.duration (seconds).
BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
OTHER_TOOL: Final = "_OTHER"
_KNOWN_TOOLS: Final = frozenset(TOOLS) | frozenset(TOOL_MIGRATIONS)
_OUTCOMES: Final = {
    "call_result": "result",
    "call_error": "error",
    "call_rejected": "rejected",
    "call_cancelled": "cancelled",
}
METRICS: Final = Signal(
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    {
        "http/protobuf": "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "grpc": "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    },
    "OTLPMetricExporter",
)

# (events appended, committed, lost, seconds degraded): the journal writer's counters.
JournalHealth = Callable[[], tuple[int, int, int, float]]


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the standard OpenTelemetry environment asks for metrics."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if not METRICS.exporters(env):
        return False
    return bool(
        env.get("OTEL_METRICS_EXPORTER", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    )


def check(env: Mapping[str, str]) -> str | None:
    """Why the metrics settings cannot be honoured (one line for the start-up error), or None."""
    if not wanted(env):
        return None
    return exporter_problem(
        ("OTEL_METRICS_EXPORTER", env.get("OTEL_METRICS_EXPORTER"), METRICS.exporters(env)),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", METRICS.protocol(env)),
        METRICS.modules,
    )


class Metrics:
    """The live meter provider and the instruments the call flow records into."""

    def __init__(self, provider: Any, journal: JournalHealth) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        self._provider = provider
        meter = provider.get_meter(SCOPE)
        self._duration = meter.create_histogram(
            DURATION,
            unit="s",
            description="MCP request duration as observed on the receiver, from the time it was "
            "received until the result is sent",
            explicit_bucket_boundaries_advisory=list(BUCKETS),
        )
        self._attributes: dict[tuple[str, str, str | None], dict[str, str]] = {}
        # The calls counter is counted here, a dict entry per (tool, outcome, code), and read
        # when the reader collects: an SDK counter add would cost as much as the record.
        self._counts: dict[tuple[str, str, str | None], int] = {}
        attributes_of = self._attributes
        counts = self._counts

        def calls(options: CallbackOptions) -> list[Observation]:
            return [Observation(n, attributes_of[key]) for key, n in list(counts.items())]

        def events(options: CallbackOptions) -> list[Observation]:
            return [Observation(journal()[0])]

        def queue(options: CallbackOptions) -> list[Observation]:
            appended, committed, lost, _ = journal()
            return [Observation(max(0, appended - committed - lost))]

        reported = [0.0]  # a cumulative counter never goes back (a spell closing mid-read)

        def degraded(options: CallbackOptions) -> list[Observation]:
            reported[0] = max(reported[0], journal()[3])
            return [Observation(reported[0])]

        meter.create_observable_counter(
            CALLS, [calls], unit="{call}", description="Tool calls by tool, outcome and error code"
        )
        meter.create_observable_counter(
            JOURNAL_EVENTS,
            [events],
            unit="{event}",
            description="Events appended to the journal by this session's writer",
        )
        meter.create_observable_gauge(
            JOURNAL_QUEUE,
            [queue],
            unit="{event}",
            description="Events appended to the journal and not yet committed (nor lost)",
        )
        meter.create_observable_counter(
            JOURNAL_DEGRADED,
            [degraded],
            unit="s",
            description="Time the journal spent degraded: from a failed write until its "
            "journal_gap event is committed",
        )

    def call(self, tool: str, kind: str, code: str | None, started: float) -> None:
        """One tool call's outcome (`kind`: the journal event's kind), `started` on the
        `time.perf_counter` clock. Never raises: metrics must not cost a call its answer."""
        key = (tool, kind, code)
        attributes = self._attributes.get(key)
        try:
            if attributes is None:
                attributes = self._attributes[key] = _attributes(tool, kind, code)
            self._duration.record(time.perf_counter() - started, attributes)
            self._counts[key] = self._counts.get(key, 0) + 1
        except Exception:
            log.warning("recording a call's metrics failed", exc_info=True)

    def shutdown(self) -> None:
        """Export what is left and stop (blocking: run it in a thread, bounded by the caller)."""
        try:
            self._provider.shutdown()
        except Exception:  # telemetry must never fail a session's end
            log.warning("OpenTelemetry metrics shutdown failed", exc_info=True)


def _attributes(tool: str, kind: str, code: str | None) -> dict[str, str]:
    """A call's attributes, every value from a closed set."""
    outcome = _OUTCOMES.get(kind, "error")
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool if tool in _KNOWN_TOOLS else OTHER_TOOL,
        "network.transport": "pipe",
        "agentteam.call.outcome": outcome,
    }
    if outcome == "cancelled":
        attributes["error.type"] = "cancelled"
    elif outcome != "result":
        attributes["error.type"] = "tool_error"
    if code is not None and outcome != "result":
        attributes["agentteam.error.code"] = code
    return attributes


def start(env: Mapping[str, str], version: str, journal: JournalHealth) -> Metrics | None:
    """Live metrics when the environment asks for them and the extra is installed, else None."""
    if not wanted(env):
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import Resource

        exporters = METRICS.open_exporters(env, ConsoleMetricExporter)
    except ImportError:
        log.warning(
            "OTEL_* asks for metrics but the [otel] extra is not installed "
            "(pip install 'agentteam-task-bridge[otel]'); metrics stay off"
        )
        return None
    attributes = resource_attributes(env, version)
    # The reader's interval comes from OTEL_METRIC_EXPORT_INTERVAL; no exit hook (the SDK's
    # would wait for a dead collector after the session's deadline): `serve` shuts it down.
    readers = [PeriodicExportingMetricReader(exporter) for exporter in exporters]
    provider = MeterProvider(
        resource=Resource.create(attributes), metric_readers=readers, shutdown_on_exit=False
    )
    return Metrics(provider, journal)
