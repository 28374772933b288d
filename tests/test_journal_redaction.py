"""Secrets never land: a canary token, passed everywhere a careless caller could, stays out."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import REDACTED, Redactor
from agentteam_task_bridge.journal._redact import format_rules, secret_marker

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
        journal.Event(  # a tool name is the model's: it can hold anything
            session_id=SESSION,
            call_id="c2",
            mcp_method_name=f"tools/call {CANARY}",
            gen_ai_tool_name=f"task_{CANARY}",
            payload=journal.CallRejected(error_code="unknown_tool", message="unknown tool"),
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


# --- well-known credential formats, found by the maintained rule set (detect-secrets) ---

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)
# Each format twice (two different values must get two different digests).
FORMATS: dict[str, tuple[str, str]] = {
    "aws access key": ("AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A"),
    "github token": (
        "ghp_" + "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx",
        "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    "gitlab token": ("glpat-" + "xkR3nTq8Zp2mW6vYbC4d", "glpat-" + "A1b2C3d4E5f6G7h8I9j0"),
    "slack token": (
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxp-210987654321-3210987654321-ZyXwVuTsRqPoNmLkJiHgFeDc",
    ),
    "openai key": (
        "sk-" + "A1b2C3d4E5f6G7h8I9j0" + "T3BlbkFJ" + "K1l2M3n4O5p6Q7r8S9t0",
        "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0" + "T3BlbkFJ" + "p0O9i8U7y6T5r4E3w2Q1",
    ),
    "stripe key": (
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "51HbC2kL9mN0pQ1rS2tU3vW4",
    ),
    "sendgrid key": (
        "SG." + "ngeVfQFYQlKU0ufo8x5d1A" + "." + "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
        "SG." + "AbCdEfGhIjKlMnOpQrStUv" + "." + "0123456789abcdefghijABCDEFGHIJ-_klmnopqrstu",
    ),
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IifQ."
        "Mb8PzJ3xLOGf4wO7iBZyTH6dwh9oqiKcYm7dmGJOeXQ",
    ),
    "private key": (PEM, PEM.replace("u1SU1Lf", "q9XZ7Hd")),
}


def _marker_digests(text: str) -> list[str]:
    return re.findall(r"\[REDACTED:sha256:([0-9a-f]{12})\]", text)


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_each_format_is_replaced_by_a_marker_keeping_its_digest(kind: str) -> None:
    first, second = FORMATS[kind]
    redactor = Redactor()
    out = [redactor.redact_text(f"see {value} (from the model)") for value in (first, second)]
    for value, text in zip((first, second), out, strict=True):
        assert value not in text and value[-12:] not in text, text
        assert text.startswith("see [REDACTED:sha256:") and text.endswith("] (from the model)")
        assert _marker_digests(text) == [secret_marker(value)[17:-1]]
    assert _marker_digests(out[0]) != _marker_digests(out[1])
    # The screen lets the encoded value through to the walk.
    assert redactor.screen(msgspec.json.encode({"description": first}).decode())


@pytest.mark.parametrize(
    "text",
    [
        "Ship the release notes for 2.3 before Friday",
        "ACME's API TASK list: see https://example.com/docs?page=2#top",
        "数据库迁移 🚀" * 20,
        "tsk_01JD8X2Y3Z4W5V6U7T8S9R0Q1P updated 2026-12-02T00:00:00.000000Z",
        "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "the high road through the global glossary",
        # A list cursor looks like a JWT to the pattern, but the plugin's check says no.
        "eyJkIjoiZDcwMmE1MjFiOTY2ZGQ5YTZiMDAxZDY5IiwiayI6WzFdfQ.073586331382a27c",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert Redactor().redact({"title": text, text: [text]}) == {"title": text, text: [text]}


def _rule_patterns() -> list[re.Pattern[str]]:
    return [pattern for rule in format_rules() for pattern in rule.patterns]


_matches = st.sampled_from(_rule_patterns()).flatmap(lambda p: st.from_regex(p, fullmatch=True))
_around = st.text(st.sampled_from("aZ09 _-.:/@=\"'\n{}é😀"), max_size=12) | st.sampled_from(
    [*(v for pair in FORMATS.values() for v in pair), "://", "@", "Bearer ", "eyJ", "?token="]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_matches | _around, min_size=1, max_size=5))
def test_redaction_never_leaves_anything_the_rule_set_reports(parts: list[str]) -> None:
    out = Redactor().redact_text("".join(parts))
    assert not [(rule.name, found) for rule in format_rules() for found in rule.reports(out)], out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=st.sampled_from(_rule_patterns()).flatmap(st.from_regex), key=_words)
def test_the_screen_sees_every_match_of_the_rule_set_through_json(found: str, key: str) -> None:
    text = msgspec.json.encode({key: [found]}).decode()
    assert Redactor().screen(text), text


@pytest.mark.parametrize("api_url", ["http://127.0.0.1:8765", "https://agentteam.example.com/api"])
def test_a_session_start_passes_the_format_screen(api_url: str) -> None:
    """`serve` answers its first tools/list once the session's start is journaled, and loads the
    rule set only after: that record must not need it (its URL holds `//`, never a credential)."""
    from agentteam_task_bridge.journal._redact import _may_hold_format

    started = journal.SessionStarted(
        bridge_version="0.1.0",
        compat_policy="hint",
        client_name="claude-code",
        client_version="2.0.1",
        protocol_version="2025-11-25",
        workspace_id="ws_local",
        agent_id="agt_local",
        api_url=api_url,
    )
    text = msgspec.json.encode(started).decode()
    assert not _may_hold_format(text), text
    assert not Redactor().screen(text), text


@pytest.mark.parametrize(
    "value",
    [
        {"assignee": "@alice", "createdBy": "@local-agent"},  # handles: in every task
        {"link": "https://example.com/docs"},  # a URL without credentials
        {"deprecation": "@1796083200"},  # RFC 9745's date
    ],
)
def test_handles_or_urls_alone_do_not_need_the_rule_set(value: dict[str, str]) -> None:
    """Basic auth's screen asks for both `://` and `@`: either alone is common traffic, and
    the rule set costs ~0.1 ms a text (the instruction guard's task_get moved +16% when `@`
    alone sent every task through it)."""
    from agentteam_task_bridge.journal._redact import _may_hold_format

    text = msgspec.json.encode(value).decode()
    assert not _may_hold_format(text), text
    assert not Redactor().screen(text), text


def test_a_url_with_credentials_beside_a_handle_is_redacted() -> None:
    text = msgspec.json.encode(
        {"by": "@alice", "url": "https://bob:hunter2x@example.com/"}
    ).decode()
    assert Redactor().screen(text)
    assert (
        "hunter2x" not in msgspec.json.encode(Redactor().redact(msgspec.json.decode(text))).decode()
    )


def test_a_credential_format_in_a_tool_name_is_redacted(tmp_path: Path) -> None:
    """The envelope's text columns get the payload's rules: a model's tool name is free text."""
    token = "ghp_" + "a1B2" * 9
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.append(
            journal.Event(
                session_id=SESSION,
                call_id="c1",
                mcp_method_name="tools/call",
                gen_ai_tool_name=f"task_get {token}",
                payload=journal.CallRejected(error_code="unknown_tool", message="unknown tool"),
            )
        )
    with journal.open_reader(path) as reader:
        (record,) = reader.events()
    assert record.gen_ai_tool_name == f"task_get {secret_marker(token)}"
    assert record.mcp_method_name == "tools/call"
