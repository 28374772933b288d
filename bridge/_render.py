"""The short text rendering beside `structuredContent`, for runtimes that read text first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MAX_LINES = 10


def _task(t: dict[str, Any]) -> str:
    who = f" {t['assignee']}" if t.get("assignee") else ""
    return (
        f"#{t.get('channel', '?')}/{t['number']} {t.get('title', '')} [{t.get('status', '?')}]{who}"
    )


def _lines(tasks: list[dict[str, Any]]) -> str:
    shown = [_task(t) for t in tasks[:_MAX_LINES]]
    if len(tasks) > _MAX_LINES:
        shown.append(f"... and {len(tasks) - _MAX_LINES} more in structuredContent")
    return "\n".join(shown)


def _list(d: dict[str, Any], m: dict[str, Any]) -> str:
    head = f"{len(d['items'])} task(s) on #{d['channel']}"
    if m.get("next_cursor"):
        head += " (more: pass next_cursor)"
    return head + (":\n" + _lines(d["items"]) if d["items"] else ".")


def _get(d: dict[str, Any], m: dict[str, Any]) -> str:
    t = d["task"]
    return (
        f"{_task(t)} updated_at={t['updated_at']} subtasks={t['subtask_count']} "
        f"checkpoints={t['checkpoints']['total']}"
    )


def _create(d: dict[str, Any], m: dict[str, Any]) -> str:
    verb = "Reused" if d["reused"] else "Created"
    return f"{verb} {len(d['tasks'])} task(s):\n" + _lines(d["tasks"])


def _update(d: dict[str, Any], m: dict[str, Any]) -> str:
    changed = ", ".join(d["changed"]) or "nothing (already so)"
    return f"Updated {_task(d['task'])}: {changed}; updated_at={d['task']['updated_at']}"


def _claim(d: dict[str, Any], m: dict[str, Any]) -> str:
    state = "claimed" if d["claimed"] else "released"
    text = f"{d['count']} task(s) {state} on #{d['channel']}"
    if d["failures"]:
        text += "; failed: " + ", ".join(f"{f['number']} ({f['code']})" for f in d["failures"])
    return text


def _checkpoint(d: dict[str, Any], m: dict[str, Any]) -> str:
    return f"Checkpoint {d['checkpoint']['id']} on {_task(d['task'])}"


def _delete(d: dict[str, Any], m: dict[str, Any]) -> str:
    text = f"Deleted {', '.join(map(str, d['deleted']))} on #{d['channel']}"
    if d["promoted"]:
        text += f"; promoted {', '.join(map(str, d['promoted']))}"
    return text


RENDERERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], str]] = {
    "task_list": _list,
    "task_get": _get,
    "task_create": _create,
    "task_update": _update,
    "task_set_claim": _claim,
    "task_checkpoint": _checkpoint,
    "task_delete": _delete,
}


def render(tool: str, data: dict[str, Any], meta: dict[str, Any]) -> str:
    text = RENDERERS[tool](data, meta)
    if meta.get("truncated"):
        text += "\n[truncated: see meta.next_cursor / meta.continuation]"
    return text
