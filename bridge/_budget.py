"""Result budgets (contract section 8.3): bound after normalization, truncate by field, never fail.

A budget is UTF-8 bytes of the final compact JSON of `structuredContent`. A result that fits is
returned whole. (A `task_get` detail is bounded by `_detail` first, which continues its
description, checkpoints and subtasks with a cursor, and falls back on `fit` for the rest.)
One that does not is cut in this order, each step only as far as needed:

1. a `task_list` page keeps the items that fit (at least one) and answers a bridge cursor that
   resumes after the last item kept, by its identity (`meta.next_cursor`, `meta.continuation`;
   see `_cursor`);
2. long strings are cut to a common byte cap, longest first, on an extended grapheme cluster
   boundary (UAX #29: a ZWJ family, a flag, a letter with its combining marks stay whole or go
   whole), and end with "…" (titles, descriptions, labels, checkpoint summaries, messages...);
3. lists inside items (labels, checklist, urls, checkpoints...) keep their first entries; then
   the lists of results themselves (tasks, numbers, failures), only for answers no valid upstream
   can produce;
4. last, identity strings (channel, status, timestamps) are cut as well.

Every cut keeps each required property (strings and lists only get shorter), so a truncated
result is valid against the tool's outputSchema. `meta.truncated_fields` names the JSON paths cut
(indexes collapse to `[*]` when many), and `meta.truncation_note` says truthfully how to get the
rest or that no tool can. `fit` has no failure path: after a successful upstream operation the
answer is never an error because of its size (a committed receipt shrinks to its identities).
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from bisect import bisect_right
from collections.abc import Collection
from typing import Any, NamedTuple

import msgspec
import regex

from agentteam_task_bridge.journal import cut_point

from ._cursor import Cursors, PageState

log = logging.getLogger("agentteam.bridge")
_encode = msgspec.json.Encoder(order="sorted").encode
_plain = msgspec.json.Encoder().encode
ELLIPSIS = "…"
_ELLIPSIS_BYTES = len(ELLIPSIS.encode())
# Budget for an error envelope (messages and candidates are bounded by the same rules).
ERROR_BUDGET_BYTES = 16 * 1024
# Strings that identify or classify rather than describe: cut only as the very last resort.
_IDENTITY_KEYS = frozenset(
    {
        "channel",
        "number",
        "scope_id",
        "status",
        "priority",
        "assignee",
        "creator",
        "author",
        "holder",
        "updated_at",
        "created_at",
        "id",
        "code",
        "tool",
        "next_cursor",
    }
)
_MAX_PATHS = 16
# Signs the cursors of pages cut only to measure them (`keeps_identities`).
_SIZING = Cursors.ephemeral()
# Room kept for `truncated_fields` and `truncation_note` while cutting (widened when short).
_MARKER_RESERVE = 2048
_INDEX = re.compile(r"\[\d+\]")
# An extended grapheme cluster (UAX #29), by the `regex` module's Unicode tables.
_GRAPHEME = regex.compile(r"\X")


def size(envelope: dict[str, Any]) -> int:
    """Bytes of the envelope's compact JSON: what every budget counts."""
    return len(_plain(envelope))


def cut_text(text: str, max_bytes: int) -> str:
    """`text` in at most `max_bytes` UTF-8 bytes, on an extended grapheme cluster boundary,
    ending with "…"."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    if max_bytes < _ELLIPSIS_BYTES:
        return ""
    keep = max_bytes - _ELLIPSIS_BYTES
    if text.isascii():  # one byte a character, and every cluster one character but CR LF
        end = keep - (text[keep - 1 : keep + 1] == "\r\n")
    else:
        byte_ends, char_ends = _clusters(text)
        whole = bisect_right(byte_ends, keep)  # the clusters that fit whole
        end = char_ends[whole - 1] if whole else 0
    # Never half a credential the rule set finds (the journal's redactor would not see the
    # half): a cut across one cuts before it.
    return text[: cut_point(text, end)] + ELLIPSIS


# The cut search tries many caps on the same strings: their clusters are found once.
@functools.lru_cache(maxsize=256)
def _clusters(text: str) -> tuple[list[int], list[int]]:
    """The UTF-8 byte offset and the character offset where each grapheme cluster of `text`
    ends."""
    clusters = _GRAPHEME.findall(text)
    byte_ends = list(itertools.accumulate(len(c.encode()) for c in clusters))
    return byte_ends, list(itertools.accumulate(len(c) for c in clusters))


def grapheme_ends(text: str) -> tuple[list[int], list[int]]:
    """The UTF-8 byte offset and the character offset where each grapheme cluster of `text`
    ends (cached: a cut search asks many times)."""
    return _clusters(text)


def profile_fit(
    tool: str, limit: int, envelope: dict[str, Any], task: dict[str, Any], parts: Collection[str]
) -> list[str]:
    """Cut `task` (in `envelope["data"]["task"]`) without its `parts` to `limit` bytes, as `fit`
    cuts; returns the paths cut. The parts are the caller's to bound."""
    rest = {k: v for k, v in task.items() if k not in parts}
    trial: dict[str, Any] = {"data": {"task": rest}, "meta": {}}
    if size(trial) <= limit:
        return []
    paths = _Cutter(trial, limit).run()
    task.update(trial["data"]["task"])
    return _collapse(paths)


def fit(
    tool: str,
    limit: int,
    envelope: dict[str, Any],
    *,
    list_state: PageState | None = None,
    list_arguments: dict[str, Any] | None = None,
    cursors: Cursors | None = None,
) -> bool:
    """Bound the envelope to `limit` bytes of compact JSON in place; True when truncated.

    `list_state` is the PageState needed to continue a cut page (of a `paged` tool), `cursors`
    what signs its cursor, and `list_arguments` the call's arguments, repeated in
    `meta.continuation`. Never raises: at worst it logs that the floor is over the budget.
    """
    if size(envelope) <= limit:
        return False
    original = {**envelope, "meta": dict(envelope.get("meta") or {})}
    reserve = _MARKER_RESERVE
    for _ in range(4):  # the markers are sized after the cut: reserve room, widen if short
        envelope.clear()
        envelope.update({**original, "meta": dict(original["meta"])})
        if isinstance(original.get("data"), dict):  # a page cut replaces `items` in its copy
            envelope["data"] = dict(original["data"])
        _cut(tool, limit - reserve, envelope, list_state, list_arguments or {}, cursors)
        over = size(envelope) - limit
        if over <= 0:
            return True
        reserve += over
    log.warning("%s result is %d bytes after truncation (budget %d)", tool, size(envelope), limit)
    return True


def _cut(
    tool: str,
    limit: int,
    envelope: dict[str, Any],
    list_state: PageState | None,
    arguments: dict[str, Any],
    cursors: Cursors | None,
) -> None:
    data = envelope.get("data")
    meta = envelope["meta"]
    meta["truncated"] = True
    paths: list[str] = []
    page_cut = False
    if isinstance(data, dict):
        if list_state is not None and isinstance(data.get("items"), list):
            page_cut = _cut_page(tool, envelope, limit, list_state, arguments, cursors)
            if page_cut:
                paths.append("$.data.items")
        # A cut page's items are the ones its cursor continues after: never dropped after it.
        protected = ("$.data.items",) if list_state is not None else ()
        paths += _Cutter(envelope, limit, protected).run()
    _mark(tool, meta, paths, page_cut)


def keeps_identities(
    tool: str, limit: int, envelope: dict[str, Any], list_state: PageState | None = None
) -> bool:
    """Whether `envelope` fits `limit` keeping every identity and every entry of its result lists.

    What a budget must allow for the largest result valid inputs can produce (the contract lint
    checks it): strings and the lists inside items may be cut, and a page may keep one item, but
    a receipt never loses a task, a number or an identity string.
    """
    trial: dict[str, Any] = msgspec.json.decode(_plain({**envelope, "meta": {}}))
    limit -= _MARKER_RESERVE
    if list_state is not None and isinstance(trial["data"].get("items"), list):
        _cut_page(tool, trial, limit, list_state, {}, None)
    return _Cutter(trial, limit, ("$.data.items",))._fits(_Caps(text=0, inner=0))


def _cut_page(
    tool: str,
    envelope: dict[str, Any],
    limit: int,
    list_state: PageState,
    arguments: dict[str, Any],
    cursors: Cursors | None,
) -> bool:
    """Keep the page's first items that fit (at least one); True when items were dropped."""
    data, meta = envelope["data"], envelope["meta"]
    items: list[Any] = data["items"]
    signer = cursors or _SIZING

    def page(keep: int) -> dict[str, Any]:
        cursor = signer.issue(list_state, items[:keep])
        continuation = {"tool": tool, "arguments": {**arguments, "cursor": cursor}}
        return {
            **envelope,
            "data": {**data, "items": items[:keep]},
            "meta": {**meta, "next_cursor": cursor, "continuation": continuation},
        }

    low, high = min(1, len(items)), len(items)
    while low < high:  # the largest k whose page fits, never fewer than one item
        mid = (low + high + 1) // 2
        if size(page(mid)) <= limit:
            low = mid
        else:
            high = mid - 1
    if low == len(items):
        return False
    cut = page(low)
    data["items"] = cut["data"]["items"]
    meta.update(cut["meta"])
    return True


class _Caps(NamedTuple):
    """Largest size each kind of value may keep; None leaves it whole."""

    text: int | None = None  # bytes of a descriptive string
    inner: int | None = None  # items of a list inside a result (labels, checklist...)
    result: int | None = None  # items of a result list (tasks, numbers, failures)
    identity: int | None = None  # bytes of an identity string (channel, status, timestamps)


class _Cutter:
    """Builds cut copies of the envelope's `data` from the original, so every cap is searchable."""

    def __init__(
        self, envelope: dict[str, Any], limit: int, protected: Collection[str] = ()
    ) -> None:
        self.envelope = envelope
        self.limit = limit
        self.protected = protected
        self.original = envelope["data"]
        self.paths: list[str] = []
        # No string is longer, and no list has more items, than the data has bytes.
        self.ceiling = size(self.original)

    def run(self) -> list[str]:
        """Apply the smallest cut that fits (or the floor), and return the paths it cut."""
        floor = _Caps(0, 0, 0, 0)
        stages = ("text", "inner", "result", "identity")
        caps = _Caps()
        for i in range(len(stages)):
            at_floor = caps._replace(**dict.fromkeys(stages[: i + 1], 0))
            if not self._fits(at_floor):
                caps = at_floor
                continue
            # This stage is enough: open its cap as far as fits, then the cheaper stages' caps.
            for name in reversed(stages[: i + 1]):
                caps = self._widest(caps, name)
            break
        else:
            caps = floor
        self._apply(caps)
        return self.paths

    def _widest(self, caps: _Caps, name: str) -> _Caps:
        low, high = 0, self.ceiling  # `low` always fits
        while low < high:
            mid = (low + high + 1) // 2
            if self._fits(caps._replace(**{name: mid})):
                low = mid
            else:
                high = mid - 1
        return caps._replace(**{name: low})

    def _fits(self, caps: _Caps) -> bool:
        self._apply(caps)
        return size(self.envelope) <= self.limit

    def _apply(self, caps: _Caps) -> None:
        self.paths = []
        self.envelope["data"] = self._cut(self.original, "$.data", None, caps)

    def _cut(self, value: Any, path: str, name: str | None, caps: _Caps) -> Any:
        if isinstance(value, str):
            cap = caps.identity if name in _IDENTITY_KEYS else caps.text
            if cap is None:
                return value
            cut = cut_text(value, cap)
            if cut is not value:
                self.paths.append(path)
            return cut
        if isinstance(value, dict):
            return {k: self._cut(v, f"{path}.{k}", k, caps) for k, v in value.items()}
        if isinstance(value, list):
            # A list directly under `data` is the result itself (tasks, numbers, failures).
            cap = caps.result if path.count(".") == 2 and "[" not in path else caps.inner
            if cap is not None and len(value) > cap and path not in self.protected:
                self.paths.append(path)
                value = value[:cap]
            return [self._cut(v, f"{path}[{i}]", name, caps) for i, v in enumerate(value)]
        return value


def _collapse(paths: list[str]) -> list[str]:
    if len(paths) <= _MAX_PATHS:
        return paths
    return list(dict.fromkeys(_INDEX.sub("[*]", p) for p in paths))


# What the model can do about a cut, per tool; true for this bridge's seven tools.
_REST = {
    "task_list": "task_get reads a task by channel and number, with its own budget.",
    "task_get": (
        "No tool returns these cut fields in full (task_get continues only the description, "
        "checkpoints and subtasks)."
    ),
}
_RECEIPT_REST = (
    "The operation was applied; only this receipt was shortened. task_get reads a task by "
    "channel and number."
)


def _mark(tool: str, meta: dict[str, Any], paths: list[str], page_cut: bool) -> None:
    fields = _collapse(paths)
    meta["truncated_fields"] = fields
    notes = ["Cut to fit the result budget (truncated_fields; a cut string ends with …)."]
    if page_cut:
        notes.append("The page ends early: pass meta.next_cursor as `cursor` for the rest.")
    if any(p != "$.data.items" for p in fields) or not page_cut:
        notes.append(_REST.get(tool, _RECEIPT_REST))
    meta["truncation_note"] = " ".join(notes)
