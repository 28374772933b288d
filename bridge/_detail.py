"""Continuation of a task detail (contract 8.3): the cut parts of a `task_get` answer, read on.

A detail has three parts that can be longer than one answer: the description (cut by the result
budget), the checkpoints (newest first) and the subtasks (by number), which the upstream bounds
to a few items a read and continues by keyset (`checkpointsBefore`, `subtasksAfter`,
docs/runtime.md). Whenever one of them is not given whole, the answer carries a bridge cursor
(`meta.next_cursor`, `meta.continuation`: `task_get` with the same channel and number and that
`cursor`), and each continued read gives what follows:

- `description`: the text from the character `meta.continued.description_from` on, cut on an
  extended grapheme cluster boundary *without* "…", so the parts concatenate to the whole (null
  with `description_from: null` once the description was given whole);
- `checkpoints.items`: the ones older than the last given; `subtasks.items`: the ones after the
  last given (`[]` once a section was given whole); `total` always counts the whole section;
- the profile fields as they are now.

    bd1.<base64url JSON {"d", "e", "c", "cn", "s", "sn", "t", "h"}>.<32 hex of HMAC-SHA256>

signed like the list cursors (`_cursor`, one installation key), bound (`d`) to the workspace,
board and number; `c`/`s` are the last checkpoint id / subtask number given (`-1`: the section
is done), `cn`/`sn` how many were given, `t` the characters of the description given (`-1`: done)
and `h` a digest of the description, so a description edited between reads is `cursor_mismatch`
instead of a spliced text. Appends and deletes between reads skip nothing that stays.

Cutting order, within the budget: the profile (title, labels, checklist...) keeps at most half
of it (cut as `_budget` cuts, not continuable); the description keeps at least a quarter when it
is long; then checkpoints and subtasks are dropped from the end, the description is widened
again as far as fits, and each answer gives at least one new part, so a continuation always ends.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from typing import Any, NamedTuple

from agentteam_task_bridge.journal import cut_point

from ._budget import fit, grapheme_ends, profile_fit, size
from ._cursor import Cursors, PageState
from ._errors import ToolError

DETAIL_PREFIX = "bd1."
_RESERVE = 2048  # room for the markers: cursor, continuation, fields, note
_MERGE_ROOM = 1024  # room for this module's notes and fields beside `_budget`'s
_DESCRIPTION = "$.data.task.description"
_CHECKPOINTS = "$.data.task.checkpoints.items"
_SUBTASKS = "$.data.task.subtasks.items"
_DONE = -1
_PARTS = ("description", "checkpoints", "subtasks")
_NAMES = {_DESCRIPTION: "description", _CHECKPOINTS: "checkpoints", _SUBTASKS: "subtasks"}


class DetailState(NamedTuple):
    """How far a detail was given before this read (all zero / None: a first read)."""

    digest: str
    checkpoints_before: int | None = None  # last checkpoint id given; -1 done
    checkpoints_given: int = 0
    subtasks_after: int = 0  # last subtask number given; -1 done
    subtasks_given: int = 0
    description_from: int = 0  # characters given; -1 done
    description_digest: str | None = None
    continued: bool = False


def detail_digest(arguments: dict[str, Any], workspace: str) -> str:
    material = f"{workspace}\x00{arguments.get('channel')}\x00{arguments.get('number')}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def detail_request(
    args: dict[str, Any], workspace: str, cursors: Cursors
) -> tuple[dict[str, Any], DetailState]:
    """The upstream arguments of a `task_get` call and how far its detail was given."""
    upstream = dict(args)
    cursor = upstream.pop("cursor", None)
    state = DetailState(detail_digest(args, workspace))
    if not isinstance(cursor, str):
        return upstream, state
    body = cursors.open_sealed(DETAIL_PREFIX, cursor)
    try:
        state = DetailState(
            digest=body["d"],
            checkpoints_before=body["c"],
            checkpoints_given=body["cn"],
            subtasks_after=body["s"],
            subtasks_given=body["sn"],
            description_from=body["t"],
            description_digest=body["h"],
            continued=True,
        )
    except (KeyError, TypeError):
        raise cursors.invalid() from None
    if state.digest != detail_digest(args, workspace):
        raise ToolError("cursor_mismatch", field_errors={"$.cursor": "issued for another task"})
    if isinstance(state.checkpoints_before, int) and state.checkpoints_before > 0:
        upstream["checkpoints_before"] = state.checkpoints_before
    if state.subtasks_after > 0:
        upstream["subtasks_after"] = state.subtasks_after
    return upstream, state


def continue_detail(data: dict[str, Any], meta: dict[str, Any], state: DetailState) -> None:
    """A continued read's task in place: the description from where it was cut, the sections
    without what was given; `meta.continued` says where the description starts."""
    if not state.continued:
        return
    task = data["task"]
    full = task.get("description") or ""
    if state.description_from == _DONE:
        task["description"] = None
        start: int | None = None
    else:
        if state.description_digest is not None and _text_digest(full) != state.description_digest:
            raise ToolError(
                "cursor_mismatch",
                message="The task's description changed since this cursor was issued; read the "
                "task again without a cursor.",
                field_errors={"$.cursor": "the description changed since it was issued"},
            )
        start = state.description_from
        task["description"] = full[start:]
    if state.checkpoints_before == _DONE:
        task["checkpoints"]["items"] = []
    if state.subtasks_after == _DONE:
        task["subtasks"]["items"] = []
    meta["continued"] = {"description_from": start}


def fit_detail(
    tool: str,
    limit: int,
    envelope: dict[str, Any],
    state: DetailState,
    cursors: Cursors,
) -> bool:
    """Bound a `task_get` envelope to `limit` bytes in place, continuing what it cuts; True when
    the answer is not the whole rest of the task (cut here or bounded upstream)."""
    data = envelope.get("data")
    task = data.get("task") if isinstance(data, dict) else None
    if not isinstance(task, dict):
        return fit(tool, limit, envelope)
    cp_items: list[Any] = task["checkpoints"]["items"]
    st_items: list[Any] = task["subtasks"]["items"]
    text = task.get("description")
    full_text = text if isinstance(text, str) else ""
    paths: list[str] = []
    bounded = (
        state.checkpoints_given + len(cp_items) < task["checkpoints"]["total"]
        or state.subtasks_given + len(st_items) < task["subtasks"]["total"]
    )
    whole = size(envelope)
    if whole > limit or (bounded and whole > limit - _RESERVE):
        paths += _cut_parts(tool, limit - _RESERVE, envelope, task, full_text)
    kept = task.get("description")
    kept_text = kept if isinstance(kept, str) else ""
    kept_cp: list[Any] = task["checkpoints"]["items"]
    kept_st: list[Any] = task["subtasks"]["items"]
    # What is still to come after this answer, part by part.
    text_more = len(kept_text) < len(full_text)
    cp_more = len(kept_cp) < len(cp_items) or (
        bool(cp_items) and state.checkpoints_given + len(kept_cp) < task["checkpoints"]["total"]
    )
    st_more = len(kept_st) < len(st_items) or (
        bool(st_items) and state.subtasks_given + len(kept_st) < task["subtasks"]["total"]
    )
    if state.checkpoints_before == _DONE:
        cp_more = False
    if state.subtasks_after == _DONE:
        st_more = False
    if not (text_more or cp_more or st_more):
        if not paths:
            return False
        return _finish(tool, limit, envelope, paths, None)
    body = {
        "d": state.digest,
        "c": _last(kept_cp, "id", state.checkpoints_before) if cp_more else _DONE,
        "cn": state.checkpoints_given + len(kept_cp),
        "s": _last(kept_st, "number", state.subtasks_after) if st_more else _DONE,
        "sn": state.subtasks_given + len(kept_st),
        "t": (max(state.description_from, 0) + len(kept_text)) if text_more else _DONE,
        "h": None,
    }
    if text_more:  # what the description is: a first read's whole text
        body["h"] = state.description_digest if state.continued else _text_digest(full_text)
    cursor = cursors.seal(DETAIL_PREFIX, body)
    for flag, path in ((text_more, _DESCRIPTION), (cp_more, _CHECKPOINTS), (st_more, _SUBTASKS)):
        if flag and path not in paths:
            paths.append(path)
    return _finish(tool, limit, envelope, paths, cursor)


def _last(items: list[Any], key: str, before: int | None) -> int | None:
    """The position a section continues after: its last item given, else where it was."""
    if items and isinstance(items[-1], dict) and isinstance(items[-1].get(key), int):
        value: int = items[-1][key]
        return value
    return before


def _cut_parts(
    tool: str, room: int, envelope: dict[str, Any], task: dict[str, Any], full_text: str
) -> list[str]:
    """Cut the profile, the description and the sections so the envelope fits `room`; returns
    the profile paths cut (which no read continues)."""
    cps: list[Any] = list(task["checkpoints"]["items"])
    sts: list[Any] = list(task["subtasks"]["items"])
    byte_ends, char_ends = grapheme_ends(full_text)
    total = len(char_ends)
    paths = profile_fit(tool, room // 2, envelope, task, _PARTS)

    def put(clusters: int, n_cp: int, n_st: int) -> int:
        if full_text:
            end = char_ends[clusters - 1] if clusters else 0
            if clusters < total:  # never half a credential: it goes whole into the next part
                end = cut_point(full_text, end) or end
            task["description"] = full_text[:end]
        task["checkpoints"]["items"] = cps[:n_cp]
        task["subtasks"]["items"] = sts[:n_st]
        return size(envelope)

    if put(total, len(cps), len(sts)) <= room:
        return paths
    floor = bisect_right(byte_ends, room // 4)  # the description keeps a quarter if long
    n_cp, n_st = len(cps), len(sts)
    while (n_cp or n_st) and put(floor, n_cp, n_st) > room:
        last_cp = size({"x": cps[n_cp - 1]}) if n_cp else -1
        last_st = size({"x": sts[n_st - 1]}) if n_st else -1
        if last_cp >= last_st:
            n_cp -= 1
        else:
            n_st -= 1
    low, high = (floor, total) if put(floor, n_cp, n_st) <= room else (0, floor)
    while low < high:  # the longest description that fits
        mid = (low + high + 1) // 2
        if put(mid, n_cp, n_st) <= room:
            low = mid
        else:
            high = mid - 1
    if low == 0 and n_cp == 0 and n_st == 0:  # always give something new: text, or an item
        if total:
            low = 1
        elif cps:
            n_cp = 1
        elif sts:
            n_st = 1
    put(low, n_cp, n_st)
    return paths


def _finish(
    tool: str, limit: int, envelope: dict[str, Any], paths: list[str], cursor: str | None
) -> bool:
    meta = envelope.setdefault("meta", {})
    meta["truncated"] = True
    notes = ["Not the whole task: cut to fit the result budget or bounded by the runtime."]
    continued = [_NAMES[p] for p in paths if p in _NAMES]
    if cursor is not None:
        task = envelope["data"]["task"]
        meta["next_cursor"] = cursor
        meta["continuation"] = {
            "tool": "task_get",
            "arguments": {"channel": task["channel"], "number": task["number"], "cursor": cursor},
        }
        notes.append(
            f"More of the {' and '.join(continued)} follows: call task_get with "
            "meta.next_cursor as `cursor` (a cut description stops on a character boundary, "
            "without …, and the next part starts there)."
        )
    if len(continued) < len(paths):
        notes.append("Other cut fields end with … and no tool returns them whole.")
    meta["truncated_fields"] = paths
    meta["truncation_note"] = " ".join(notes)
    if size(envelope) > limit:  # one part larger than the room left (a 16 KB checkpoint)
        # Cut as `_budget` cuts, with room for this module's markers, then merge them.
        fit(tool, limit - _MERGE_ROOM, envelope)
        meta = envelope["meta"]  # `fit` builds a new one
        fields = dict.fromkeys([*paths, *meta["truncated_fields"]])
        meta["truncated_fields"] = list(fields)
        meta["truncation_note"] = " ".join([*notes[1:], meta["truncation_note"]])
    return True


def fit_answer(
    name: str,
    budget: int,
    envelope: dict[str, Any],
    arguments: dict[str, Any],
    list_state: PageState | None,
    detail_state: DetailState | None,
    cursors: Cursors,
) -> bool:
    """Bound an answer to its tool's budget (`_budget`), continuing what a cut or an upstream
    bound leaves out where the tool can (`_cursor` pages, this module's sections)."""
    if detail_state is not None:
        return fit_detail(name, budget, envelope, detail_state, cursors)
    return fit(
        name, budget, envelope, list_state=list_state, list_arguments=arguments, cursors=cursors
    )
