"""A task detail cut to its budget, through the wire: cut strings keep their grapheme clusters
whole (a ZWJ family stays one family)."""

from __future__ import annotations

import json
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


BUDGET = 24 * 1024  # the detail budget (docs/tools.md)


async def test_a_cut_task_reads_whole_through_its_continuation(tmp_path: Path) -> None:
    """50 checkpoints, 40 subtasks and a 40 KB description of 4-byte characters and ZWJ
    families: every part arrives exactly once through `meta.continuation`, each answer within
    the budget, valid against the outputSchema and the same JSON as text."""
    description = ("\U0001f600" * 7 + FAMILY) * 700
    locator = {"channel": "eng", "number": 1}
    async with audited_bridge(tmp_path) as audit:
        await audit.ok("task_create", {"channel": "eng", "tasks": [{"title": "parent"}]})
        await audit.ok("task_update", {**locator, "patch": {"description": description}})
        titles = [{"title": f"child {i} " + "\U00010348" * 150} for i in range(40)]
        await audit.ok("task_create", {"channel": "eng", "parent": 1, "tasks": titles})
        summaries = [f"{i:02d} " + "\U0001f680" * 390 for i in range(50)]
        for summary in summaries:
            await audit.ok("task_checkpoint", {**locator, "summary": summary})

        answer = await audit.ok("task_get", locator)
        parts: list[str] = []
        checkpoints: list[str] = []
        subtasks: list[int] = []
        reads = 1
        for _ in range(40):
            assert (
                len(
                    json.dumps(
                        _structured(answer), separators=(",", ":"), ensure_ascii=False
                    ).encode()
                )
                <= BUDGET
            )
            task = answer["data"]["task"]
            continued = answer["meta"].get("continued")
            if continued is None or continued["description_from"] is not None:
                assert continued is None or continued["description_from"] == len("".join(parts))
                parts.append(task["description"])
            checkpoints += [c["summary"] for c in task["checkpoints"]["items"]]
            subtasks += [s["number"] for s in task["subtasks"]["items"]]
            assert (task["checkpoints"]["total"], task["subtasks"]["total"]) == (50, 40)
            if "next_cursor" not in answer["meta"]:
                break
            assert answer["meta"]["truncated"] is True
            action = answer["meta"]["continuation"]
            assert action == {
                "tool": "task_get",
                "arguments": {**locator, "cursor": answer["meta"]["next_cursor"]},
            }
            answer = await audit.ok(action["tool"], action["arguments"])
            reads += 1
        else:
            raise AssertionError("the continuation did not end")
        assert "".join(parts) == description and len(parts) >= 2 and reads >= 10
        assert checkpoints == summaries[::-1]
        assert subtasks == list(range(2, 42))
        # A cursor is bound to its task, and signed.
        cursor = (await audit.ok("task_get", locator))["meta"]["next_cursor"]
        await audit.fails(
            "task_get", {"channel": "eng", "number": 2, "cursor": cursor}, "cursor_mismatch"
        )
        edited = cursor[:-1] + ("0" if cursor[-1] != "0" else "1")
        await audit.fails("task_get", {**locator, "cursor": edited}, "cursor_invalid")


def _structured(answer: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in answer.items() if k != "is_error"}
