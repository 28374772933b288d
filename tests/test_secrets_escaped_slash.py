"""An upstream that spells "/" as JSON's optional escape `\\/` (PHP's json_encode does by default)
echoes a bearer token holding slashes (a base64 token): no run of 12 of its characters reaches the
model's answer or the journal, whichever run it echoes. The bridge is a subprocess; the upstream
a hostile HTTP/1.1 server on loopback (tests/secret_echo.py)."""

from __future__ import annotations

import functools
from pathlib import Path

import msgspec
import pytest

from .bridge_harness import open_bridge
from .secret_echo import RUN, bridge_env, echo_server, journal_text, leaks, listing

TOKENS = {
    "base64": "Zq8pW3rT/vN5mK2x+Yb7Lc9Q/Hj4Fd6Sa1Ge0Ru==",
    "a slash every 3rd character": "ab/cd/ef/gh/ij/kl/mn/op/qr/st",
    "a path": "/tokens/7f3a9c2e/b41d/value",
}
# How the upstream spells "/" in its JSON: the optional escape, and \u002f (in any case).
_json = msgspec.json.encode
SPELLINGS = {"\\/": b"\\/", "\\u002f": b"\\u002f", "\\u002F": b"\\u002F"}


def _echo(at: int, spelling: bytes, sent: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """A listing whose title is the run of RUN characters at `at` of the token the request
    carried, every "/" of the body spelled `spelling`."""
    return 200, [], listing(f"echo {sent[at : at + RUN]} here").replace(b"/", spelling)


@pytest.mark.parametrize("spelling", SPELLINGS.values(), ids=SPELLINGS.keys())
@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
async def test_a_token_echoed_with_its_slashes_escaped_leaks_nowhere(
    tmp_path: Path, token: str, spelling: bytes
) -> None:
    path = tmp_path / "journal.db"
    answers = []
    async with echo_server() as (server, port):
        async with open_bridge(bridge_env(port, token), path) as bridge:
            for i in range(len(token) - RUN + 1):  # one run a call: each answer on its own
                server.echo = functools.partial(_echo, i, spelling)
                result = await bridge.call("task_list", {"channel": "general"})
                answers.append(result)
            stderr = bridge.stderr()
    assert server.requests, "the bridge reached the echo server"
    seen = [
        (f"the answer to run {i}", r.content[0].text + _json(r.structured_content).decode())
        for i, r in enumerate(answers)
    ]
    files = [("the journal's files", journal_text(path)), ("stderr", stderr)]
    assert leaks([*seen, *files], [token]) == []
    assert all("echo [REDACTED] here" in text for _, text in seen)  # screened, not lost
