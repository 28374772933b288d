"""A page cut by the budget continues by identity, through the wire: no task skipped when one
changes between pages, another `limit` continues after the last task given, and an edited
cursor is refused (the property test over random edits is in test_bridge_cursors)."""

from __future__ import annotations

from pathlib import Path

from .wire_audit import WIDE, audited_bridge


async def test_a_cut_page_continues_after_its_last_task_whatever_changes(tmp_path: Path) -> None:
    async with audited_bridge(tmp_path) as audit:
        labels = [f"{i:02d}" + WIDE * 48 for i in range(20)]
        for _ in range(31):
            await audit.ok(
                "task_create",
                {"channel": "eng", "tasks": [{"title": WIDE * 200, "labels": labels}]},
            )
        first = await audit.ok("task_list", {"channel": "eng", "limit": 31})
        kept = [t["number"] for t in first["data"]["items"]]
        assert kept == list(range(1, len(kept) + 1)) and len(kept) < 31
        cursor = first["meta"]["next_cursor"]
        # A task updated between pages: nothing skipped.
        await audit.ok("task_update", {"channel": "eng", "number": 2, "patch": {"status": "done"}})
        # Another limit continues after the last task given.
        rest = await audit.ok("task_list", {"channel": "eng", "limit": 3, "cursor": cursor})
        assert [t["number"] for t in rest["data"]["items"]] == [len(kept) + i for i in (1, 2, 3)]
        edited = cursor[:-1] + ("0" if cursor[-1] != "0" else "1")
        await audit.fails("task_list", {"channel": "eng", "cursor": edited}, "cursor_invalid")
