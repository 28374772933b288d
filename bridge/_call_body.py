"""What the call flow reads and writes as bytes: an upstream body parsed within a depth limit,
the model's arguments encoded for the journal.

Invariants: an upstream body nested deeper than ``MAX_BODY_DEPTH`` is malformed, and that is
decided before anything walks it recursively (conversion, the journal's encoder); arguments that
cannot be encoded are journaled as the name of their type, never their text.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

_plain = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
# An upstream body nested deeper than this is malformed (the documented shapes nest ~5 deep).
MAX_BODY_DEPTH: Final = 32
_BRACKETS_ONLY: Final = bytes(range(256)).translate(None, b"[]{}")


def decode_body(raw: bytes) -> tuple[Any, str | None]:
    """An upstream body parsed within the depth limit: (value, None), or (None, the problem:
    ``not_json`` for bad JSON or UTF-8, ``too_deep`` past MAX_BODY_DEPTH)."""
    if not raw:
        return None, None
    try:
        value = _decode(raw)
    except msgspec.DecodeError:
        return None, "not_json"
    except RecursionError:
        return None, "too_deep"
    if not _shallow(raw) and not _depth_within(value, MAX_BODY_DEPTH):
        return None, "too_deep"
    return value, None


def _shallow(raw: bytes) -> bool:
    """A fast sufficient test that a JSON text nests at most MAX_BODY_DEPTH deep: its brackets
    alone (quoted ones too) pair up within that many rounds. Bodies it cannot clear are walked."""
    brackets = raw.translate(None, _BRACKETS_ONLY)
    for _ in range(MAX_BODY_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return not brackets


def _depth_within(value: Any, limit: int) -> bool:
    if not isinstance(value, dict | list):
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return False
                stack.append((child, depth + 1))
    return True


def encoded_arguments(value: Any) -> bytes:
    """The arguments as JSON (absent or null as ``{}``; unencodable as the name of their type)."""
    try:
        return _plain(value if value is not None else {})
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
        return _plain({"unencodable": repr(type(value).__name__)})
