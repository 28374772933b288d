"""The text content of a tool result: one summary line, then the same JSON as `structuredContent`.

Some runtimes hand the model only `structuredContent`, others only the text, so the text carries
the whole serialized envelope (as the MCP specification recommends for structured results): a
runtime reading only text loses nothing, cursors, descriptions and truncation markers included.
The summary line is for people reading a transcript; it is bounded and never holds model text
(titles and descriptions are in the JSON only), so it cannot grow or break the line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

_plain = msgspec.json.Encoder().encode
_MAX_NUMBERS = 10
MAX_SUMMARY_CHARS = 200


def _numbers(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:_MAX_NUMBERS]))
    hidden = len(numbers) - _MAX_NUMBERS
    return shown + (f" and {hidden} more" if hidden > 0 else "")


def _ref(t: dict[str, Any]) -> str:
    return f"#{t['channel']}/{t['number']}"


def _list(d: dict[str, Any], m: dict[str, Any]) -> str:
    more = "; more: pass meta.next_cursor" if m.get("next_cursor") else "; no more pages"
    return f"{len(d['items'])} task(s) on #{d['channel']}{more}."


def _get(d: dict[str, Any], m: dict[str, Any]) -> str:
    t = d["task"]
    return f"Task {_ref(t)} [{t['status']}], updated_at {t['updated_at']}."


def _create(d: dict[str, Any], m: dict[str, Any]) -> str:
    verb = "Reused" if d["reused"] else "Created"
    numbers = _numbers([t["number"] for t in d["tasks"]])
    return f"{verb} {len(d['tasks'])} task(s) on #{d['channel']}: {numbers}."


def _update(d: dict[str, Any], m: dict[str, Any]) -> str:
    changed = ", ".join(d["changed"]) or "nothing (already so)"
    return f"Updated {_ref(d['task'])}: {changed}."


def _claim(d: dict[str, Any], m: dict[str, Any]) -> str:
    state = "claimed" if d["claimed"] else "released"
    text = f"{d['count']} task(s) {state} on #{d['channel']}"
    if d["failures"]:
        text += f"; {len(d['failures'])} failed: {_numbers([f['number'] for f in d['failures']])}"
    return text + "."


def _checkpoint(d: dict[str, Any], m: dict[str, Any]) -> str:
    return f"Checkpoint {d['checkpoint']['id']} on {_ref(d['task'])}."


def _delete(d: dict[str, Any], m: dict[str, Any]) -> str:
    text = f"Deleted {_numbers(d['deleted'])} on #{d['channel']}"
    if d["promoted"]:
        text += f"; promoted {_numbers(d['promoted'])}"
    return text + "."


SUMMARIES: dict[str, Callable[[dict[str, Any], dict[str, Any]], str]] = {
    "task_list": _list,
    "task_get": _get,
    "task_create": _create,
    "task_update": _update,
    "task_set_claim": _claim,
    "task_checkpoint": _checkpoint,
    "task_delete": _delete,
}


def summary(tool: str, envelope: dict[str, Any]) -> str:
    """One line for a person reading the transcript; the JSON after it is the answer."""
    meta = envelope.get("meta", {})
    line = SUMMARIES[tool](envelope["data"], meta)
    if meta.get("truncated"):
        line += " Truncated: see meta.truncated_fields."
    line = " ".join(line.split())  # one line, whatever an upstream value held
    return line if len(line) <= MAX_SUMMARY_CHARS else line[: MAX_SUMMARY_CHARS - 1] + "…"


def render(tool: str, envelope: dict[str, Any]) -> str:
    """The text content of a successful result: the summary line, a newline, the envelope."""
    return summary(tool, envelope) + "\n" + _plain(envelope).decode()


def render_error(envelope: dict[str, Any]) -> str:
    """The text content of an error result: the envelope's JSON alone (it says what happened)."""
    return _plain(envelope).decode()
