"""Journals rolled over into segments, for the segment, verify and prune tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import CallReceived, CallResult, Event

from . import KEY, SAMPLE_PAYLOADS

SEGMENT: Final = 256 * 1024
# 4-byte and 3-byte UTF-8 text: sizes are bytes, and every byte counts toward a roll-over.
TEXT: Final = "𝄞漢✓" * 2500


def call_events(i: int, session: str = "s1") -> list[Event]:
    """One whole read-style call (received, context, result) carrying TEXT."""
    call, tool = f"c{i}", "task_create"
    return [
        Event(
            session_id=session,
            call_id=call,
            gen_ai_tool_name=tool,
            payload=CallReceived(arguments={"title": f"{i} 𝄞", "description": TEXT}),
        ),
        Event(
            session_id=session,
            call_id=call,
            gen_ai_tool_name=tool,
            payload=SAMPLE_PAYLOADS["context_injected"],
        ),
        Event(
            session_id=session,
            call_id=call,
            gen_ai_tool_name=tool,
            payload=CallResult(result={"data": {"number": i, "title": f"{i} 𝄞"}}),
        ),
    ]


def session_event(session: str = "s1") -> Event:
    return Event(session_id=session, payload=SAMPLE_PAYLOADS["session_started"])


def write_segmented(
    path: Path, calls: int, *, start: int = 0, key: Any = KEY, **options: Any
) -> None:
    """One session of ``calls`` calls, rolling over every SEGMENT bytes; the writer closes."""
    session = f"s{start}"
    with journal.open_sync_writer(path, key=key, segment_bytes=SEGMENT, **options) as writer:
        writer.append(session_event(session))
        for i in range(start, start + calls):
            writer.append_many(call_events(i, session))


def files_of(path: Path) -> list[Path]:
    """The journal's segment files, first to live."""
    return [p for _, p in journal.segment_files(path)]


def first_row(path: Path) -> tuple[Any, ...]:
    with journal.open_reader(path) as reader:
        row = reader.first_row()
    assert row is not None
    return row
