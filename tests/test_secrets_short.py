"""A known secret of 8 or 9 characters (a short bearer token or proxy password): too short to
have fragments (journal._fragments), it is still found whole in every case form an echo gives it
(upper-cased, case swapped, snake_cased or kebab-cased by the bridge's own renaming of
`fieldErrors` keys), on the model's answers and in the journal's files. The bridge is a
subprocess; the upstream a hostile HTTP/1.1 server on loopback (tests/secret_echo.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentteam_task_bridge.journal import REDACTED, Redactor

from .bridge_harness import open_bridge
from .secret_echo import bridge_env, echo_server, fold, journal_text, listing, refusal

_json = msgspec.json.encode
SHORT = {"9 characters": "Hunter22x", "8 characters": "pR0xyPas"}
FORMS = {
    "as sent": str,
    "upper-cased": str.upper,
    "lower-cased": str.lower,
    "case swapped": str.swapcase,
    "snake_cased": lambda s: "".join("_" + c.lower() if c.isupper() else c for c in s),
    "kebab-cased": lambda s: s[:4] + "-" + s[4:],
}


def _holds(text: str, secret: str) -> bool:
    return fold(secret) in fold(text)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("secret", SHORT.values(), ids=SHORT.keys())
def test_a_short_known_secret_is_found_whole_in_every_case_form(secret: str, form: str) -> None:
    redactor = Redactor([secret])
    text = f"the upstream said {FORMS[form](secret)}, then more"
    redacted = redactor.redact_text(text)
    assert redacted.startswith("the upstream said ") and redacted.endswith(", then more")
    assert REDACTED in redacted and not _holds(redacted, secret)
    assert redactor.holds_known(text) and redactor.holds_known_bytes(text.encode())
    assert redactor.screen(_json({"k": text}).decode())
    # Shorter than the secret it is not the secret: kept.
    assert redactor.redact_text(f"say {secret[:7]}!") == f"say {secret[:7]}!"


def _echoes(token: str) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    forms = [f(token) for f in FORMS.values()]
    return [
        (200, [], listing(*(f"echo {f}" for f in forms))),
        (200, [("x-request-id", token.upper())], listing("ok")),
        (400, [], refusal("validation_failed", fieldErrors={token: "bad", f"$.{token}": "x"})),
        (404, [], refusal("channel_not_found", candidates=[{"channel": token.swapcase()}])),
        (502, [], f"<html>bad gateway for {token.upper()}</html>".encode()),
    ]


async def test_a_short_token_echoed_in_another_case_reaches_neither_model_nor_journal(
    tmp_path: Path,
) -> None:
    token = SHORT["9 characters"]
    path = tmp_path / "journal.db"
    echoes = _echoes(token)
    answers = []
    async with echo_server() as (server, port):
        async with open_bridge(bridge_env(port, token), path) as bridge:
            for echo in echoes:
                server.echo = lambda _sent, echo=echo: echo
                answers.append(await bridge.call("task_list", {"channel": "general"}))
            stderr = bridge.stderr()
    assert len(server.requests) >= len(echoes)
    texts = [r.content[0].text + _json(r.structured_content).decode() for r in answers]
    assert [t for t in texts if _holds(t, token)] == []
    assert not _holds(journal_text(path), token) and not _holds(stderr, token)
    titles = [item["title"] for item in answers[0].structured_content["data"]["items"]]
    assert all(t.startswith("echo ") and REDACTED in t for t in titles)  # screened, not lost
