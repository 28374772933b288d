"""A token echoed as a URL or a form escapes it (its reserved characters as `%XX`, the rest as
it is) reaches neither the model nor the journal: a base64 token's `+`, `/`, `=` cut it into runs
too short to be fragments until the text is read unescaped (journal._fragments). In-process over
the production call path, a hostile upstream answering in each place an upstream writes text."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, quote_plus, unquote

import httpx
import msgspec
import pytest

from agentteam_task_bridge.bridge.testing import ScriptedTokens

from .bridge_inprocess import inprocess_bridge, verified
from .secret_echo import fragments, journal_text, listing, refusal

# A standard-alphabet base64 token, `+` and `/` often enough that no run between two of them is
# ten characters long; and a password with a run of reserved characters.
TOKENS = ("q+Zr/8mNYp2/Lw0+Tb5Hc7+Vd1/Ej3Ug9/Ok+aW=", 'Tr0ub4dor&3"x\\y<z>Qw!')
ESCAPES = {
    "quote": lambda t: quote(t, safe=""),
    "quote_plus, lower-case hex": lambda t: quote_plus(t).lower(),
}
PLACES = {
    "a 2xx title": lambda e: (200, {}, listing(f"see {e}")),
    "a 4xx message": lambda e: (404, {}, refusal("task_not_found", message=f"no task at ?t={e}")),
    "a fieldErrors value": lambda e: (
        400,
        {},
        refusal("validation_failed", fieldErrors={"$.title": f"bad {e}"}),
    ),
    "a deprecation Link": lambda e: (
        200,
        {"deprecation": "@1700000000", "link": f"<https://x/v2?t={e}>; rel=successor-version"},
        listing("ok"),
    ),
    "a non-JSON 502 body": lambda e: (502, {}, f"<html>bad gateway: /cb?state={e}</html>".encode()),
}


@pytest.mark.parametrize("place", list(PLACES))
async def test_a_token_echoed_url_escaped_leaks_neither_to_the_model_nor_the_journal(
    tmp_path: Path, place: str
) -> None:
    for number, token in enumerate(TOKENS):
        for name, escape in ESCAPES.items():
            status, headers, body = PLACES[place](escape(token))
            response = httpx.Response(
                status, headers={"content-type": "application/json", **headers}, content=body
            )
            path = tmp_path / f"{number}-{name}.db"
            tokens = ScriptedTokens([token], kind="test:static", refreshable=False)
            transport = httpx.MockTransport(lambda request, response=response: response)
            async with inprocess_bridge(path, transport, tokens=tokens) as (bridge, _):
                result = await bridge.call("task_list", {"channel": "general"}, {}, 1)
            text = result.content[0].text  # type: ignore[union-attr]
            text += msgspec.json.encode(result.structured_content).decode()
            for where, seen in (("the model", text), ("the journal", journal_text(path))):
                assert fragments(unquote(seen), token) == [], (name, where)
            verified(path)
