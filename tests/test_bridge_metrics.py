"""Live OpenTelemetry metrics: a real session's calls, errors, latencies and journal health reach
a real OTLP/HTTP receiver on loopback (`/v1/metrics`, decoded with the opentelemetry-proto
classes), with attributes from closed sets only; the settings as the SDK documents them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import open_bridge
from .bridge_inprocess import inprocess_bridge

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
from agentteam_task_bridge.bridge import _metrics

from .test_bridge_telemetry import Receiver


@pytest.fixture
def otlp() -> Iterator[Receiver]:
    """A real OTLP/HTTP receiver on loopback (traces and metrics, by path)."""
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


SECRET_TOOL = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def _points(request_bodies: list[Any], name: str) -> list[tuple[dict[str, Any], Any, Any]]:
    """(attributes, data point, metric) of every point of metric `name` in the last export that
    has it (the temporality is cumulative: the last holds the whole session)."""
    found: list[tuple[dict[str, Any], Any, Any]] = []
    for request in request_bodies:
        points = []
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    data = getattr(metric, metric.WhichOneof("data"))
                    for point in data.data_points:
                        attributes = {kv.key: _value(kv.value) for kv in point.attributes}
                        points.append((attributes, point, metric))
        if points:
            found = points
    return found


async def test_a_sessions_calls_errors_latency_and_journal_health_reach_the_receiver(
    file_runtime: Runtime, otlp: Receiver, tmp_path: Path
) -> None:
    env = {
        **file_runtime.bridge_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "OTEL_TRACES_EXPORTER": "none",  # metrics alone: the default exporter is otlp
    }
    path = tmp_path / "journal.db"
    async with open_bridge(env, path, runtime=file_runtime) as bridge:
        await bridge.ok("task_create", {"channel": "general", "tasks": [{"title": "measured"}]})
        for _ in range(2):
            await bridge.ok("task_get", {"channel": "general", "number": 1})
        await bridge.fails("task_get", {"channel": "general", "number": 99}, code="task_not_found")
        await bridge.fails("task_get", {"channel": "general"}, code="invalid_arguments")
        await bridge.fails(SECRET_TOOL, {"token": SECRET_TOOL}, code="unknown_tool")
    # Exported once at the end (the interval is a minute), after the journal closed.
    assert otlp.metrics, "no metrics arrived"
    assert otlp.requests == 0  # traces are off

    durations = _points(otlp.metrics, _metrics.DURATION)
    by_call = {
        (a["gen_ai.tool.name"], a.get("error.type"), a.get("agentteam.error.code")): p.count
        for a, p, _ in durations
    }
    assert by_call == {
        ("task_create", None, None): 1,
        ("task_get", None, None): 2,
        ("task_get", "tool_error", "task_not_found"): 1,
        ("task_get", "tool_error", "invalid_arguments"): 1,
        ("_OTHER", "tool_error", "unknown_tool"): 1,
    }
    _, point, metric = durations[0]
    assert metric.unit == "s"
    assert list(point.explicit_bounds) == list(_metrics.BUCKETS)
    assert sum(point.bucket_counts) == point.count and point.sum > 0
    assert all(
        a["mcp.method.name"] == "tools/call"
        and a["gen_ai.operation.name"] == "execute_tool"
        and a["network.transport"] == "pipe"
        for a, _, _ in durations
    )
    for _, p, _ in durations:  # seconds, not milliseconds: a local call is well under 30 s
        assert 0 < p.sum / p.count < 30

    calls = Counter[tuple[str, str, str | None]]()
    for a, p, _ in _points(otlp.metrics, _metrics.CALLS):
        calls[
            (a["gen_ai.tool.name"], a["agentteam.call.outcome"], a.get("agentteam.error.code"))
        ] += p.as_int
    assert calls == {
        ("task_create", "result", None): 1,
        ("task_get", "result", None): 2,
        ("task_get", "error", "task_not_found"): 1,
        ("task_get", "rejected", "invalid_arguments"): 1,
        ("_OTHER", "rejected", "unknown_tool"): 1,
    }

    with journal.open_reader(path) as reader:
        events = sum(1 for _ in reader.events())
    [(_, appended, _)] = _points(otlp.metrics, _metrics.JOURNAL_EVENTS)
    assert appended.as_int == events  # every event this session's writer appended
    [(_, depth, _)] = _points(otlp.metrics, _metrics.JOURNAL_QUEUE)
    assert depth.as_int == 0  # all committed by the end
    [(_, degraded, degraded_metric)] = _points(otlp.metrics, _metrics.JOURNAL_DEGRADED)
    assert degraded.as_double == 0.0 and degraded_metric.unit == "s"

    # No secret, no hidden context in any attribute: nothing a model or upstream wrote.
    sent = b"".join(otlp.bodies)
    for hidden in (SECRET_TOOL, file_runtime.workspace_id, file_runtime.agent_id, "atk_"):
        assert hidden.encode() not in sent, hidden


async def test_off_no_metrics_and_none_turns_them_off(
    file_runtime: Runtime, otlp: Receiver, tmp_path: Path
) -> None:
    env = {
        **file_runtime.bridge_env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    async with open_bridge(env, tmp_path / "journal.db", runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"})
    assert otlp.requests >= 1 and not otlp.metrics  # traces yes, metrics no


def _serve_once(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`serve --embedded` with stdin closed: it ends at once (or fails at start in one line)."""
    return subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", "--embedded"],
        env={
            "PATH": "/usr/bin:/bin",
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            **env,
        },
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_console_exporter_writes_metrics_to_stderr_never_stdout(
    otlp: Receiver, tmp_path: Path
) -> None:
    done = _serve_once({"OTEL_METRICS_EXPORTER": "console"}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # stdout is the MCP protocol
    stderr = done.stderr
    start = stderr.index('{\n    "resource_metrics"')
    exported, _ = json.JSONDecoder().raw_decode(stderr[start:])
    names = {
        m["name"]
        for r in exported["resource_metrics"]
        for s in r["scope_metrics"]
        for m in s["metrics"]
    }
    assert {_metrics.JOURNAL_EVENTS, _metrics.JOURNAL_QUEUE, _metrics.JOURNAL_DEGRADED} <= names
    assert not otlp.metrics and otlp.requests == 0  # nothing over OTLP


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, "prometheus is not supported"),
        (
            {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/json: not supported",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
            "grpc: the OTLP gRPC exporter is not installed",
        ),
    ],
)
def test_a_metrics_setting_the_bridge_cannot_honour_is_one_line_at_start(
    tmp_path: Path, setting: dict[str, str], said: str
) -> None:
    done = _serve_once(setting, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert said in line, line
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.db"))


def test_the_settings_as_the_sdk_reads_them() -> None:
    assert not _metrics.wanted({})
    assert not _metrics.wanted({"OTEL_TRACES_EXPORTER": "console"})  # traces only
    assert _metrics.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert _metrics.wanted({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c/v1/metrics"})
    assert _metrics.wanted({"OTEL_METRICS_EXPORTER": "console"})
    assert not _metrics.wanted(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_METRICS_EXPORTER": "none"}
    )
    assert not _metrics.wanted({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
    assert _metrics.check({"OTEL_METRICS_EXPORTER": "otlp,console"}) is None


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"EXPORTER": "console"},
        {"EXPORTER": " OTLP , console ,"},
        {"EXPORTER": "none"},
        {"EXPORTER": "none,console"},
        {"EXPORTER": "otlp", "PROTOCOL": " GRPC "},
        {"EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        {"PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    ],
)
def test_traces_and_metrics_read_their_exporter_settings_by_one_rule(
    settings: dict[str, str],
) -> None:
    """The same settings, each signal under its own variable names, give the same exporters
    and protocol (`_telemetry.Signal`: one reader for both, not two copies)."""
    from agentteam_task_bridge.bridge import _telemetry

    def env(signal: str) -> dict[str, str]:
        named = {
            "EXPORTER": f"OTEL_{signal}_EXPORTER",
            "PROTOCOL": f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL",
        }
        return {named.get(key, key): value for key, value in settings.items()}

    traces, metrics = _telemetry.TRACES, _metrics.METRICS
    assert traces.exporters(env("TRACES")) == metrics.exporters(env("METRICS"))
    assert traces.protocol(env("TRACES")) == metrics.protocol(env("METRICS"))
    assert set(traces.modules) == set(metrics.modules) == {"http/protobuf", "grpc"}


def _collected(reader: Any) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    return {
        metric.name: list(metric.data.data_points)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


async def test_a_call_whose_outcome_the_journal_lost_is_counted_and_the_spell_measured(
    tmp_path: Path,
) -> None:
    """Metrics say what happened when the journal cannot: a mutation's result the journal lost,
    the refusals while it is down, the seconds it spent degraded and the events it lost."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from agentteam_task_bridge.bridge._journaling import JournalAdapter

    from .test_bridge_journal_degraded import CREATE, Locked, _wait_until_healthy

    path = tmp_path / "j.db"
    breaker = Locked(path)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    async with inprocess_bridge(path, httpx.MockTransport(breaker.handler), busy_timeout=0.1) as (
        bridge,
        writer,
    ):
        bridge.metrics = _metrics.Metrics(provider, JournalAdapter(writer).health)
        breaker.armed = True
        try:
            first = await bridge.call("task_create", CREATE, {}, 1)
            refused = await bridge.call("task_create", CREATE, {}, 2)
            during = _collected(reader)
        finally:
            breaker.repair()
        assert first.structured_content["meta"]["journal"]["recorded"] is False  # type: ignore[index]
        assert refused.is_error
        await _wait_until_healthy(writer)
        await bridge.call("task_create", CREATE, {}, 3)
        after = _collected(reader)
    provider.shutdown()
    calls = Counter[tuple[str, str | None]]()
    for point in after[_metrics.CALLS]:
        attributes = dict(point.attributes)
        calls[(attributes["agentteam.call.outcome"], attributes.get("agentteam.error.code"))] += (
            point.value
        )
    assert calls == {("result", None): 2, ("error", "journal_unavailable"): 1}
    [lost_while_down] = during[_metrics.JOURNAL_DEGRADED]
    assert lost_while_down.value > 0  # the open spell counts
    [degraded] = after[_metrics.JOURNAL_DEGRADED]
    assert degraded.value >= lost_while_down.value
    [depth] = after[_metrics.JOURNAL_QUEUE]
    assert depth.value == 0  # what was lost is not "queued"
    with journal.open_reader(path) as reader_:
        [gap] = list(reader_.events(kind="journal_gap"))
    assert isinstance(gap.payload, journal.JournalGap) and gap.payload.events_lost >= 1


def test_the_readme_names_every_metric() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for name in (
        _metrics.DURATION,
        _metrics.CALLS,
        _metrics.JOURNAL_EVENTS,
        _metrics.JOURNAL_QUEUE,
        _metrics.JOURNAL_DEGRADED,
    ):
        assert f"| `{name}` |" in readme, name
