"""Fragments of a known secret (journal._fragments): found in every documented form, removed
whole, seen by the writer's screen through JSON; cuts that never leave part of what was found."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus, unquote

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.bridge._dto import snake, snake_path
from agentteam_task_bridge.bridge._screen import cut
from agentteam_task_bridge.journal import REDACTED, Redactor, cut_point
from agentteam_task_bridge.journal._redact import secret_marker

from .secret_echo import _b64, _pct, encoded_fragments, fragments, leaks

TOKEN = "atk_7xxon8CZtyRsi5rp2dEYfmwZQPqpdTIRoejsI4O_aHk"
GHP = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
FORMS = {
    "whole": TOKEN,
    "upper-cased": TOKEN.upper(),
    "snake_cased": "".join("_" + c.lower() if c.isupper() else c for c in TOKEN),
    "kebab, no underscores": TOKEN.replace("_", "-"),
    "a 12-character prefix": TOKEN[:12],
    "all but the last character": TOKEN[:-1],
    "a 12-character suffix": TOKEN[-12:],
    "12 characters from the middle": TOKEN[17:29],
}
PLAIN = set(FORMS)
FORMS |= {
    "base64": _b64(TOKEN),
    "base64 after one byte": _b64("bob:" + TOKEN),
    "base64 after two bytes (Basic credentials)": _b64("u:" + TOKEN),
    "URL-safe base64, unpadded": _b64("bob:" + TOKEN, url=True).rstrip("="),
    "16 characters of base64 from the middle": _b64(TOKEN)[20:36],
    "percent-escapes": _pct(TOKEN),
    "percent-escapes in lower-case hex, 12 bytes": _pct(TOKEN)[30:66].lower(),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_of_a_known_secret_is_removed_and_screened(form: str) -> None:
    redactor = Redactor([TOKEN])
    text = f"the upstream said {FORMS[form]}, then more"
    redacted = redactor.redact_text(text)
    assert redacted.startswith("the upstream said ") and redacted.endswith(", then more")
    assert REDACTED in redacted and leaks([(form, redacted)], [TOKEN]) == []
    assert redactor.screen(msgspec.json.encode({FORMS[form]: text}).decode())
    assert redactor.holds_known(text) and redactor.holds_known_bytes(text.encode())
    # An encoded form keeps what is not wholly the secret's (a prefix's characters, the last
    # character's other bits, `=` padding): never 12 bytes of it.
    key = REDACTED if form in PLAIN else redactor.redact_known(FORMS[form])
    assert redactor.redact_known({FORMS[form]: [text]}) == {key: [redacted]}
    assert REDACTED in key and leaks([(form, key)], [TOKEN]) == []


def test_what_is_not_a_fragment_is_kept() -> None:
    redactor = Redactor([TOKEN])
    # Nine letters and digits of it (a run of 12 holding three `_`) is under the documented run.
    short = "atk_7xxon8"
    ordinary = f"ids {short}, hashes 3f2a9c0d1e4b5a6f, words Ship the release"
    assert redactor.redact_text(ordinary) == ordinary
    assert redactor.redact_known(ordinary) == ordinary


_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(st.sampled_from(_ALPHABET), min_size=12, max_size=48),
    form=st.sampled_from([str, str.upper, str.lower, lambda t: t.replace("_", "")]),
    start=st.integers(min_value=0, max_value=48),
    size=st.integers(min_value=12, max_value=48),
    around=st.tuples(st.text(max_size=8), st.text(max_size=8)),
)
def test_no_run_of_a_secret_survives_redaction_in_any_form(
    secret: str, form: Callable[[str], str], start: int, size: int, around: tuple[str, str]
) -> None:
    redactor = Redactor([secret])
    piece = form(secret)[start : start + size]
    text = around[0] + piece + around[1]
    redacted = redactor.redact_text(text)
    assert fragments(redacted, secret) == []
    if redacted != text:
        assert redactor.screen(msgspec.json.encode(text).decode())


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(st.characters(codec="utf-8"), min_size=12, max_size=48),
    prefix=st.binary(max_size=5),
    url=st.booleans(),
    start=st.integers(min_value=0, max_value=70),
    size=st.integers(min_value=16, max_value=70),
    around=st.tuples(st.text(max_size=8), st.text(max_size=8)),
)
def test_no_12_bytes_of_a_secret_survive_in_base64_at_any_alignment(
    secret: str, prefix: bytes, url: bool, start: int, size: int, around: tuple[str, str]
) -> None:
    import base64

    redactor = Redactor([secret])
    encode = base64.urlsafe_b64encode if url else base64.b64encode
    piece = encode(prefix + secret.encode()).decode()[start : start + size]
    text = around[0] + piece + around[1]
    redacted = redactor.redact_text(text)
    assert encoded_fragments(redacted, secret) == []
    if redacted != text:
        assert redactor.screen(msgspec.json.encode(text).decode())
        assert redactor.holds_known(text) and redactor.holds_known_bytes(text.encode())


# What URLs and forms escape (RFC 3986 reserved characters, quotes, brackets, space, `%`).
_RESERVED = "+/=:@&?#!$'()*,;[] \"<>\\%"
# Encoders as upstreams and proxies run them: Python's quote (keeping `/`, or nothing),
# quote_plus (forms, Go's QueryEscape), JavaScript's encodeURIComponent; either case of hex.
_URL_ENCODERS: dict[str, Callable[[str], str]] = {
    "quote": lambda t: quote(t),
    "quote, nothing safe": lambda t: quote(t, safe=""),
    "quote_plus": lambda t: quote_plus(t),
    "encodeURIComponent": lambda t: quote(t, safe="-_.!~*'()"),
    "lower-case hex": lambda t: re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(t, safe="")),
    "escaped twice (a URL in a URL's query)": lambda t: quote(quote(t, safe=""), safe=""),
}


@settings(max_examples=400, deadline=None)
@given(
    secret=st.text(st.sampled_from(_ALPHABET[:62] + _RESERVED), min_size=12, max_size=48),
    encoder=st.sampled_from(list(_URL_ENCODERS)),
    start=st.integers(min_value=0, max_value=48),
    size=st.integers(min_value=12, max_value=48),
    around=st.tuples(st.text(max_size=8), st.text(max_size=8)),
)
def test_no_run_of_a_secret_survives_percent_escaping_of_its_reserved_characters(
    secret: str, encoder: str, start: int, size: int, around: tuple[str, str]
) -> None:
    """A base64 token's `+`, `/`, `=` or a password's `&`, `"`, `!` escaped as a URL or a form
    escapes them: no run of 12 of its characters is left once the text is unescaped."""
    redactor = Redactor([secret])
    piece = _URL_ENCODERS[encoder](secret[start : start + size])
    text = around[0] + piece + around[1]
    redacted = redactor.redact_text(text)
    for unescaped in (unquote(redacted), unquote(unquote(redacted))):
        assert fragments(unescaped, secret) == [], (piece, redacted)
    if redacted != text:
        assert redactor.screen(msgspec.json.encode(text).decode())
        assert redactor.holds_known(text) and redactor.holds_known_bytes(text.encode())


def test_encoded_text_that_is_not_a_secret_is_kept() -> None:
    import base64

    redactor = Redactor([TOKEN])
    other = base64.b64encode(b"a checkpoint of the release notes").decode()
    ordinary = f"blob {other}, link https://x/a%20b%2Fc%3Fd, {_b64(TOKEN)[:12]}"
    assert redactor.redact_text(ordinary) == ordinary
    assert redactor.redact_known(ordinary) == ordinary


def test_a_cut_never_splits_a_marker_nor_a_credential_the_rule_set_finds() -> None:
    marker = secret_marker(GHP)
    text = "p" * 20 + marker + " tail"
    for limit in range(20, 20 + len(marker)):
        assert cut(text, limit) == "p" * 20
    assert cut(text, 20 + len(marker)) == "p" * 20 + marker
    assert cut("é" * 10 + marker, 21, utf8=True) == "é" * 10  # bytes: a marker is not split
    raw = "p" * 50 + GHP + " more"
    assert [cut_point(raw, keep) for keep in (50, 60, 89, 90, 200)] == [50, 50, 50, 90, 200]


def test_snake_casing_keeps_redaction_markers() -> None:
    marker = secret_marker(GHP)
    assert snake(f"x{marker}Y") == f"x{marker}_y"
    assert snake_path(f"$.parentTask.{REDACTED}") == f"$.parent_task.{REDACTED}"


def test_a_proxy_password_and_its_basic_credentials_are_known_secrets() -> None:
    import base64

    from agentteam_task_bridge.bridge._network import parse_proxy

    proxy = parse_proxy("http_proxy", "http://alice:s3cret%2FPassw0rd@127.0.0.1:3128")
    sent = base64.b64encode(b"alice:s3cret/Passw0rd").decode()
    assert proxy.secrets == (sent, "s3cret/Passw0rd")
    assert proxy.authorization == b"Basic " + sent.encode()
    assert parse_proxy("http_proxy", "http://127.0.0.1:3128").secrets == ()


def test_a_result_cut_to_its_budget_never_keeps_part_of_a_credential() -> None:
    from agentteam_task_bridge.bridge._budget import ELLIPSIS, cut_text

    text = "p" * 50 + GHP + " and more text after it" * 5
    for max_bytes in range(53, 53 + len(GHP)):  # keeps 50 + 0..39 bytes, then "…"
        head = cut_text(text, max_bytes)
        assert head == "p" * 50 + ELLIPSIS, max_bytes  # never 4..39 characters of the token
    assert cut_text(text, 100).startswith("p" * 50 + GHP)
