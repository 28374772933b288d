"""An upstream whose error pages are UTF-16 (a Windows server's default) echoes the bearer token:
read as UTF-8, the body's head spells it with a NUL after each character (and a 2xx JSON body
holding it so, as `\\u0000` escapes). No run of 12 of its characters, NULs taken out, reaches the
model's answer, the journal's files, stderr, or what `agentteam-replay show` and `report --html`
print. The bridge is a subprocess; the upstream a hostile HTTP/1.1 server on loopback
(tests/secret_echo.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentteam_task_bridge.journal import REDACTED, Redactor

from .bridge_harness import open_bridge
from .replay_helpers import replay_main
from .secret_echo import bridge_env, echo_server, journal_text, leaks, listing

TOKEN = "qv3_Lm9PzR2sXw8TnY4bKd7HjF6gA1cE5oU0iMpQrStV"
_json = msgspec.json.encode


def _page(text: str) -> bytes:
    return f"<html><body>{text}</body></html>".encode("utf-16-le")


ECHOES = {
    "a 502 page": lambda t: (502, [("content-type", "text/html; charset=utf-16")], _page(t)),
    "a 2xx page": lambda t: (200, [("content-type", "text/html; charset=utf-16")], _page(t)),
    "a 400 page, the token cut": lambda t: (400, [], _page("x" * 5000 + t[:20])),
    "a 401 page with a BOM": lambda t: (401, [], b"\xff\xfe" + _page(f"bad {t.upper()}")),
    "a 2xx JSON title": lambda t: (200, [], listing("echo " + "\x00".join(t))),
}


def _unpadded(text: str) -> str:
    return text.replace("\x00", "").replace("\\u0000", "")


def test_a_known_secret_with_a_nul_after_each_character_is_removed() -> None:
    redactor = Redactor([TOKEN])
    for form in (TOKEN, TOKEN.upper(), TOKEN[5:19]):
        text = "denied " + "\x00".join(form) + "\x00 here"
        redacted = redactor.redact_text(text)
        assert redacted.startswith("denied ") and redacted.endswith(" here")
        assert REDACTED in redacted and leaks([("text", _unpadded(redacted))], [TOKEN]) == []
        assert redactor.holds_known(text) and redactor.holds_known_bytes(text.encode())


async def test_a_utf16_error_page_echoing_the_token_leaks_nowhere(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    answers = []
    async with echo_server() as (server, port):
        async with open_bridge(bridge_env(port, TOKEN), path) as bridge:
            for echo in ECHOES.values():
                server.echo = echo
                answers.append(await bridge.call("task_list", {"channel": "general"}))
            stderr = bridge.stderr()
    assert len(server.requests) >= len(ECHOES)
    assert [r.structured_content["error"]["code"] for r in answers[:4]] == [
        "upstream_unavailable",
        "upstream_malformed",
        "upstream_rejected",
        "unauthorized",
    ]
    [task] = answers[4].structured_content["data"]["items"]
    assert task["title"] == f"echo {REDACTED}"  # its JSON spells each NUL `\u0000`
    html = tmp_path / "report.html"
    shown = replay_main("show", path)
    report = replay_main("report", path, "--html", html)
    assert html.exists(), report.stderr
    seen = [
        *(
            (f"answer {i}", r.content[0].text + _json(r.structured_content).decode())
            for i, r in enumerate(answers)
        ),
        ("the journal's files", journal_text(path)),
        ("stderr", stderr),
        ("show", shown.stdout),
        ("report --html", html.read_text()),
    ]
    assert leaks([(where, _unpadded(text)) for where, text in seen], [TOKEN]) == []
    # The head is kept for the audit, the token's place marked.
    assert _unpadded(REDACTED) in _unpadded(journal_text(path))
