"""Live OpenTelemetry traces from the running bridge, free when off (metrics: `_metrics`).

On only when both hold: the ``[otel]`` extra is installed (the OpenTelemetry SDK and its OTLP
exporter) and the standard environment asks for traces (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, or ``OTEL_TRACES_EXPORTER`` other than ``none``;
``OTEL_SDK_DISABLED=true`` wins). Then:

* the SDK's own ``OpenTelemetryMiddleware`` makes a SERVER span per MCP message, continuing the
  client's ``traceparent``/``tracestate`` from ``params._meta`` (the MCP semantic conventions);
  the bridge adds ``mcp.session.id`` and ``network.transport = pipe`` to a call's span;
* every upstream request gets a CLIENT span (the HTTP client conventions: ``http.request.method``,
  ``url.full`` with credentials redacted, ``url.template``, ``server.address``, ``server.port``,
  ``http.response.status_code``, ``error.type``) and carries W3C trace context to the Agent
  Runtime API;
* each call's trace and span ids are journaled with the request (``call_received``);
* every span leaves the process screened (`_ScreenedExporter`): its name, status text and string
  attributes, its events' too, pass the journal's redactor with the secrets the bridge knows (the
  tokens it sent, whole or in fragments) and the maintained rule set, so a credential a model
  wrote into a tool name, a search query (``url.full``) or a JSON-RPC request id is exported as
  ``[REDACTED:sha256:...]``.

Trace context a client sends with a character outside printable ASCII (CR, LF, NUL...) is dropped
before the call flow forwards or journals it (`screened_trace`; live, the SDK's W3C propagator
parses its own copy and sends upstream only the context it re-encodes), and the call's
``call_received`` says so (``trace_context_dropped``); the call goes on without it.

Exporters as the SDK documents them: ``OTEL_TRACES_EXPORTER`` is ``otlp`` (the default),
``console`` (JSON spans on stderr, never stdout: stdout is the MCP protocol), both, or ``none``;
``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` is ``http/protobuf`` (the default) or ``grpc`` when the
OTLP gRPC exporter is installed. Anything else is refused at start in one line (:func:`check`).

Off, nothing of the OpenTelemetry SDK is imported and no span is made (the MCP SDK itself imports
the small OpenTelemetry *API* package; its middleware is removed). A client's ``traceparent`` is
still forwarded upstream unchanged and its trace id journaled, so the runtime and the journal can
join the client's trace at the cost of a dictionary lookup.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple
from urllib.parse import urlsplit

import msgspec

from agentteam_task_bridge.journal import Redactor

log = logging.getLogger("agentteam.bridge.telemetry")
_json_text: Final = msgspec.json.Encoder().encode

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_INVALID_TRACE = "0" * 32
_UNSAFE_TRACE: Final = re.compile(r"[^\x20-\x7e]")
_TRACE_KEYS: Final = ("traceparent", "tracestate")
SCOPE = "agentteam-task-bridge"


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the standard OpenTelemetry environment asks for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    return bool(endpoint or exporter)


def screened_trace(meta: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """A request's `_meta` without trace context holding a character outside printable ASCII
    (W3C allows none: CR, LF or NUL would break the header it becomes), and the note saying what
    was dropped. A bad ``traceparent`` takes its ``tracestate`` with it."""
    if "traceparent" not in meta and "tracestate" not in meta:  # every call: no generator
        return meta, None
    bad = [
        key
        for key in _TRACE_KEYS
        if isinstance(meta.get(key), str) and _UNSAFE_TRACE.search(meta[key]) is not None
    ]
    if not bad:
        return meta, None
    dropped = _TRACE_KEYS if "traceparent" in bad else ("tracestate",)
    kept = {key: value for key, value in meta.items() if key not in dropped}
    said = " and ".join(dropped)
    return kept, f"{said} dropped: a control or non-ASCII character in {' and '.join(bad)}"


_EXPORTERS = frozenset({"otlp", "console"})


class Signal(NamedTuple):
    """One OpenTelemetry signal's exporter settings, read as the SDK reads them, one rule for
    both signals (traces here, metrics in `_metrics`): the variable listing its exporters, its
    own protocol variable (else OTEL_EXPORTER_OTLP_PROTOCOL), each protocol's OTLP exporter
    module, and the OTLP exporter class there."""

    exporter_variable: str
    protocol_variable: str
    modules: Mapping[str, str]
    otlp_class: str

    def exporters(self, env: Mapping[str, str]) -> list[str]:
        """The exporter variable as a comma-separated list, ``otlp`` by default."""
        names = [n.strip().lower() for n in env.get(self.exporter_variable, "").split(",")]
        return [n for n in names if n and n != "none"] or ([] if "none" in names else ["otlp"])

    def protocol(self, env: Mapping[str, str]) -> str:
        chosen = env.get(self.protocol_variable) or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        return (chosen or "http/protobuf").strip().lower()

    def open_exporters(self, env: Mapping[str, str], console: Callable[..., Any]) -> list[Any]:
        """The exporters the settings ask for (ImportError without the [otel] extra);
        ``console`` writes to stderr: stdout is the MCP protocol."""
        import importlib

        exporters: list[Any] = []
        for name in self.exporters(env):
            if name == "console":
                exporters.append(console(out=sys.stderr))
            else:
                module = importlib.import_module(self.modules[self.protocol(env)])
                exporters.append(getattr(module, self.otlp_class)())
        return exporters


TRACES: Final = Signal(
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    {
        "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    },
    "OTLPSpanExporter",
)


def check(env: Mapping[str, str]) -> str | None:
    """Why the telemetry settings cannot be honoured (one line for the start-up error), or None.
    Imports nothing of the SDK unless a ``grpc`` exporter is asked for (to see if it exists)."""
    if not wanted(env):
        return None
    return exporter_problem(
        ("OTEL_TRACES_EXPORTER", env.get("OTEL_TRACES_EXPORTER"), TRACES.exporters(env)),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", TRACES.protocol(env)),
        TRACES.modules,
    )


def resource_attributes(env: Mapping[str, str], version: str) -> dict[str, str]:
    """The resource the traces and the metrics name: this version, and this service's name
    unless the operator gave one (``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES``)."""
    attributes = {"service.version": version}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = SCOPE
    return attributes


def exporter_problem(
    exporter: tuple[str, str | None, Sequence[str]],
    protocol: tuple[str, str],
    modules: Mapping[str, str],
) -> str | None:
    """Why one signal's exporter settings cannot be honoured (traces' here, metrics' in
    `_metrics`), or None: ``exporter`` is (variable, its text, the names it lists), ``protocol``
    (variable, the OTLP protocol in force), ``modules`` each protocol's exporter module."""
    variable, text, names = exporter
    unknown = [name for name in names if name not in _EXPORTERS]
    if unknown:
        return f"{variable}={text}: {', '.join(unknown)} is not supported (otlp, console or none)"
    if "otlp" not in names:
        return None
    variable, chosen = protocol
    if chosen not in modules:
        return (
            f"{variable}={chosen}: not supported (http/protobuf, or grpc "
            "with the OTLP gRPC exporter installed)"
        )
    if chosen == "grpc":
        import importlib.util

        try:
            found = importlib.util.find_spec(modules["grpc"]) is not None
        except ImportError:
            found = False
        if not found:
            return (
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the OTLP gRPC exporter is not installed "
                "(pip install opentelemetry-exporter-otlp-proto-grpc, or use http/protobuf)"
            )
    return None


def client_trace(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid W3C ``traceparent`` in a request's ``_meta``."""
    value = meta.get("traceparent")
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.match(value.strip())
    if found is None or found.group(1) == _INVALID_TRACE or found.group(2) == "0" * 16:
        return None
    return found.group(1), found.group(2)


def passthrough_headers(meta: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """With telemetry off: the client's valid trace context, forwarded upstream unchanged."""
    if client_trace(meta) is None:
        return []
    headers = [(b"traceparent", str(meta["traceparent"]).strip().encode("ascii"))]
    state = meta.get("tracestate")
    if isinstance(state, str) and state.isascii() and len(state) <= 512 and "\n" not in state:
        headers.append((b"tracestate", state.strip().encode("ascii")))
    return headers


@dataclass
class UpstreamSpan:
    """What the call flow tells the CLIENT span of one upstream request, and the headers to send."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    _span: Any = None

    def answered(self, status: int) -> None:
        if self._span is None:
            return
        self._span.set_attribute("http.response.status_code", status)
        if status >= 400:
            from opentelemetry.trace import StatusCode

            self._span.set_attribute("error.type", str(status))
            self._span.set_status(StatusCode.ERROR)

    def failed(self, kind: str) -> None:
        if self._span is None:
            return
        from opentelemetry.trace import StatusCode

        self._span.set_attribute("error.type", kind)
        self._span.set_status(StatusCode.ERROR)


class Tracing:
    """The live tracer provider, its exporter, and the spans the call flow makes."""

    def __init__(self, provider: Any, api_url: str, redactor: Redactor | None = None) -> None:
        from opentelemetry import trace

        self._provider = provider
        self.redactor = redactor if redactor is not None else Redactor()
        self._tracer = trace.get_tracer(SCOPE)
        parts = urlsplit(api_url)
        self._origin = f"{parts.scheme}://{_host(parts)}"
        self._address = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)

    def add_secret(self, value: str) -> None:
        """A secret the exported spans must not hold (the bridge tells each token it sends)."""
        self.redactor.add_secret(value)

    def annotate_call(self, session_id: str) -> tuple[str, str] | None:
        """Add the session to the current (SERVER) span; its (trace id, span id) for the journal."""
        from opentelemetry import trace

        span = trace.get_current_span()
        context = span.get_span_context()
        if not context.is_valid:
            return None
        span.set_attribute("mcp.session.id", session_id)
        span.set_attribute("network.transport", "pipe")
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"

    @contextmanager
    def upstream(self, method: str, target: str, template: str) -> Iterator[UpstreamSpan]:
        """A CLIENT span around one upstream request; W3C trace context in its headers."""
        from opentelemetry.propagate import inject
        from opentelemetry.trace import SpanKind

        attributes: dict[str, str | int] = {
            "http.request.method": method,
            "url.full": self._origin + target,
            "url.template": template,
            "server.address": self._address,
            "server.port": self._port,
        }
        with self._tracer.start_as_current_span(
            f"{method} {template}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            inject(carrier)
            headers = [(k.encode("ascii"), v.encode("ascii")) for k, v in carrier.items()]
            yield UpstreamSpan(headers, span)

    def shutdown(self) -> None:
        """Flush what is batched and stop the exporter (blocking: run it in a thread)."""
        try:
            self._provider.shutdown()
        except Exception:  # telemetry must never fail a session's end
            log.warning("OpenTelemetry shutdown failed", exc_info=True)


def start(env: Mapping[str, str], api_url: str, version: str) -> Tracing | None:
    """Live tracing when the environment asks for it and the extra is installed, else None."""
    if not wanted(env):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        exporters = TRACES.open_exporters(env, ConsoleSpanExporter)
    except ImportError:
        log.warning(
            "OTEL_* asks for traces but the [otel] extra is not installed "
            "(pip install 'agentteam-task-bridge[otel]'); telemetry stays off"
        )
        return None
    attributes = resource_attributes(env, version)
    # No flush at exit: `serve` flushes once the journal is closed, within the session's
    # deadline; the SDK's own exit hook would wait for a dead collector (10 s) after it.
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    redactor = Redactor()  # every exporter sees the spans screened, console included
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(_screened_exporter(exporter, redactor)))
    trace.set_tracer_provider(provider)
    return Tracing(provider, api_url, redactor)


def _screened_exporter(inner: Any, redactor: Redactor) -> Any:
    """`inner` (an OTLP span exporter) behind the redactor: each span is exported as a copy with
    its name, status text and string attributes (its events' too) redacted; a span with nothing
    to redact is exported as it is. Runs in the batch processor's thread, off the call path."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Status

    def text(value: str) -> str:
        return redactor.redact_text(value) if redactor.screen(_json_text(value).decode()) else value

    def attributes(values: Any) -> Any:
        if not values:
            return values
        out = {}
        for key, value in values.items():
            if isinstance(value, str):
                value = text(value)
            elif isinstance(value, tuple | list):
                value = tuple(text(v) if isinstance(v, str) else v for v in value)
            out[key] = value
        return out

    def screened(span: Any) -> Any:
        name = text(span.name)
        attrs = attributes(span.attributes)
        events = [Event(e.name, attributes(e.attributes), e.timestamp) for e in span.events]
        status = span.status
        if status.description:
            status = Status(status.status_code, text(status.description))
        same = (
            name == span.name
            and attrs == dict(span.attributes or {})
            and status is span.status
            and all(
                a.attributes == dict(b.attributes or {})
                for a, b in zip(events, span.events, strict=True)
            )
        )
        if same:
            return span
        return ReadableSpan(
            name=name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=attrs,
            events=events,
            links=span.links,
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    class Screened(SpanExporter):
        def export(self, spans: Any) -> Any:
            return inner.export([screened(span) for span in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return Screened()


def _host(parts: Any) -> str:
    """host[:port] without userinfo, IPv6 literals bracketed."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host
