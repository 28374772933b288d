"""Secrets never land: a canary token, passed everywhere a careless caller could, stays out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal import REDACTED, Redactor

from .journal_helpers import KEY, SESSION

CANARY = "cnry_7f3a9b2e41d04c6a8e5f"  # a bearer token, as the bridge would hold it


def _careless_events() -> list[journal.Event]:
    """Every place a token could slip into: keys, headers, bodies, URLs, free text, envelope."""
    return [
        journal.Event(
            session_id=SESSION,
            payload=journal.SessionStarted(
                bridge_version="0.1",
                compat_policy="hint",
                api_url=f"https://agent:{CANARY}@api.example/v1?access_token={CANARY}",
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            gen_ai_tool_name="task_create",
            payload=journal.CallReceived(
                arguments={"title": f"token is {CANARY} oops", "nested": [{"apiKey": CANARY}]}
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            payload=journal.ContextInjected(
                fields=[
                    journal.InjectedField(name="authorization", source="env", value=CANARY),
                    journal.InjectedField(name="workspace_id", source="env", value="ws-1"),
                ]
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            payload=journal.UpstreamRequest(
                method="POST",
                route=f"/tasks?token={CANARY}",
                headers={"Authorization": f"Bearer {CANARY}", "X-Trace": "t"},
                body={"credentials": {"user": "u", "pass": CANARY}, "note": f"Bearer {CANARY}"},
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            payload=journal.UpstreamResponse(
                status=401,
                headers={"www-authenticate": f"Bearer realm=x, token={CANARY}"},
                body={"error": f"invalid token {CANARY}", "access_token": CANARY},
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            payload=journal.CallError(
                error_code="unauthorized",
                retryable=True,
                message=f"upstream said {CANARY}",
            ),
        ),
        journal.Event(
            session_id=SESSION,
            call_id="c1",
            payload=journal.CallResult(result={CANARY: "as a key", "cookie": "session=abc"}),
        ),
    ]


def _file_bytes(path: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in path.parent.iterdir()
        if p.name.startswith(path.name) and p.is_file()
    }


async def test_the_canary_token_is_nowhere_in_the_database_files(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY, secrets=[CANARY]) as writer:
        for event in _careless_events():
            await writer.append(event)
        # While the writer is open the events sit in the WAL: look there too.
        files = _file_bytes(path)
        assert f"{path.name}-wal" in files and len(files[f"{path.name}-wal"]) > 0
        for name, data in files.items():
            assert CANARY.encode() not in data, name
    for name, data in _file_bytes(path).items():
        assert CANARY.encode() not in data, name
    with journal.open_reader(path) as reader:
        texts = [r.payload_json for r in reader.events()]
    assert len(texts) == len(_careless_events())
    assert all(CANARY not in text for text in texts)
    assert any(REDACTED in text for text in texts)
    assert any("ws-1" in text for text in texts)  # non-secret context stays


def test_a_secret_registered_later_is_redacted_from_then_on(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    refreshed = "cnry_refreshed_0123456789"
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.add_secret(refreshed)
        writer.append(
            journal.Event(
                session_id=SESSION,
                payload=journal.CallResult(result={"text": f"new token {refreshed}"}),
            )
        )
    assert all(refreshed.encode() not in data for data in _file_bytes(path).values())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": REDACTED}),
        ({"headers": {"set-cookie": "a=b"}}, {"headers": {"set-cookie": REDACTED}}),
        ({"accessToken": "x"}, {"accessToken": REDACTED}),
        ({"AGENTTEAM_TOKEN": "x"}, {"AGENTTEAM_TOKEN": REDACTED}),
        ({"client_secret": 42}, {"client_secret": REDACTED}),
        ({"Password": None}, {"Password": None}),
        ({"x_api_key": "x"}, {"x_api_key": REDACTED}),
        ([{"name": "Authorization", "value": "v"}], [{"name": "Authorization", "value": REDACTED}]),
        ("see Bearer abc.def-ghi_123", f"see Bearer {REDACTED}"),
        ("a bearer of news", "a bearer of news"),
        ("jwt eyJhbGciOi.eyJzdWIiOiIx.sig-nat_ure", f"jwt {REDACTED}"),
        ("https://u:p4ss@h/x", f"https://{REDACTED}@h/x"),
        ("/x?a=1&api_key=s3cr3t&b=2", f"/x?a=1&api_key={REDACTED}&b=2"),
        # Names that only contain a credential word are audit data, kept.
        (
            {"max_tokens": 5, "token_source": "file", "idempotency_key": "k1"},
            {"max_tokens": 5, "token_source": "file", "idempotency_key": "k1"},
        ),
    ],
)
def test_redaction_rules(value: Any, expected: Any) -> None:
    assert Redactor().redact(value) == expected


def test_known_secret_values_are_replaced_inside_any_string_and_key() -> None:
    redactor = Redactor(["s3cr3t-value-123", "tiny"])
    assert redactor.redact({"a": ["x s3cr3t-value-123 y"], "s3cr3t-value-123": 1}) == {
        "a": [f"x {REDACTED} y"],
        REDACTED: 1,
    }
    # A short secret is replaced where a whole string equals it, not inside other words.
    assert redactor.redact(["tiny", "tinyhouse"]) == [REDACTED, "tinyhouse"]


async def test_the_file_check_does_see_an_unredacted_value(tmp_path: Path) -> None:
    # The control: a value nobody declared secret, in free text, does land (in the WAL first).
    path = tmp_path / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        await writer.append(
            journal.Event(session_id=SESSION, payload=journal.CallResult(result=f"is {CANARY}"))
        )
        assert any(CANARY.encode() in data for data in _file_bytes(path).values())


# --- the screen: a quick look at the encoded text that lets clean payloads skip the full walk ---

_PIECES = (
    "token",
    "Token",
    "apiKey",
    "x-api-key",
    "PRIVATE_KEY",
    "Bearer abcdefgh12",
    "bearer\tabcdefghij",
    "eyJhbGciOi.eyJzdWIiOi.sig",
    "https://u:p@host/x",
    "?access_token=1",
    "name",
    "value",
    "authorization",
    "set-cookie",
    "passphrase",
    "max_tokens",
    "idempotency_key",
    "\n",
    '"',
    "\\",
    "\x00",
    "é",
    "scopeId",
    CANARY,
    CANARY[:10],
    "short",
    "ab",
)
_text = st.text(st.sampled_from('aZ_- 09\n"\\é:=@/.')) | st.sampled_from(_PIECES)
_words = st.lists(_text, max_size=4).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _words,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_words, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json, secrets=st.lists(st.sampled_from([CANARY, "short", "ab", 'z\n"q']), max_size=3))
def test_the_screen_never_passes_a_value_the_full_walk_would_change(
    value: Any, secrets: list[str]
) -> None:
    redactor = Redactor(secrets)
    text = msgspec.json.encode(value, order="sorted").decode()
    if not redactor.screen(text):
        assert redactor.redact(value) == value, text


def test_the_screen_passes_an_ordinary_task_and_stops_each_kind_of_secret() -> None:
    redactor = Redactor([CANARY])
    task = {
        "task": {"channel": "general", "number": 7, "title": "Ship the release", "scopeId": "s1"},
        "meta": {"next_cursor": None},
    }

    def screened(value: Any) -> bool:
        return redactor.screen(msgspec.json.encode(value, order="sorted").decode())

    assert not screened(task)
    for dirty in (
        {"title": f"x{CANARY}y"},
        {"apiKey": "1"},
        {"name": "Authorization", "value": "v"},
        {"note": "Bearer abcdefghijkl"},
        {"url": "https://u:p@h/"},
    ):
        assert screened(dirty), dirty
