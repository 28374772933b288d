"""Issue 26, the leak half: a hostile upstream echoes the bearer token back in every form that
leaked (a 2xx body, `fieldErrors` keys and values, `candidates`, a deprecation `Link`, non-JSON
bodies; base64 and percent-escapes of it), a model writes credentials into a tool name, a search
query, a JSON-RPC request id and a refused request over 256 KiB; no run of 12 characters of any
of them reaches the model's answers, the journal's files, stderr or the spans a live OTLP
receiver gets. Trace context holding CR, LF or NUL is dropped and journaled, never blamed on the
credential. The bridge is a subprocess."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal._redact import secret_marker

from .bridge_harness import bridge_command, open_bridge
from .secret_echo import ECHOES, bridge_env, echo_server, journal_text, leaks, span_text

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
from .test_bridge_telemetry import Receiver

TOKEN = "atk_7xxon8CZtyRsi5rp2dEYfmwZQPqpdTIRoejsI4O_aHk"  # the issue's
GHP = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # GitHub, 40 characters
AWS = "AKIAQ7R8S9T0U1V2W3X4"  # AWS access key id, 20 characters
SENDGRID = "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"
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_json = msgspec.json.encode


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    import threading

    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def answer_text(result: Any) -> str:
    return result.content[0].text + _json(result.structured_content).decode()


def capped_arguments(secret: str, kept: int) -> dict[str, Any]:
    """A request over 256 KiB the bridge refuses, with `secret` across its 4 KiB prefix's cut so
    that the cut keeps `kept` of its characters."""
    head = len(b'{"channel":"general","tasks":[{"title":"')
    title = "p" * (4096 - head - kept) + secret + " " + "x" * 300_000
    arguments = {"channel": "general", "tasks": [{"title": title}]}
    assert _json(arguments)[: 4096 - kept].endswith(b"p")
    return arguments


async def test_an_echoed_token_and_model_written_credentials_leak_nowhere(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = tmp_path / "journal.db"
    answers: dict[str, Any] = {}
    async with echo_server() as (server, port):
        env = {
            **bridge_env(port, TOKEN),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        async with open_bridge(env, path) as bridge:
            for name, echo in ECHOES.items():
                server.echo = echo
                answers[name] = await bridge.call("task_list", {"channel": "general"})
            server.echo = ECHOES["a 2xx body"]
            search = {"channel": "general", "query": f"find {GHP}", "status": "all"}
            answers["a search query"] = await bridge.call("task_list", search)
            answers["a tool name"] = await bridge.call(f"unknown_{GHP}", {})
            for secret, kept in ((GHP, 36), (AWS, 16)):
                answers[f"capped {kept}"] = await bridge.call(
                    "task_create", capped_arguments(secret, kept)
                )
            stderr = bridge.stderr()
    calls = len(answers)
    assert await trio.to_thread.run_sync(receiver.wait_for, calls, "tools/call")
    spans = span_text(receiver.spans)
    journal_files = journal_text(path)
    model = [(f"the answer to {name}", answer_text(r)) for name, r in answers.items()]
    # The token, whole or any run of 12 of its characters in any case form: nowhere.
    seen = [*model, ("the journal's files", journal_files), ("stderr", stderr), ("spans", spans)]
    assert leaks(seen, [TOKEN]) == []
    # What the model wrote reaches neither the journal, nor stderr, nor a span, cut or whole.
    elsewhere = [("the journal's files", journal_files), ("stderr", stderr), ("spans", spans)]
    assert leaks(elsewhere, [GHP, AWS]) == []
    with journal.open_reader(path) as reader:
        prefixes = [
            r.payload.arguments["capped"]["prefix"]
            for r in reader.events(kind="call_received")
            if isinstance(r.payload, journal.CallReceived) and "capped" in r.payload.arguments
        ]
    # ...where the whole value's digest stands in for it (screened before the cut), or, where
    # even the digest would be cut, nothing: the cut goes before it.
    assert len(prefixes) == 2 and prefixes[0].endswith(f"p{secret_marker(GHP)} xxxxx")
    assert prefixes[1].endswith("p" * 36) and len(prefixes[1]) <= 4096
    assert secret_marker(GHP) in spans  # the tool name and the `url.full` query
    # The answers still say what they can.
    listed = answers["a 2xx body"].structured_content["data"]["items"]
    assert [item["title"] for item in listed] == [
        "echo [REDACTED]",
        "upper [REDACTED]",
        "[REDACTED]",
    ]
    refused = answers["fieldErrors keys"].structured_content["error"]
    assert refused["code"] == "invalid_arguments"
    assert set(refused["field_errors"]) == {"[REDACTED]", "$.x[REDACTED]_y"}
    cut = answers["a fieldErrors value cut at 300"].structured_content["error"]["field_errors"]
    assert cut["$.title"].endswith("pp[REDACTED]")  # the whole token replaced, then cut
    assert answers["candidates"].structured_content["error"]["code"] == "channel_not_found"
    with journal.open_reader(path) as reader:
        [deprecated, escaped] = [
            r.payload
            for r in reader.events(kind="deprecated_usage")
            if isinstance(r.payload, journal.DeprecatedUsage)
        ]
    assert deprecated.replacement is not None and deprecated.replacement.startswith("<https://x/p")
    assert len(deprecated.replacement) <= 300
    assert escaped.replacement is not None and "?t=[REDACTED]" in escaped.replacement
    # Re-encoded echoes: what is not wholly the token's stays (a prefix's base64, padding).
    titles = answers["base64 in 2xx titles, at each alignment"].structured_content["data"]
    assert [item["title"] for item in titles["items"]][1:3] == [
        "dTp[REDACTED]w==",
        "Ym9iOm[REDACTED]",
    ]


async def _read_answer(stdout: trio.abc.ReceiveStream, want: object) -> dict[str, Any]:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            got = await stdout.receive_some(65536)
            assert got, "the bridge closed stdout"
            buffer += got
        line, _, buffer = buffer.partition(b"\n")
        message = msgspec.json.decode(line)
        if message.get("id") == want:
            return dict(message)


async def test_a_credential_as_the_json_rpc_request_id_is_exported_only_as_a_digest(
    tmp_path: Path, receiver: Receiver
) -> None:
    path = tmp_path / "journal.db"
    async with echo_server() as (_server, port):
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            **bridge_env(port, TOKEN),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        frames = [
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": SENDGRID,
                "method": "tools/call",
                "params": {"name": "task_list", "arguments": {"channel": "general"}},
            },
        ]
        with (tmp_path / "stderr").open("wb") as errors, trio.fail_after(60):
            process = await trio.lowlevel.open_process(
                bridge_command("--journal", str(path)),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                env=env,
            )
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send_all(_json(frames[0]) + b"\n")
            await _read_answer(process.stdout, 0)
            await process.stdin.send_all(b"".join(_json(f) + b"\n" for f in frames[1:]))
            answer = await _read_answer(process.stdout, SENDGRID)
            await process.stdin.aclose()
            assert await process.wait() == 0
    assert "result" in answer and not answer["result"].get("isError"), answer
    assert await trio.to_thread.run_sync(receiver.wait_for, 1, "tools/call")
    [server] = [s for s in receiver.spans if s.name.startswith("tools/call")]
    ids = [kv.value.string_value for kv in server.attributes if kv.key == "jsonrpc.request.id"]
    assert ids == [secret_marker(SENDGRID)]
    elsewhere = [
        ("spans", span_text(receiver.spans)),
        ("the journal's files", journal_text(path)),
        ("stderr", (tmp_path / "stderr").read_text()),
    ]
    assert leaks(elsewhere, [SENDGRID, TOKEN]) == []


TRACE_CASES = [  # (traceparent, tracestate, what is dropped)
    (PARENT, "a=1\r\nx-evil: 1", "tracestate"),
    (PARENT, "a=1\x00", "tracestate"),
    (PARENT + "\r\n", "a=1", "traceparent and tracestate"),
    (PARENT.replace("-01", "-\x0001"), "a=1", "traceparent and tracestate"),
]


async def test_trace_context_with_a_control_character_is_dropped_and_journaled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    async with echo_server() as (server, port):
        async with open_bridge(bridge_env(port, TOKEN), path) as bridge:
            answers = [
                await bridge.ok(
                    "task_list",
                    {"channel": "general"},
                    {"traceparent": parent, "tracestate": state},
                )
                for parent, state, _dropped in TRACE_CASES
            ]
            plain = await bridge.ok("task_list", {"channel": "general"})  # the session goes on
    assert all(answer["data"] == plain["data"] for answer in answers)  # no credential error
    # Nothing of it went upstream (no header holds a control character); a sound traceparent did.
    calls = [r for r in server.requests if b"authorization" in r]  # not the start-up probe
    assert [(r.get(b"traceparent"), r.get(b"tracestate")) for r in calls] == [
        (PARENT.encode(), None),
        (PARENT.encode(), None),
        (None, None),
        (None, None),
        (None, None),
    ]
    with journal.open_reader(path) as reader:
        received = [
            r.payload for r in reader.events(kind="call_received")
            if isinstance(r.payload, journal.CallReceived)
        ]  # fmt: skip
    notes = [(r.trace_context_dropped or "").partition(" dropped")[0] for r in received]
    assert notes == [dropped for _p, _s, dropped in TRACE_CASES] + [""]
    assert [r.trace_id is not None for r in received] == [True, True, False, False, False]


def test_verify_finds_a_runtime_token_in_any_case_and_any_12_character_prefix(
    tmp_path: Path,
) -> None:
    from .bridge_inprocess import KEY
    from .replay_helpers import seq_of, tamper

    forms = {
        "upper-cased": TOKEN.upper(),
        "snake_cased": "".join("_" + c.lower() if c.isupper() else c for c in TOKEN),
        "a 12-character prefix": TOKEN[:12],
        "mixed case prefix": "Atk_" + TOKEN[4:14],
    }
    path = tmp_path / "journal.db"

    async def write() -> None:
        import httpx

        from .bridge_inprocess import inprocess_bridge

        async with inprocess_bridge(path, httpx.MockTransport(lambda r: httpx.Response(404))) as (
            bridge,
            _,
        ):
            await bridge.call("task_get", {"channel": "general", "number": 1}, {}, 1)

    trio.run(write)
    seq = seq_of(path, "call_received")
    for column in ("payload", "gen_ai_tool_name", "jsonrpc_request_id"):
        for form in forms.values():
            copy = tmp_path / f"{column}-{form[:6]}.db"
            copy.write_bytes(path.read_bytes())
            value = _json({"arguments": {"title": f"x {form} y"}}).decode()
            tamper(
                copy,
                f"UPDATE events SET {column} = ? WHERE seq = {seq}",
                params=(value if column == "payload" else form,),
            )
            result = replay.verify([copy], key=KEY)
            found = [(f.seq, f.rule) for f in result.findings]
            assert (seq, "secret_in_payload") in found, (column, form, result.findings)
            assert all(form[4:12] not in f.detail for f in result.findings)
