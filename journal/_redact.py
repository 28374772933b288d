"""Redaction at the journal boundary: no credential reaches the file, whatever the caller passes.

Four rules, applied to every payload (any depth) and to the envelope's text columns:

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
  a refreshed one, a proxy password) is replaced wherever it occurs inside any string or key, and
  so is every **fragment** of it: a run of ten or more of its letters and digits in any letter
  case, with ``_``/``-`` added or removed (a prefix left by a cut, an upper-cased or snake_cased
  echo; see :mod:`journal._fragments` for exactly which forms); a secret of 8 or 9 letters and
  digits is found whole in those forms.
* **by format** — well-known credential formats a model may write into a task (AWS access keys,
  GitHub, GitLab, Slack, Stripe, SendGrid, PyPI, npm tokens, OpenAI ``sk-...`` keys, JWTs, private
  key blocks, ...), found by the maintained rule set of `detect-secrets`_ (its format plugins'
  own patterns, see ``RULE_SET``), are replaced by ``[REDACTED:sha256:<12 hex>]``: the digest of
  the value lets an auditor tell two values apart (or check a known leaked one) without the
  journal holding it. A private key is replaced from its ``BEGIN`` line to its ``END`` line.

The rule set costs ~0.1-0.2 s to import and tens of microseconds to run: it is imported on first
need, or before by a background thread started by ``warm_up`` (``serve`` calls it once the
session's start is journaled, a record the screen passes: the import delays neither the first
answer nor, as a client takes its time to call, the first call; a call that needs it sooner waits
for the import), and run only where a cheap screen (``_may_hold_format``: strings every match
contains) says a match is possible; a property test proves the screen against every pattern of
the rule set.

.. _detect-secrets: https://github.com/Yelp/detect-secrets
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

import msgspec

from ._fragments import Fragments

__all__ = [
    "REDACTED",
    "RULE_SET",
    "FormatRule",
    "Redactor",
    "cut_point",
    "format_rules",
    "secret_marker",
    "warm_up",
]

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

# The rule set: detect-secrets' plugins for credential formats, as (module, class, strings every
# match of the plugin contains, strings every match contains ignoring case). Left out: the
# plugins with no such string that cost ~30 us per payload (Discord, Telegram), the
# keyword-assignment heuristics (Cloudant, IBM, SoftLayer, Keyword), entropy (it would take ids
# and hashes) and public IP addresses (not credentials).
RULE_SET: Final[tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...]] = (
    ("aws", "AWSKeyDetector", ("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), ("aws",)),
    ("artifactory", "ArtifactoryDetector", ("AKC", "AP"), ()),
    ("azure_storage_key", "AzureStorageKeyDetector", ("AccountKey=",), ()),
    ("basic_auth", "BasicAuthDetector", ("@",), ()),
    ("github_token", "GitHubTokenDetector", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), ()),
    (
        "gitlab_token",
        "GitLabTokenDetector",
        (
            "GR1348941",
            "glpat-",
            "gldt-",
            "glft-",
            "glsoat-",
            "glrt-",
            "glcbt-",
            "glimt-",
            "glptt-",
            "glagent-",
            "gloas-",
        ),
        (),
    ),
    ("jwt", "JwtTokenDetector", ("yJ",), ()),
    ("mailchimp", "MailchimpDetector", ("-us",), ()),
    ("npm", "NpmDetector", ("Token=",), ()),
    ("openai", "OpenAIDetector", ("T3BlbkFJ",), ()),
    ("private_key", "PrivateKeyDetector", ("PRIVATE KEY", "PuTTY"), ()),
    ("pypi_token", "PypiTokenDetector", ("ypi-",), ()),
    ("sendgrid", "SendGridDetector", ("SG.",), ()),
    ("slack", "SlackDetector", (), ("xox", "hooks.slack.com")),
    ("square_oauth", "SquareOAuthDetector", ("q0csp-",), ()),
    ("stripe", "StripeDetector", ("k_live_",), ()),
    ("twilio", "TwilioKeyDetector", ("AC", "SK"), ()),
)


def _minimal(words: Iterable[str]) -> tuple[str, ...]:
    """The words none of the others is a part of (a text holding a longer one holds the shorter)."""
    unique = set(words)
    return tuple(sorted(w for w in unique if not any(o in w for o in unique if o != w)))


def _trie_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """A regex matching any of the words, prefixes factored out (`A(?:KIA|SIA|...)`).

    A flat alternation is entered at every position holding a word's first letter and tries
    each word there; the factored one tries one branch per character: ~2.5x cheaper here.
    """
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        alternatives = [re.escape(char) + branch(child) for char, child in sorted(node.items())]
        alternatives = [a for a in alternatives if a]
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"
        return f"(?:{body})?" if "" in node else body

    return re.compile(branch(trie))


# The screen: the strings every match contains, exact ones in one scan, the ones the patterns
# match ignoring case in the case-folded text (casefold folds all that their flag does).
# Basic auth's matches (`scheme://user:password@host`) hold both `://` and `@`, and either alone is
# common in this traffic (a URL; a handle such as `@alice` in every task): the screen asks for
# both (`_may_hold_format`, `Redactor.screen`), and its `@` only picks the plugin once screened.
_FORMAT_EXACT: Final = _trie_pattern(
    _minimal(w for module, _c, words, _f in RULE_SET if module != "basic_auth" for w in words)
)
_FORMAT_FOLDED: Final = _minimal(w for _m, _c, _w, folded in RULE_SET for w in folded)


def _may_hold_format(text: str) -> bool:
    if _FORMAT_EXACT.search(text) is not None or ("@" in text and "://" in text):
        return True
    folded = text.casefold()
    return any(word in folded for word in _FORMAT_FOLDED)


_PLUGINS: Final = "detect_secrets.plugins"


class FormatRule(NamedTuple):
    """One plugin of the rule set, its patterns, and the strings each of their matches holds."""

    name: str
    words: tuple[str, ...]
    folded_words: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    reports: Callable[[str], Iterable[str]]  # the plugin's own verdict: what it finds in a text


@functools.cache
def format_rules() -> tuple[FormatRule, ...]:
    """The rule set (imported on first use; two threads may both build it, to the same end)."""
    rules = []
    for module, name, words, folded in RULE_SET:
        plugin = getattr(importlib.import_module(f"{_PLUGINS}.{module}"), name)()
        rules.append(FormatRule(name, words, folded, tuple(plugin.denylist), plugin.analyze_string))
    return tuple(rules)


_warm_up_lock = threading.Lock()
_warm_up_started = False


def warm_up() -> None:
    """Import the rule set in a background thread, once per process (a server calls it once it
    has answered, so that the import overlaps the client's pause instead of its first call)."""
    global _warm_up_started
    with _warm_up_lock:
        if _warm_up_started:
            return
        _warm_up_started = True
    threading.Thread(target=_load_quietly, name="journal-rule-set", daemon=True).start()


def _load_quietly() -> None:
    try:
        format_rules()
    except Exception:  # the call that needs the rule set imports it again and raises there
        format_rules.cache_clear()


def secret_marker(value: str) -> str:
    """What a credential found by format becomes: a marker keeping a digest of it."""
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return f"[REDACTED:sha256:{digest[:12]}]"


_PEM_END: Final = re.compile(r"-----END [A-Z0-9 ]*-----")
_TOKEN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.")
_TOKEN_TAIL: Final = re.compile(r"[A-Za-z0-9_\-+/=.]*")
_DELIMITERS: Final = frozenset(" \t\r\n\"'=:.@")
_MAX_FORMAT_ROUNDS: Final = 4


def _redact_formats(text: str) -> str:
    """Replace each credential the rule set finds by its marker (see `_format_spans`).

    Repeated until no pattern matches (a marker could join its neighbours into a new match); a
    text that still matches after a few rounds goes whole.
    """
    for _round in range(_MAX_FORMAT_ROUNDS):
        spans = _format_spans(text)
        if not spans:
            return text
        out: list[str] = []
        end = 0
        for start, stop in spans:
            out += (text[end:start], secret_marker(text[start:stop]))
            end = stop
        out.append(text[end:])
        text = "".join(out)
    return text if not _format_spans(text) else secret_marker(text)


def _format_spans(text: str) -> list[tuple[int, int]]:
    """Where the rule set matches: sorted, disjoint spans.

    A match counts where its plugin reports it (the plugin's checks beyond the pattern hold).
    Its span is the credential it found: from its first capturing group that matched (the
    key after `aws_secret_access_key = '`, the password in `://user:password@`), on over the
    rest of the token (a JWT's signature, which the JWT pattern leaves out), without a delimiter
    the pattern takes along (a space, a quote...).
    """
    if not _may_hold_format(text):
        return []
    spans = []
    folded = None
    for name, words, folded_words, patterns, reports in format_rules():
        if not any(word in text for word in words):  # only the plugins that may match run
            if not folded_words:
                continue
            folded = text.casefold() if folded is None else folded
            if not any(word in folded for word in folded_words):
                continue
        for pattern in patterns:
            for match in pattern.finditer(text):
                if not any(True for _found in reports(match.group(0))):
                    continue  # the plugin's own checks say no (a JWT must decode: not a cursor)
                if name == "PrivateKeyDetector":
                    spans.append(_key_block(text, *match.span()))
                    continue
                start = next(
                    (match.start(g) for g in range(1, pattern.groups + 1) if match.group(g)),
                    match.start(),
                )
                stop = match.end()
                if stop > start and text[stop - 1] in _TOKEN:
                    stop = _TOKEN_TAIL.match(text, stop).end()  # type: ignore[union-attr]
                spans.append(_trimmed(text, start, stop))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, stop in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        elif stop > start:
            merged.append((start, stop))
    return merged


def cut_point(text: str, keep: int) -> int:
    """Where to cut `text` to keep at most `keep` characters without leaving part of a credential
    the rule set finds: `keep`, or the start of the credential the cut would split (which then
    goes whole). Runs the rule set only on a text that may hold a format and is longer than
    `keep`."""
    if keep >= len(text) or not _may_hold_format(text):
        return keep
    for start, stop in _format_spans(text):
        if start < keep < stop:
            return start
    return keep


def _key_block(text: str, start: int, stop: int) -> tuple[int, int]:
    """A private key's whole block: from its `-----BEGIN` to its `-----END ...-----`, else on."""
    dashes = text.rfind("-----", max(0, start - 5), start)
    if dashes >= 0:
        start = dashes
    end = _PEM_END.search(text, stop)
    return start, end.end() if end is not None else len(text)


def _trimmed(text: str, start: int, stop: int) -> tuple[int, int]:
    while start < stop and text[start] in _DELIMITERS:
        start += 1
    while stop > start and text[stop - 1] in _DELIMITERS:
        stop -= 1
    return start, stop


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
# What the screen looks for in that folded text: the names, and the rule set's case-insensitive
# words (a word without `_` or `-` found in the lower-cased text is found in it with them
# removed; for ASCII text lower-casing is case-folding). `bearer` is among the names, so the
# Bearer shape needs no test of its own.
_FOLDED_WORDS: Final = (*_SCREEN_WORDS, *_FORMAT_FOLDED)
assert "bearer" in _SCREEN_WORDS and not any("_" in w or "-" in w for w in _FORMAT_FOLDED)
_json_text: Final = msgspec.json.Encoder().encode


class Redactor:
    """Removes credentials from JSON-typed values; knows the secrets it was told about."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._long: list[str] = []
        self._short: set[str] = set()
        # The secrets as they appear in JSON text: inside a string (long), as a whole one (short).
        self._long_json: list[str] = []
        self._short_json: list[str] = []
        self._fragments = Fragments()
        # Every secret as UTF-8 (a short one too: `holds_known_bytes` is a screen, not the rule).
        self._known_bytes: list[bytes] = []
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
        encoded = value.encode("utf-8", "surrogatepass")
        if encoded not in self._known_bytes:
            self._known_bytes.append(encoded)
        if len(value) >= MIN_SUBSTRING_SECRET:
            if value not in self._long:
                self._long.append(value)
                self._long.sort(key=len, reverse=True)
                self._long_json.append(quoted[1:-1])
                self._fragments.add(value)
                self._fragments.add(quoted[1:-1])  # as a JSON text spells it (`screen`)
        elif value not in self._short:
            self._short.add(value)
            self._short_json.append(quoted)

    def screen(self, text: str) -> bool:
        """Whether `redact` could change the value whose JSON encoding is `text` (msgspec's: only
        `"`, `\\` and control characters escaped). False means the value is clean as it is.

        Each rule's trace survives JSON encoding: a secret value as its escaped form, a shape or
        a format by the literal its cheap test looks for, a secret-named key (or `name`) by its
        letters once case, `_` and `-` are folded away. The screen may say True for clean text
        (the full walk then finds nothing), never False for text the walk would change.
        """
        # Plain loops and `in` tests: every call screens five texts, and a generator per rule
        # cost as much as the scans (`_SHAPES`' and `_may_hold_format`'s tests, inlined).
        for secret in self._long_json:
            if secret in text:
                return True
        for secret in self._short_json:
            if secret in text:
                return True
        if "eyJ" in text or "=" in text or ("@" in text and "://" in text):
            return True
        if _FORMAT_EXACT.search(text) is not None:
            return True
        if not text.isascii():
            casefolded = text.casefold()
            for word in _FORMAT_FOLDED:
                if word in casefolded:
                    return True
        folded = text.lower().replace("_", "").replace("-", "")  # `_fragments.fold`
        for word in _FOLDED_WORDS:
            if word in folded:
                return True
        return self._fragments.hits_folded(folded)

    def holds_known(self, text: str) -> bool:
        """Whether `text` may hold a known secret, whole or a fragment (a sufficient screen for
        `redact_known`)."""
        for secret in self._long:
            if secret in text:
                return True
        return self._fragments.hits(text) or (bool(self._short) and text in self._short)

    def holds_known_bytes(self, raw: bytes) -> bool:
        """`holds_known` of UTF-8 bytes as they came (JSON escapes aside: see `bridge._screen`)."""
        for secret in self._known_bytes:
            if secret in raw:
                return True
        return self._fragments.hits_bytes(raw)

    def redact_known(self, value: Any) -> Any:
        """A copy of a JSON-typed value with only the known secrets (whole, and their fragments)
        replaced, in keys and strings at any depth: what a model may see of data it wrote."""
        if isinstance(value, str):
            return self._known_text(value)
        if isinstance(value, dict):
            return {self._known_text(str(k)): self.redact_known(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_known(item) for item in value]
        return value

    def _known_text(self, text: str) -> str:
        if text in self._short:
            return REDACTED
        for secret in self._long:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return self._fragments.remove(text, REDACTED)

    def redact_text(self, text: str) -> str:
        """Apply the value (fragments too), format and shape rules to one string."""
        text = self._known_text(text)
        # Formats first, so that a JWT keeps a digest (a URL's `user:password@` then goes whole:
        # the shape rule takes the user with the password's marker).
        text = _redact_formats(text)
        shaped = text
        for may_match, pattern, replacement in _SHAPES:
            if may_match(shaped):
                shaped = pattern.sub(replacement, shaped)
        # A shape's marker could join its neighbours into a format match: look again.
        return shaped if shaped == text else _redact_formats(shaped)

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
            # Short strings (names, ids, sources) repeat from event to event: remembered.
            return self._redact_key(value) if len(value) <= 64 else self.redact_text(value)
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
