"""Result budgets (contract section 8.3): bound after normalization, truncate explicitly.

A result that fits its class's byte budget is returned whole. One that does not is cut where a
continuation exists and marked `meta.truncated`: a list keeps the items that fit and answers a
bridge cursor that resumes exactly after the last item kept; a receipt keeps task identities; a
detail drops its largest sections. A truncated result never looks complete.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from ._errors import ToolError

_encode = msgspec.json.Encoder(order="sorted").encode
_plain = msgspec.json.Encoder().encode
CURSOR_PREFIX = "bt1."
# Dropped in this order until a detail fits; nested sections keep their `total`.
_DETAIL_SECTIONS = ("checklist", "urls", "attachments", "checkpoints", "subtasks")
_RECEIPT_MESSAGE_CHARS = 120


def list_digest(arguments: dict[str, Any]) -> str:
    """What a bridge cursor is bound to: every list argument but the cursor and the limit."""
    scope = {k: v for k, v in arguments.items() if k not in ("cursor", "limit")}
    return hashlib.sha256(_encode(scope)).hexdigest()[:16]


def encode_cursor(upstream: str | None, skip: int, digest: str) -> str:
    raw = _encode({"u": upstream, "s": skip, "d": digest})
    return CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, digest: str) -> tuple[str | None, int]:
    """(upstream cursor, items to skip) from a bridge cursor; a plain cursor passes through."""
    if not cursor.startswith(CURSOR_PREFIX):
        return cursor, 0
    body = cursor[len(CURSOR_PREFIX) :]
    try:
        state = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        upstream, skip, bound = state["u"], int(state["s"]), state["d"]
    except (ValueError, KeyError, TypeError, msgspec.DecodeError):
        raise ToolError(
            "cursor_invalid",
            field_errors={"$.cursor": "not a cursor from this tool"},
            suggested_action=None,
        ) from None
    if bound != digest:
        raise ToolError(
            "cursor_mismatch", field_errors={"$.cursor": "issued for another query or filter set"}
        )
    return upstream, max(0, skip)


def fit(
    budget: str,
    limit: int,
    envelope: dict[str, Any],
    *,
    list_state: tuple[str | None, int, str] | None = None,
    list_arguments: dict[str, Any] | None = None,
) -> bool:
    """Bound the envelope to `limit` bytes of compact JSON in place; True when truncated.

    `list_state` is the (upstream cursor of this page, items skipped, digest) needed to continue
    a cut list, and `list_arguments` the call's arguments, repeated in `meta.continuation`.
    """
    if len(_plain(envelope)) <= limit:
        return False
    data = envelope["data"]
    meta = envelope.setdefault("meta", {})
    meta["truncated"] = True
    if budget == "collection" and list_state is not None:
        items = data["items"]
        upstream, skipped, digest = list_state

        def page(keep: int) -> dict[str, Any]:
            cursor = encode_cursor(upstream, skipped + keep, digest)
            continuation = {
                "tool": "task_list",
                "arguments": {**(list_arguments or {}), "cursor": cursor},
            }
            return {
                **envelope,
                "data": {**data, "items": items[:keep]},
                "meta": {**meta, "next_cursor": cursor, "continuation": continuation},
            }

        cut = page(_largest_prefix(len(items), page, limit))
        data["items"] = cut["data"]["items"]
        meta.update(cut["meta"])
    elif budget == "receipt" and isinstance(data.get("tasks"), list):
        data["tasks"] = [
            {k: t[k] for k in ("channel", "number", "scope_id", "title") if k in t}
            for t in data["tasks"]
        ]
        for failure in data.get("failures", []):
            failure["message"] = failure["message"][:_RECEIPT_MESSAGE_CHARS]
    elif budget == "detail" and isinstance(data.get("task"), dict):
        task = data["task"]
        meta["truncated_fields"] = []
        for section in _DETAIL_SECTIONS:
            value = task.get(section)
            if isinstance(value, dict) and value.get("items"):
                value["items"] = []
            elif isinstance(value, list) and value:
                task[section] = []
            else:
                continue
            meta["truncated_fields"].append(section)
            if len(_plain(envelope)) <= limit:
                break
    if len(_plain(envelope)) > limit:
        raise ToolError(
            "upstream_malformed", "The Task service answered with a result too large to return."
        )
    return True


def _largest_prefix(count: int, build: Callable[[int], dict[str, Any]], limit: int) -> int:
    low, high = 0, count
    while low < high:  # the largest k whose envelope fits
        mid = (low + high + 1) // 2
        if len(_plain(build(mid))) <= limit:
            low = mid
        else:
            high = mid - 1
    return low
