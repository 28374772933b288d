"""Telemetry settings as the OpenTelemetry SDK documents them (issue 29): OTEL_TRACES_EXPORTER
(`otlp`, `console` on stderr, `none`) and OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf`; `grpc`
only when its exporter is installed), anything else refused at start in one line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import open_bridge
from .test_bridge_telemetry import Receiver
from .test_bridge_telemetry import receiver as receiver  # the fixture

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")


def _spans_in(stderr: str) -> list[dict[str, object]]:
    """The ConsoleSpanExporter's JSON objects (pretty-printed, one after another)."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := stderr.find("{\n", at)) >= 0:
        try:
            value, at = decoder.raw_decode(stderr, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(value, dict) and "context" in value:
            spans.append(value)
    return spans


async def test_the_console_exporter_writes_spans_to_stderr_and_none_to_the_receiver(
    file_runtime: Runtime, receiver: Receiver, tmp_path: Path
) -> None:
    env = {
        **file_runtime.bridge_env(),
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,  # not used: console only
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    async with open_bridge(env, tmp_path / "journal.db", runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"})  # stdout stays the MCP protocol
        for _ in range(100):  # bounded: the batch is exported every 100 ms
            if any(s.get("kind") == "SpanKind.CLIENT" for s in _spans_in(bridge.stderr())):
                break
            await trio.sleep(0.1)
        spans = _spans_in(bridge.stderr())
    assert any(s.get("kind") == "SpanKind.CLIENT" for s in spans), spans
    assert receiver.requests == 0


async def test_otlp_and_console_together_reach_both(
    file_runtime: Runtime, receiver: Receiver, tmp_path: Path
) -> None:
    env = {
        **file_runtime.bridge_env(),
        "OTEL_TRACES_EXPORTER": "otlp,console",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    async with open_bridge(env, tmp_path / "journal.db", runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"})
        for _ in range(100):  # bounded: each batch is exported every 100 ms
            if receiver.requests and _spans_in(bridge.stderr()):
                break
            await trio.sleep(0.1)
        assert _spans_in(bridge.stderr())
    assert receiver.requests >= 1


def _serve_once(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.bridge._cli", "serve", "--embedded",
         "--journal", str(tmp_path / "j.db")],
        env={"PATH": "/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path / "data"), **env},
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin: zipkin is not"),
        ({"OTEL_TRACES_EXPORTER": "otlp,jaeger"}, "jaeger is not supported"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "the OTLP gRPC exporter is not"),
    ],
)
def test_a_setting_the_bridge_cannot_honour_is_one_line_at_start(
    tmp_path: Path, setting: dict[str, str], named: str
) -> None:
    if "grpc" in setting.values() and importlib.util.find_spec(
        "opentelemetry.exporter.otlp.proto.grpc"
    ):
        pytest.skip("the gRPC exporter is installed here: grpc is honoured, not refused")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", **setting}
    done = _serve_once(env, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], done.stderr
    assert not (tmp_path / "j.db").exists()  # refused before anything was journaled


def test_none_turns_tracing_off_whatever_else_is_set(tmp_path: Path) -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",  # each signal has its own switch, as in the SDK
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",  # not checked: nothing is exported
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPROFILEIMPORTTIME": "1",
    }
    done = _serve_once(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "opentelemetry.sdk" not in done.stderr
