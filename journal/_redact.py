"""Redaction at the journal boundary: no credential reaches the file, whatever the caller passes.

Three rules, applied to every payload (any depth) and to the envelope's text columns:

* **by key name** — the value of a mapping key that names a credential is replaced whole. Keys are
  compared case-insensitively after camelCase and ``-`` are folded to ``_``: a key equal to, or
  ending in ``_`` + one of, ``authorization``, ``token``, ``access_token``, ``secret``,
  ``password``, ``passwd``, ``api_key``, ``apikey``, ``credential(s)``, ``cookie``,
  ``private_key``, ``session_key``... (see ``_SECRET_NAMES``). ``{"name": ..., "value": ...}`` pairs
  (HTTP header lists, injected-context fields) whose name is such a key get their value replaced.
  Words that only contain a name (``max_tokens``, ``token_source``, ``idempotency_key``) are kept.
* **by shape** — ``Bearer <x>`` credentials (8+ token characters), JWTs, ``user:password@`` in
  URLs and credential query parameters (``?access_token=...``) inside any string.
* **by value** — every secret the writer was told about (``add_secret``: the current bearer token,
  a refreshed one) is replaced wherever it occurs inside any string or key.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, Final

import msgspec

__all__ = ["REDACTED", "Redactor"]

REDACTED: Final = "[REDACTED]"

# A secret shorter than this is only replaced where a whole string equals it: replacing a short
# value inside every string would shred unrelated text.
MIN_SUBSTRING_SECRET: Final = 8

_SECRET_NAMES: Final = frozenset(
    {
        "authorization",
        "proxy_authorization",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "bearer",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "passphrase",
        "api_key",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "set_cookie",
        "private_key",
        "session_key",
        "signing_key",
        "x_api_key",
    }
)
_SECRET_SUFFIXES: Final = tuple(
    "_" + name
    for name in (
        "authorization",
        "token",
        "secret",
        "password",
        "passwd",
        "api_key",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "private_key",
    )
)

_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Each shape rule: a cheap test that must hold for the pattern to match, the pattern, the
# replacement. The tests keep the hot path (plain text) free of regex scans.
_SHAPES: Final[tuple[tuple[Callable[[str], bool], re.Pattern[str], str], ...]] = (
    (
        lambda t: "bearer" in t.lower(),
        re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*"),
        r"\1 " + REDACTED,
    ),
    (
        lambda t: "eyJ" in t,
        re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
        REDACTED,
    ),
    (
        lambda t: "@" in t and "://" in t,
        re.compile(r"(://)[^/\s:@]+:[^/\s@]+@"),
        r"\1" + REDACTED + "@",
    ),
    (
        lambda t: "=" in t,
        re.compile(
            r"(?i)([?&](?:access_token|refresh_token|id_token|token|api_key|apikey|key|secret|"
            r"password|client_secret|sig|signature)=)[^&#\s]+"
        ),
        r"\1" + REDACTED,
    ),
)


@functools.lru_cache(maxsize=4096)
def is_secret_name(key: str) -> bool:
    """Whether a mapping key names a credential (see the module docstring)."""
    folded = _CAMEL.sub("_", key).lower().replace("-", "_").strip("_")
    return folded in _SECRET_NAMES or folded.endswith(_SECRET_SUFFIXES)


# The screen (`Redactor.screen`): every secret name with `_` removed, as it must appear in a
# JSON text lower-cased with `_` and `-` removed when a key (or a `name`) of it is secret-named;
# a word containing another is left out (`accesstoken` holds `token`). Plain `in` tests: a regex
# alternation of these costs six times as much on a typical payload.
_NAME_WORDS: Final = tuple(
    sorted({name.replace("_", "") for name in (*_SECRET_NAMES, *(s[1:] for s in _SECRET_SUFFIXES))})
)
_SCREEN_WORDS: Final = tuple(
    word for word in _NAME_WORDS if not any(other in word for other in _NAME_WORDS if other != word)
)
_json_text: Final = msgspec.json.Encoder().encode


class Redactor:
    """Removes credentials from JSON-typed values; knows the secrets it was told about."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._long: list[str] = []
        self._short: set[str] = set()
        # The secrets as they appear in JSON text: inside a string (long), as a whole one (short).
        self._long_json: list[str] = []
        self._short_json: list[str] = []
        # Mapping keys repeat from event to event, and so do a few whole payloads: remember what
        # each became (forgotten when a secret is added).
        self._keys: dict[str, str] = {}
        self._texts: dict[str, str] = {}
        for value in secrets:
            self.add_secret(value)

    def add_secret(self, value: str) -> None:
        """Register a secret value to be replaced wherever it occurs (e.g. a bearer token)."""
        if not value:
            return
        self._keys.clear()
        self._texts.clear()
        quoted = _json_text(value).decode()
        if len(value) >= MIN_SUBSTRING_SECRET:
            if value not in self._long:
                self._long.append(value)
                self._long.sort(key=len, reverse=True)
                self._long_json.append(quoted[1:-1])
        elif value not in self._short:
            self._short.add(value)
            self._short_json.append(quoted)

    def screen(self, text: str) -> bool:
        """Whether `redact` could change the value whose JSON encoding is `text` (msgspec's: only
        `"`, `\\` and control characters escaped). False means the value is clean as it is.

        Each rule's trace survives JSON encoding: a secret value as its escaped form, a shape by
        the literal its cheap test looks for, a secret-named key (or `name`) by its letters once
        case, `_` and `-` are folded away. The screen may say True for clean text (the full walk
        then finds nothing), never False for text the walk would change.
        """
        if any(secret in text for secret in self._long_json):
            return True
        if any(secret in text for secret in self._short_json):
            return True
        if any(test(text) for test, _pattern, _replacement in _SHAPES):
            return True
        folded = text.lower().replace("_", "").replace("-", "")
        return any(word in folded for word in _SCREEN_WORDS)

    def redact_text(self, text: str) -> str:
        """Apply the shape and value rules to one string."""
        if text in self._short:
            return REDACTED
        for secret in self._long:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for may_match, pattern, replacement in _SHAPES:
            if may_match(text):
                text = pattern.sub(replacement, text)
        return text

    def redact_encoded(self, text: str, encode: Callable[[Any], str]) -> str:
        """`encode(redact(value))` for the value whose `encode` is `text`, remembered: the payloads
        that need the walk are mostly the same few texts (an injected-context record) again."""
        redacted = self._texts.get(text)
        if redacted is None:
            if len(self._texts) >= 256:
                self._texts.clear()
            redacted = self._texts[text] = encode(self.redact(msgspec.json.decode(text)))
        return redacted

    def redact_id(self, text: str) -> str:
        """`redact_text` of an identifier that repeats from event to event (remembered)."""
        return self._redact_key(text)

    def redact(self, value: Any) -> Any:
        """A copy of a JSON-typed value with every rule applied at any depth."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return self._redact_mapping(value)
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        return value

    def _redact_key(self, key: str) -> str:
        redacted = self._keys.get(key)
        if redacted is None:
            if len(self._keys) >= 4096:
                self._keys.clear()
            redacted = self._keys[key] = self.redact_text(key)
        return redacted

    def _redact_mapping(self, mapping: dict[Any, Any]) -> dict[str, Any]:
        name = mapping.get("name")
        names_secret = isinstance(name, str) and is_secret_name(name)
        out: dict[str, Any] = {}
        for key, item in mapping.items():
            text_key = key if isinstance(key, str) else str(key)
            if is_secret_name(text_key) or (names_secret and key == "value"):
                out[self._redact_key(text_key)] = REDACTED if item is not None else None
            else:
                out[self._redact_key(text_key)] = self.redact(item)
        return out
