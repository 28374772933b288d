"""What the upstream answered, screened for secrets before the bridge converts, cuts or journals it.

The rule (issue 26): a value is screened whole *before* any transformation (snake-casing of
`fieldErrors` paths and `candidates` keys, a cut to 300 characters, the 4 KiB head of a body the
bridge does not parse, the capped prefix of refused arguments), and a cut never splits what the
screen replaced: it takes a marker out whole (`cut`). What each path gets:

* a 2xx body, which becomes the model's data: the **known secrets** (every token the bridge sent,
  a proxy password), whole or as any fragment (`journal._fragments`), are replaced; credentials a
  model wrote into its own tasks come back to it as it wrote them (the journal's copy of them is
  redacted by the writer, with digests);
* a non-2xx body (message, `fieldErrors` keys and values, `candidates`): every rule of the
  journal's redactor (known secrets and fragments, the maintained rule set, shapes, values under
  credential-named keys);
* the kept response headers (a deprecation `Link` among them), the head of a body the bridge
  does not parse, and the prefix of refused arguments: every rule, on the text before it is cut
  (screened to `MARGIN` characters past the cut).

The **hidden context** (workspace and agent ids, the workflow run and callback effect ids a call
carried: `hide`) is no secret, but no result may name it: where a non-2xx body or an unparsed
head names one (a whole id, in any letter case, not inside a longer run of letters and digits), it
becomes `[REDACTED]` too, before the body is classified, cut or journaled (the journal holds it in
`context_injected`). A 2xx body is the model's own data and keeps it.

Invariant: nothing an upstream answer holds reaches the model, the journal or a span without
passing here first. A 2xx body costs a few substring scans of its bytes (`holds_known_bytes`);
the rest runs on error paths, or is remembered (header values repeat).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import msgspec

from agentteam_task_bridge.journal import REDACTED, Redactor

__all__ = ["MARGIN", "Screen", "cut"]

_MARKER: Final = re.compile(r"\[REDACTED(?::sha256:[0-9a-f]{12})?\]")
_LONGEST_MARKER: Final = len("[REDACTED:sha256:000000000000]")
# How far past a cut a text is screened: a secret that starts before the cut and ends within this
# is found whole (the rule set's formats are far shorter; a key block without its END line is
# taken to the end of the text).
MARGIN: Final = 64 * 1024
_encode: Final = msgspec.json.Encoder().encode


def cut(text: str, limit: int, *, utf8: bool = False) -> str:
    """At most `limit` characters (`utf8`: UTF-8 bytes, on a character boundary) of `text`, cut
    before a redaction marker the cut would split."""
    if utf8:
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) <= limit:
            return text
        head = raw[:limit].decode("utf-8", errors="ignore")
    else:
        if len(text) <= limit:
            return text
        head = text[:limit]
    at = len(head)
    for found in _MARKER.finditer(text, max(0, at - _LONGEST_MARKER), at + _LONGEST_MARKER):
        if found.start() < at < found.end():
            return text[: found.start()]
    return head


class Screen:
    """The secrets the bridge knows (the tokens it sent, a proxy password) and their removal."""

    def __init__(self) -> None:
        self._hidden_ids: set[str] = set()  # the hidden context values (`hide`)
        self._hidden: re.Pattern[str] | None = None  # any of them
        self.redactor = Redactor()
        self.values: set[str] = set()
        self.listeners: list[Callable[[str], None]] = []  # told each new secret (telemetry)
        self._slash = False  # a secret holds "/", which JSON may spell `\\/`

    def add(self, secret: str) -> None:
        """Know a secret from now on (idempotent)."""
        if secret and secret not in self.values:
            self.values.add(secret)
            self._slash = self._slash or "/" in secret
            self.redactor.add_secret(secret)
            for listener in self.listeners:
                listener(secret)

    def hide(self, *values: str) -> None:
        """Know hidden context values from now on (idempotent)."""
        fresh = {v for v in values if v} - self._hidden_ids
        if fresh:
            self._hidden_ids |= fresh
            every = sorted(self._hidden_ids, key=len, reverse=True)  # the longest first
            alternatives = "|".join(re.escape(v) for v in every)
            self._hidden = re.compile(
                rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])", re.IGNORECASE
            )

    def _unhidden(self, value: Any) -> Any:
        """`value` (JSON-typed) with every hidden context value replaced, in keys and strings."""
        hidden = self._hidden
        if hidden is None:
            return value
        if isinstance(value, str):
            return hidden.sub(REDACTED, value)
        if isinstance(value, dict):
            return {self._unhidden(str(k)): self._unhidden(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unhidden(item) for item in value]
        return value

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        """Every rule, on each kept header value (they repeat from answer to answer: remembered)."""
        redact = self.redactor.redact_id
        return {name: redact(value) for name, value in headers.items()}

    def answer(self, raw: bytes, body: Any) -> Any:
        """A 2xx body (decoded from `raw`) without the known secrets, whole or in fragments."""
        if body is None or not self.values:
            return body
        if not self.redactor.holds_known_bytes(raw):
            # Only a JSON escape hides a character of a secret from a scan of the bytes: `\\u`
            # any, `\\/` a slash (`\\"`, `\\\\` and control characters are scanned as msgspec
            # spells them too: Redactor.add_secret; a NUL, which fragments skip, is taken out).
            hidden = b"\\u" in raw or (self._slash and b"\\/" in raw)
            text = _encode(body).decode().replace("\\u0000", "") if hidden else ""
            if not hidden or not self.redactor.holds_known(text):
                return body
        return self.redactor.redact_known(body)

    def log_line(self, line: str) -> str:
        """A formatted log line without the known secrets (whole, cut, re-cased) and hidden
        context: the SDK's debug lines name what a client sent (a dropped response's id)."""
        return str(self._unhidden(self.redactor.redact_known(line)))

    def failure(self, body: Any) -> Any:
        """A non-2xx body with every rule applied, before it is classified, renamed or cut."""
        return None if body is None else self._unhidden(self.redactor.redact(body))

    def head(self, raw: bytes, limit: int, *, utf8: bool = False) -> str:
        """The start of `raw` as text, at most `limit` characters (`utf8`: bytes), screened whole
        to MARGIN past the cut and cut without splitting what the screen replaced."""
        text = raw[: 4 * limit + MARGIN].decode("utf-8", errors="replace")
        return cut(self._unhidden(self.redactor.redact_text(text)), limit, utf8=utf8)


class LogScreen:
    """What every log line ``serve`` writes to stderr passes through, whatever logger wrote it:
    once the session's Screen is set here, its known secrets and hidden context are taken out
    of the formatted line (the SDK logs at debug what a client sent it: a response's id that held
    the token reached stderr as it came). Before that, a line is kept as it is."""

    def __init__(self) -> None:
        self.screen: Screen | None = None

    def __call__(self, line: str) -> str:
        screen = self.screen
        return line if screen is None else screen.log_line(line)


LOG_SCREEN = LogScreen()
