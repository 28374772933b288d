"""The canonical encoding of an event and the hash chain built on it.

Rule (stable; replay/ and any script must recompute it byte for byte):

* ``payload`` is stored as canonical JSON text: the payload converted to JSON types, keys sorted
  by code point, compact separators (``,`` and ``:``), UTF-8 with non-ASCII characters unescaped,
  as ``msgspec.json.encode(obj, order="sorted")`` writes it.
* The canonical encoding of an event is one JSON object holding every column of
  :data:`COLUMNS` (the ``events`` table's columns but the Merkle leaf columns ``salt``,
  ``payload_sha256`` and ``tree_hashes`` of schema 10, see :mod:`journal._tlog`) except
  ``hash``, keys sorted, compact, UTF-8, absent values as ``null``; the value of ``"payload"``
  is the stored payload text inserted verbatim (it is not re-encoded). Column values are exactly
  what SQLite returns: ``seq``, ``kind_version``, ``ts_mono_ns`` and
  ``http_response_status_code`` integers, ``duration_ms`` a float rounded to 3 decimals (never
  in exponent notation), every other column text.
* ``hash`` = lowercase hex SHA-256 of that encoding. It covers ``prev_hash``, the previous
  event's hash (64 zeros for ``seq`` 1), so each hash commits to the whole history before it.

A plain-``sqlite3`` recomputation, for a row read with ``row_factory = sqlite3.Row`` (from
``SELECT * FROM events``, any schema; naming the columns of :data:`COLUMNS` reads less)::

    leaf = ("salt", "payload_sha256", "tree_hashes")  # not hashed (absent before schema 10)
    cols = {k: row[k] for k in row.keys() if k not in ("hash", "payload", *leaf)}
    cols["payload"] = "\\0"
    text = json.dumps(cols, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace('"payload":"\\\\u0000"', '"payload":' + row["payload"], 1)
    assert hashlib.sha256(text.encode()).hexdigest() == row["hash"]
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import msgspec

__all__ = [
    "COLUMNS",
    "GENESIS_HASH",
    "ROW_OF",
    "Row",
    "as_row",
    "canonical_bytes",
    "encode_payload",
    "format_wall",
    "row_hash",
    "row_problem",
    "wall_now",
]

GENESIS_HASH: Final = "0" * 64


class Row(NamedTuple):
    """One row of the ``events`` table, its columns in table order; read by name, never by
    position (a plain tuple in this order is accepted where a row is taken, see `as_row`)."""

    seq: int
    journal_id: str
    session_id: str
    call_id: str | None
    ts_mono_ns: int
    ts_wall: str
    kind: str
    kind_version: int
    mcp_method_name: str | None
    gen_ai_tool_name: str | None
    jsonrpc_request_id: str | None
    http_response_status_code: int | None
    error_type: str | None
    duration_ms: float | None
    payload: str
    prev_hash: str
    hash: str


# Column order of the events table (a Row's fields).
COLUMNS: Final[tuple[str, ...]] = Row._fields
# A fetched sqlite3 row (COLUMNS order) as a Row, in C: no Python frame, no length check (the
# SELECTs that feed it name COLUMNS).
ROW_OF: Final[Callable[[Iterable[Any]], Row]] = functools.partial(tuple.__new__, Row)


# The storage type each column must read back as (the canonical encoding's, see the module's
# rule); a file's author can store any type in any column, and the analyses compute with them.
_INTEGER: Final = ("seq", "ts_mono_ns", "kind_version")
_TEXT: Final = ("journal_id", "session_id", "kind", "ts_wall", "payload", "prev_hash", "hash")
_TEXT_OR_NULL: Final = (
    "call_id",
    "mcp_method_name",
    "gen_ai_tool_name",
    "jsonrpc_request_id",
    "error_type",
)


# Every combination of column types a row this code wrote reads back as (192 of them): a row's
# types are checked with one set lookup; the messages below name what is wrong with the others.
_ROW_TYPES: Final = frozenset(
    itertools.product(
        *(
            (int,)
            if name in _INTEGER
            else (str,)
            if name in _TEXT
            else (str, type(None))
            if name in _TEXT_OR_NULL
            else (int, type(None))
            if name == "http_response_status_code"
            else (int, float, type(None))
            for name in COLUMNS
        )
    )
)
# The whole second of the last ``ts_wall`` found to be a time (``2026-12-04T21:30:49``): a
# journal's events come many to a second, and a time of the writer's shape in that second
# needs no second parse.
_last_second: list[str] = [""]


def row_problem(row: Row) -> str | None:
    """Why ``row`` cannot be an event this code wrote (a column of another type, a ``ts_wall``
    that is no RFC 3339 time), or None."""
    if tuple(map(type, row)) in _ROW_TYPES:
        wall = row.ts_wall
        # The writer's shape, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, in a second already parsed.
        if wall[:19] == _last_second[0] and len(wall) == 27 and wall[26] == "Z":
            fraction = wall[19:26]
            if fraction[0] == "." and fraction[1:].isdigit() and fraction.isascii():
                return None
        problem = _wall_problem(wall)
        if problem is None and len(wall) == 27:
            _last_second[0] = wall[:19]
        return problem
    return _type_problem(row) or _wall_problem(row.ts_wall)


def _type_problem(row: Row) -> str | None:
    for name in _INTEGER:
        value = getattr(row, name)
        if type(value) is not int:
            return f"{name} is {type(value).__name__} {_short(value)}, not an integer"
    for name in _TEXT:
        value = getattr(row, name)
        if type(value) is not str:
            return f"{name} is {type(value).__name__} {_short(value)}, not text"
    for name in _TEXT_OR_NULL:
        value = getattr(row, name)
        if value is not None and type(value) is not str:
            return f"{name} is {type(value).__name__} {_short(value)}, not text"
    status, duration = row.http_response_status_code, row.duration_ms
    if status is not None and type(status) is not int:
        return f"http_response_status_code is {type(status).__name__} {_short(status)}"
    if duration is not None and type(duration) not in (int, float):
        return f"duration_ms is {type(duration).__name__} {_short(duration)}, not a number"
    return None


def _wall_problem(text: str) -> str | None:
    try:
        wall = datetime.fromisoformat(text)
    except ValueError:
        return f"ts_wall {_short(text)} is not an RFC 3339 time"
    if wall.utcoffset() is None:
        return f"ts_wall {_short(text)} has no UTC offset"
    return None


def _short(value: Any) -> str:
    """A value as a finding names it: a number, or a text or bytes of a time's characters
    only, whole (cut at 40 characters); any other text or bytes by at most its first 10
    characters and its length. A file's text may hold anything, and 12 characters of a token
    are a leak (the secret screen's ``secret_in_payload`` shows 6)."""
    if isinstance(value, str | bytes):
        shown = value if isinstance(value, str) else value.decode("latin-1")
        if len(value) <= _SHOWN or (len(value) <= 40 and set(shown) <= _TIMELIKE):
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:_SHOWN]!r}… ({len(value)} {unit})"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


_SHOWN: Final = 10
_TIMELIKE: Final = frozenset("0123456789-:.,+TZtz ")


def as_row(row: Sequence[Any]) -> Row:
    """``row`` as a Row: itself, or a plain sequence in COLUMNS order (17 values)."""
    return row if type(row) is Row else Row._make(row)


class _Canonical(msgspec.Struct):
    """The hashed image of a row; fields in sorted key order, so encoding needs no sort."""

    call_id: str | None
    duration_ms: float | None
    error_type: str | None
    gen_ai_tool_name: str | None
    http_response_status_code: int | None
    journal_id: str
    jsonrpc_request_id: str | None
    kind: str
    kind_version: int
    mcp_method_name: str | None
    payload: msgspec.Raw
    prev_hash: str
    seq: int
    session_id: str
    ts_mono_ns: int
    ts_wall: str


_encoder: Final = msgspec.json.Encoder(order="sorted")
_raw_encoder: Final = msgspec.json.Encoder()


def encode_payload(obj: Any) -> str:
    """Canonical JSON text of a payload: its Struct, or the same converted to JSON types (the
    encoder sorts a Struct's fields as it sorts a dict's keys, so both give one text)."""
    return _encoder.encode(obj).decode()


def canonical_bytes(row: Sequence[Any]) -> bytes:
    """The canonical encoding of a row (a Row, or a tuple in COLUMNS order; ``hash`` may be
    anything)."""
    row = as_row(row)
    payload = row.payload
    return _raw_encoder.encode(
        _Canonical(
            row.call_id,
            row.duration_ms,
            row.error_type,
            row.gen_ai_tool_name,
            row.http_response_status_code,
            row.journal_id,
            row.jsonrpc_request_id,
            row.kind,
            row.kind_version,
            row.mcp_method_name,
            msgspec.Raw(payload.encode() if isinstance(payload, str) else payload),
            row.prev_hash,
            row.seq,
            row.session_id,
            row.ts_mono_ns,
            row.ts_wall,
        )
    )


def row_hash(row: Sequence[Any]) -> str:
    """The chain hash of a row: hex SHA-256 of its canonical encoding."""
    return hashlib.sha256(canonical_bytes(row)).hexdigest()


_wall_cache: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def wall_now() -> str:
    """`format_wall(datetime.now(UTC))`, formatting the date and time once per second."""
    global _wall_cache
    second, nanos = divmod(time.time_ns(), 1_000_000_000)
    cached_second, text = _wall_cache  # one tuple: a reader in another thread sees a whole pair
    if cached_second != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _wall_cache = (second, text)
    return f"{text}.{nanos // 1000:06d}Z"


def format_wall(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds and ``Z``: ``2025-01-31T12:00:00.000000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
