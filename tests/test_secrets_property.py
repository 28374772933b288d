"""Issue 26, the property: whatever secret the bridge sends and however a hostile upstream echoes
it (any letter case, snake_cased, cut at any offset, inside a `fieldErrors` key or value, a
candidate, a header, a body that is not JSON, in JSON escapes), no run of 12 of its characters
reaches the model's answers, the journal's files (database, -wal, exported checkpoint), stderr
or a live OTLP receiver. Drawn by hypothesis: each example is one bridge subprocess driven
through several echoes (bounded: a few examples; derandomised in CI, tests/conftest.py)."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .bridge_harness import open_bridge
from .secret_echo import (
    Echo,
    across,
    bridge_env,
    escaped,
    journal_text,
    leaks,
    listing,
    refusal,
    span_text,
)
from .test_secrets_echo import answer_text, echo_server

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
from .test_bridge_telemetry import Receiver

_json = msgspec.json.encode


@st.composite
def secrets(draw: st.DrawFn) -> str:
    """A runtime token (`atk_` + base64url) or a token command's output (hex, or base64 with
    `+`/`/`): of a drawn length, with the entropy of a real one (drawn bytes, hashed)."""
    seed = draw(st.binary(min_size=1, max_size=8))
    digest = hashlib.sha512(seed).digest()
    size = draw(st.integers(min_value=16, max_value=60))
    kind = draw(st.sampled_from(["atk", "hex", "base64"]))
    if kind == "atk":
        return "atk_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")[: size - 4]
    if kind == "hex":
        return digest.hex()[:size]
    return base64.b64encode(digest).decode()[:size]


def _snake(text: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in text)


FORMS: dict[str, Callable[[str], str]] = {
    "as sent": lambda t: t,
    "upper-cased": str.upper,
    "lower-cased": str.lower,
    "snake_cased": _snake,
}


def _place(where: str, text: str, offset: int) -> Echo:
    """An echo putting `text` at `where`, across the bridge's cut there at `offset` of it."""
    if where == "a 2xx title":
        return lambda _t: (200, [], listing(f"echo {text}"))
    if where == "a 2xx title in JSON escapes":
        return lambda _t: (200, [], listing("E").replace(b'"E"', b'"' + escaped(text) + b'"'))
    if where == "a fieldErrors key":
        return lambda _t: (400, [], refusal("validation_failed", fieldErrors={text: "bad"}))
    if where == "a fieldErrors value":
        value = across(text, 300, offset)
        return lambda _t: (400, [], refusal("validation_failed", fieldErrors={"$.title": value}))
    if where == "a candidate":
        candidate = {text: text, "channel": text}
        return lambda _t: (404, [], refusal("channel_not_found", candidates=[candidate]))
    if where == "a Link header":
        link = f"<https://x/{across(text, 288, offset)}>"
        return lambda _t: (200, [("deprecation", "@1"), ("link", link)], listing("ok"))
    if where == "an x-request-id header":
        return lambda _t: (200, [("x-request-id", text)], listing("ok"))
    assert where == "a non-JSON body"
    body = (across(text, 4096, offset) + " <html>" + "x" * 300).encode()
    return lambda _t: (200, [], body)


PLACES = [
    "a 2xx title",
    "a 2xx title in JSON escapes",
    "a fieldErrors key",
    "a fieldErrors value",
    "a candidate",
    "a Link header",
    "an x-request-id header",
    "a non-JSON body",
]


@st.composite
def echoes(draw: st.DrawFn, secret: str) -> tuple[str, Echo]:
    form = draw(st.sampled_from(sorted(FORMS)))
    where = draw(st.sampled_from(PLACES))
    text = FORMS[form](secret)
    start = draw(st.integers(min_value=0, max_value=len(text) - 12))
    stop = draw(
        st.one_of(st.just(len(text)), st.integers(min_value=start + 12, max_value=len(text)))
    )
    piece = text[start:stop]  # the upstream's own cut: still 12 characters or more
    offset = draw(st.integers(min_value=1, max_value=len(piece) - 1))  # where the bridge cuts
    return f"{form} [{start}:{stop}] in {where} cut at {offset}", _place(where, piece, offset)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, list[tuple[str, Echo]]]:
    secret = draw(secrets())
    return secret, draw(st.lists(echoes(secret), min_size=6, max_size=6))


async def _run(tmp_path: Path, secret: str, cases: list[tuple[str, Echo]]) -> list[str]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "journal.db"
    answers: list[tuple[str, str]] = []
    try:
        async with echo_server() as (server, port):
            env = {
                **bridge_env(port, secret),
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
            async with open_bridge(env, path) as bridge:
                for name, echo in cases:
                    server.echo = echo
                    result: Any = await bridge.call("task_list", {"channel": "general"})
                    answers.append((f"the answer to {name}", answer_text(result)))
                stderr = bridge.stderr()
            assert all(
                r[b"authorization"] == b"Bearer " + secret.encode()
                for r in server.requests
                if b"authorization" in r  # the start-up probe carries no token
            )
        assert await trio.to_thread.run_sync(receiver.wait_for, len(cases), "tools/call")
        spans = span_text(receiver.spans)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
    seen = [*answers, ("the journal's files", journal_text(path)), ("stderr", stderr)]
    return leaks([*seen, ("spans", spans)], [secret])


@pytest.mark.slow  # a bridge subprocess per example, a live OTLP receiver: ~5 s each
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_no_echo_of_a_known_secret_leaks_a_12_character_run_anywhere(
    tmp_path_factory: pytest.TempPathFactory, scenario: tuple[str, list[tuple[str, Echo]]]
) -> None:
    secret, cases = scenario
    tmp_path = tmp_path_factory.mktemp("echo")
    assert trio.run(_run, tmp_path, secret, cases) == [], [name for name, _ in cases]
