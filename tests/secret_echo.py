"""A hostile Agent Runtime for the secret tests, and the grep that finds a fragment of a secret.

`EchoServer` answers every request with `echo(token)`: the bearer token the request carried,
written back in each form issue 26 found leaking (a 2xx body, a `fieldErrors` key and value,
`candidates`, a deprecation `Link`, a non-JSON body), placed so that a cut of the bridge's
falls inside it, and re-encoded (base64 at each alignment, percent-escapes). `leaks` is the leak
test: any run of 12 characters of a secret, in the forms journal._fragments documents (any
letter case, `_`/`-` added or removed), or 12 bytes of it in base64 or percent-escapes.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from agentteam_task_bridge.bridge.testing import upstream_task

# (status, extra headers, body) answered to a request that carried `token`.
Echo = Callable[[str], tuple[int, list[tuple[str, str]], bytes]]
_json = msgspec.json.encode
RUN = 12  # a run this long of a secret is a leak (issue 26)


def fold(text: str) -> str:
    return text.lower().replace("_", "").replace("-", "")


def fragments(haystack: str, secret: str) -> list[str]:
    """The runs of RUN characters of `secret` that `haystack` holds, in any letter case and with
    `_`/`-` added or removed (a run whose folded form keeps at least ten characters: the forms
    the bridge promises to find, journal._fragments)."""
    folded = fold(haystack)
    found = []
    for start in range(len(secret) - RUN + 1):
        window = fold(secret[start : start + RUN])
        if len(window) >= 10 and window in folded:
            found.append(secret[start : start + RUN])
    return found


def encodings(secret: str) -> list[tuple[str, int]]:
    """The secret re-encoded as an upstream may echo it, each with the length of a leak in it (12
    bytes of the secret): base64 in both alphabets after 0, 1 or 2 other bytes (what its own bits
    fix: 16 characters), percent-escapes of every byte in both cases of hex (36 characters)."""
    raw = secret.encode()
    forms = []
    for align in range(3):
        encoded = base64.b64encode(b"\xff" * align + raw).decode()
        core = encoded[(8 * align + 5) // 6 : 8 * (align + len(raw)) // 6]
        forms += [(core, 16), (core.translate(str.maketrans("+/", "-_")), 16)]
    escaped = "".join(f"%{byte:02X}" for byte in raw)
    return [*forms, (escaped, 36), (escaped.lower(), 36)]


def encoded_fragments(haystack: str, secret: str) -> list[str]:
    """The leaks of `encodings(secret)` that `haystack` holds, exactly as encoded."""
    return [
        form[start : start + run]
        for form, run in encodings(secret)
        for start in range(len(form) - run + 1)
        if form[start : start + run] in haystack
    ]


def leaks(texts: Iterable[tuple[str, str]], secrets: Iterable[str]) -> list[str]:
    """`where: run` for each fragment of each secret in each named text, plain or re-encoded."""
    secrets = list(secrets)
    return [
        f"{where}: {run}"
        for where, text in texts
        for s in secrets
        for run in [*fragments(text, s), *encoded_fragments(text, s)]
    ]


def journal_text(path: Path) -> str:
    """Every file of the journal's directory (database, -wal, -shm, exported checkpoint, key
    aside), as one text to grep."""
    files = [p for p in path.parent.iterdir() if p.is_file() and p.name.startswith(path.name)]
    assert path in files
    return "\n".join(p.read_bytes().decode("latin-1") for p in sorted(files))


def listing(*titles: str) -> bytes:
    items = [upstream_task(number=i + 1, title=t) for i, t in enumerate(titles)]
    return _json({"channel": "general", "items": items})


def refusal(code: str, **error: Any) -> bytes:
    return _json({"error": {"code": code, "message": "refused", **error}})


def across(secret: str, cut: int, offset: int, pad: str = "p") -> str:
    """Padding and `secret`, so that a cut at `cut` falls after its first `offset` characters."""
    return pad * (cut - offset) + secret


def _b64(text: str, *, url: bool = False) -> str:
    encode = base64.urlsafe_b64encode if url else base64.b64encode
    return encode(text.encode()).decode()


def _pct(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


def escaped(text: str) -> bytes:
    return "".join(f"\\u{ord(c):04x}" for c in text).encode()


ECHOES: dict[str, Echo] = {
    "a 2xx body": lambda t: (200, [], listing(f"echo {t}", f"upper {t.upper()}", t[:20])),
    "a 2xx body in JSON escapes": lambda t: (
        200,
        [],
        listing("ESC").replace(b'"ESC"', b'"' + escaped(t) + b'"'),
    ),
    "fieldErrors keys": lambda t: (
        400,
        [],
        refusal("validation_failed", fieldErrors={t: "bad", f"$.x{t}Y": "bad"}),
    ),
    "a fieldErrors value cut at 300": lambda t: (
        400,
        [],
        refusal("validation_failed", fieldErrors={"$.title": across(t, 300, len(t) - 1)}),
    ),
    "candidates": lambda t: (
        404,
        [],
        refusal("channel_not_found", candidates=[{"channel": t, "displayName": t.upper()}]),
    ),
    "a deprecation Link cut at 300": lambda t: (
        200,
        [("deprecation", "@1700000000"), ("link", f"<https://x/{across(t, 288, 16)}>")],
        listing("ok"),
    ),
    "a non-JSON body cut at 4096": lambda t: (
        502,
        [],
        (across(t, 4096, 20) + " <html>" + "x" * 5000).encode(),
    ),
    "a non-JSON 2xx body cut at 4096": lambda t: (
        200,
        [],
        (across(t, 4096, 30) + " <html>").encode(),
    ),
    "base64 in 2xx titles, at each alignment": lambda t: (
        200,
        [],
        listing(*(_b64(prefix + t) for prefix in ("", "u:", "bob:")), _b64(t, url=True)),
    ),
    "Basic credentials in a fieldErrors value cut at 300": lambda t: (
        400,
        [],
        refusal("validation_failed", fieldErrors={"$.title": across(_b64("me:" + t), 300, 20)}),
    ),
    "percent-escapes in a Link and a 2xx title": lambda t: (
        200,
        [("deprecation", "@1700000000"), ("link", f"<https://x/?t={_pct(t)}>")],
        listing(_pct(t).lower()),
    ),
}


@dataclass
class EchoServer:
    """HTTP/1.1 on loopback: answers each request with `echo(token)`; keeps what it was sent."""

    echo: Echo = field(default=ECHOES["a 2xx body"])
    requests: list[dict[bytes, bytes]] = field(default_factory=list)

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    got = await stream.receive_some(65536)
                    if not got:
                        return
                    buffer += got
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                headers = dict(line.split(b": ", 1) for line in lines[1:] if b": " in line)
                headers[b":target"] = lines[0].split(b" ")[1]
                length = int(headers.get(b"content-length", b"0"))
                while len(buffer) < length:
                    buffer += await stream.receive_some(65536)
                buffer = buffer[length:]
                self.requests.append(headers)
                token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
                status, extra, body = self.echo(token)
                out = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}"]
                out += ["content-type: application/json", *(f"{k}: {v}" for k, v in extra)]
                await stream.send_all("\r\n".join(out).encode() + b"\r\n\r\n" + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


def bridge_env(port: int, token: str) -> dict[str, str]:
    return {
        "AGENTTEAM_API_URL": f"http://127.0.0.1:{port}",
        "AGENTTEAM_WORKSPACE_ID": "ws_1",
        "AGENTTEAM_AGENT_ID": "agt_1",
        "AGENTTEAM_TOKEN": token,
    }


def span_text(spans: Iterable[Any]) -> str:
    """Everything an exported span says, as one text: name, attributes, events, status."""
    parts = []
    for span in spans:
        parts += [span.name, span.status.message, str(span.attributes)]
        parts += [f"{e.name} {e.attributes}" for e in span.events]
    return "\n".join(parts)


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[EchoServer, int]]:
    """An EchoServer on a loopback port of its own, for the block: (server, port)."""
    server = EchoServer()
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(
            functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
        )
        yield server, listener.socket.getsockname()[1]
        nursery.cancel_scope.cancel()
