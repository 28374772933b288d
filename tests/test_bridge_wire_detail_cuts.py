"""A task detail cut to its budget, through the wire: cut strings keep their grapheme clusters
whole (a ZWJ family stays one family)."""

from __future__ import annotations

from pathlib import Path

import regex

from .wire_audit import FAMILY, audited_bridge


async def test_a_cut_description_keeps_its_zwj_families_whole(tmp_path: Path) -> None:
    async with audited_bridge(tmp_path) as audit:
        await audit.ok("task_create", {"channel": "eng", "tasks": [{"title": "t"}]})
        await audit.ok(
            "task_update", {"channel": "eng", "number": 1, "patch": {"description": FAMILY * 1428}}
        )
        got = await audit.ok("task_get", {"channel": "eng", "number": 1})
        assert "$.data.task.description" in got["meta"]["truncated_fields"]
        head = got["data"]["task"]["description"].removesuffix("…")
        assert head and regex.findall(r"\X", head) == [FAMILY] * (len(head) // len(FAMILY))
