"""Structural differences between two JSON values, and the normalization ``rerun`` documents.

Normalization replaces what legitimately differs between two runs against a live server:

* **timestamps** — any RFC 3339 string (``2026-12-02T16:48:24.5Z``) becomes ``"<timestamp>"``;
* **ids** — the value of a key named ``id``, ``scope_id``/``scopeId`` or ending in ``_id``/``Id``,
  and any string shaped like a generated id (``tsk_…``, ``atk_…`` with a digit or capital in the
  random part, 12+ hex digits) becomes ``"<id>"``; a snake_case word such as the error code
  ``task_not_found`` is a value, compared as it is;
* **cursors** — the value of ``cursor``, ``next_cursor``/``nextCursor`` becomes ``"<cursor>"``.

Task numbers, titles, statuses and every other value are compared as they are.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

__all__ = ["Difference", "diff", "normalize"]

MAX_DIFFERENCES: Final = 20
_TIMESTAMP: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"
)
_GENERATED_ID: Final = re.compile(r"^([a-z]{2,4}_[A-Za-z0-9_-]{8,}|[0-9a-f]{12,}|[0-9a-f-]{36})$")
_WORDS: Final = re.compile(r"^[a-z]+(_[a-z]+)+$")  # error codes, statuses: never ids
_CURSOR_KEYS: Final = frozenset({"cursor", "next_cursor", "nextCursor"})


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One place where two values differ (``"<absent>"`` where one side has nothing)."""

    path: str
    recorded: Any
    today: Any


def _is_id_key(key: str) -> bool:
    return key in ("id", "scope_id", "scopeId") or key.endswith(("_id", "Id"))


def normalize(value: Any, key: str | None = None) -> Any:
    """A copy with timestamps, ids and cursors replaced by placeholders."""
    if isinstance(value, dict):
        return {k: normalize(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, key) for v in value]
    if isinstance(value, str):
        if key in _CURSOR_KEYS:
            return "<cursor>"
        if key is not None and _is_id_key(key):
            return "<id>"
        if _TIMESTAMP.match(value):
            return "<timestamp>"
        if _is_generated_id(value):
            return "<id>"
    return value


def _is_generated_id(value: str) -> bool:
    """`tsk_3f9a…`, `atk_Xy-…`, a uuid or a long hex run; never a lower-case snake_case word."""
    return bool(_GENERATED_ID.match(value)) and not _WORDS.match(value)


def diff(
    recorded: Any, today: Any, path: str = "$", limit: int = MAX_DIFFERENCES
) -> list[Difference]:
    """The differences between two JSON values, at most ``limit``, by JSON path."""
    out: list[Difference] = []
    _walk(recorded, today, path, out, limit)
    return out


_ABSENT: Final = "<absent>"


def _walk(a: Any, b: Any, path: str, out: list[Difference], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(dict.fromkeys([*a, *b])):
            child = f"{path}.{key}"
            if key not in a:
                out.append(Difference(path=child, recorded=_ABSENT, today=b[key]))
            elif key not in b:
                out.append(Difference(path=child, recorded=a[key], today=_ABSENT))
            else:
                _walk(a[key], b[key], child, out, limit)
            if len(out) >= limit:
                return
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            child = f"{path}[{i}]"
            if i >= len(a):
                out.append(Difference(path=child, recorded=_ABSENT, today=b[i]))
            elif i >= len(b):
                out.append(Difference(path=child, recorded=a[i], today=_ABSENT))
            else:
                _walk(a[i], b[i], child, out, limit)
            if len(out) >= limit:
                return
        return
    if type(a) is not type(b) or a != b:
        out.append(Difference(path=path, recorded=a, today=b))
