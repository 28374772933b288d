"""Arguments keep their one meaning, through the wire: an old tool name never runs the opposite
of the call, time values are real instants compared as instants, `""` is "none" in create and
update alike and a blank title is refused."""

from __future__ import annotations

from pathlib import Path

from .wire_audit import audited_bridge


async def test_aliases_times_and_empty_strings_keep_one_meaning(tmp_path: Path) -> None:
    async with audited_bridge(tmp_path, "--compat", "forward") as audit:
        await audit.ok("task_create", {"channel": "eng", "tasks": [{"title": "t"}]})
        # Under --compat forward, an old name never runs the opposite of the call.
        error = await audit.fails(
            "task_claim", {"channel": "eng", "numbers": [1], "claimed": False}, "invalid_arguments"
        )
        assert list(error["field_errors"]) == ["$.claimed"]

        # Impossible instants are invalid; the same instant spelled longer is current.
        for impossible in ("2026-02-30T00:00:00Z", "2026-13-45T99:99:99Z"):
            error = await audit.fails(
                "task_update",
                {
                    "channel": "eng",
                    "number": 1,
                    "patch": {"title": "t"},
                    "expected_updated_at": impossible,
                },
                "invalid_arguments",
            )
            assert list(error["field_errors"]) == ["$.expected_updated_at"]
        task = (await audit.ok("task_get", {"channel": "eng", "number": 1}))["data"]["task"]
        await audit.ok(
            "task_update",
            {
                "channel": "eng",
                "number": 1,
                "patch": {"title": "t"},
                "expected_updated_at": task["updated_at"][:-1] + "000Z",
            },
        )

        # "" is none in create and update alike; a blank title is refused.
        await audit.fails(
            "task_create", {"channel": "eng", "tasks": [{"title": "  "}]}, "invalid_arguments"
        )
        await audit.ok("task_update", {"channel": "eng", "number": 1, "patch": {"description": ""}})
        task = (await audit.ok("task_get", {"channel": "eng", "number": 1}))["data"]["task"]
        assert task["description"] is None
