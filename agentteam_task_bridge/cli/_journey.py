"""The demo's journey: an agent's day on the `general` board, every tool, each step checked.

:class:`Tour` prints each step and calls the bridge through one MCP session; :func:`journey` is
the script of steps, read in the order the demo prints them. :mod:`._demo` starts
the runtime and the bridge, runs the journey, and verifies the journal the bridge wrote.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, cast

import httpx
import mcp_types as types
import msgspec
import trio
from mcp.client import ClientSession
from rich.console import Console
from rich.text import Text

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import TOOLS
from agentteam_task_bridge.journal import META_CALLBACK, META_RUN
from agentteam_task_bridge.runtime import OTHER_AGENT_ID, Runtime

__all__ = [
    "STEP_TIMEOUT_SECONDS",
    "WIDTH",
    "DemoFailed",
    "Tour",
    "expect",
    "journey",
    "short_text",
    "to_json",
]

WIDTH = 80
STEP_TIMEOUT_SECONDS = 30.0
_encode = msgspec.json.Encoder().encode


class DemoFailed(Exception):
    """A step did not behave as the contract says."""

    def __init__(self, expected: str, got: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.got = got


def short_text(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def to_json(value: Any) -> str:
    return _encode(value).decode()


class Tour:
    """Prints the journey step by step, and calls the bridge through one MCP session."""

    def __init__(self, console: Console, session: ClientSession, runtime: Runtime) -> None:
        self.console = console
        self.session = session
        self.runtime = runtime
        self.steps = 0

    @property
    def width(self) -> int:
        return min(self.console.width, WIDTH)

    def line(self, marker: str, text: str, style: str = "", indent: int = 5) -> None:
        body = short_text(text, self.width - indent - len(marker) - 1)
        self.console.print(Text.assemble(" " * indent, (marker, style), " ", body))

    def wrapped(self, marker: str, text: str, style: str = "") -> None:
        """Text worth reading whole (an error's message and its suggested action)."""
        width = self.width - 8
        for i, row in enumerate(textwrap.wrap(text, width, break_on_hyphens=False)[:6]):
            self.line(marker if i == 0 else "  ", row, style)

    def step(self, tool: str, why: str) -> None:
        self.steps += 1
        self.console.print()
        head = Text.assemble((f"{self.steps:>3}. ", "bold"), (tool, "bold cyan"), f"  {why}")
        head.truncate(self.width, overflow="ellipsis")
        self.console.print(head)

    def note(self, text: str) -> None:
        self.console.print()
        self.line("..", text, "magenta", indent=2)

    def ok(self, text: str) -> None:
        self.line("ok", text, "bold green")

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> types.CallToolResult:
        if meta:
            self.line("_meta", to_json(meta), "dim")
        self.line("args", to_json(arguments), "dim")
        with trio.fail_after(STEP_TIMEOUT_SECONDS):
            result = await self.session.call_tool(
                tool, arguments, meta=cast("types.RequestParamsMeta | None", meta)
            )
        if result.is_error:
            error = (result.structured_content or {}).get("error", {})
            self.wrapped("<-", f"error {error.get('code')}: {error.get('message', '')}", "yellow")
            if error.get("suggested_action"):
                action = json.dumps(error["suggested_action"], ensure_ascii=False)
                self.wrapped("  ", "suggested_action " + action, "yellow")
        else:
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            for i, row in enumerate(text.splitlines()):
                self.line("<-" if i == 0 else "  ", row, "blue")
        return result

    async def ok_call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A call that must succeed; its `structuredContent`."""
        result = await self.call(tool, arguments, meta)
        content = result.structured_content
        if result.is_error or not isinstance(content, dict):
            raise DemoFailed(f"{tool} succeeds", content)
        return content

    async def error_call(
        self, tool: str, arguments: dict[str, Any], code: str, meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A call that must fail with `code`; its `error` object."""
        result = await self.call(tool, arguments, meta)
        error = (result.structured_content or {}).get("error")
        if not (result.is_error and isinstance(error, dict) and error.get("code") == code):
            raise DemoFailed(f"{tool} answers the error `{code}`", result.structured_content)
        return error


def expect(condition: bool, expected: str, got: Any) -> None:
    if not condition:
        raise DemoFailed(expected, got)


def _numbers(tasks: list[dict[str, Any]]) -> list[int]:
    return [t["number"] for t in tasks]


async def journey(tour: Tour) -> None:
    """The agent's day on the `general` board, every tool, with the errors an agent meets."""
    rt = tour.runtime
    tour.step("tools/list", "what the model sees")
    with trio.fail_after(STEP_TIMEOUT_SECONDS):
        tools = (await tour.session.list_tools()).tools
    names = [t.name for t in tools]
    tour.line("<-", ", ".join(names), "blue")
    expect(names == list(TOOLS), f"exactly the seven tools {list(TOOLS)}", names)
    tour.ok("seven canonical tools, no deprecated name among them")

    tour.step("task_create", "plan a release as a batch of three tasks")
    titles = ["Prepare the v1.0 release", "Write the release notes", "Announce the release"]
    created = await tour.ok_call(
        "task_create", {"channel": "general", "tasks": [{"title": t} for t in titles]}
    )
    batch = created["data"]["tasks"]
    parent, notes, announce = _numbers(batch)
    expect(
        [t["title"] for t in batch] == titles and created["data"]["reused"] is False,
        "three new tasks with those titles, reused: false",
        created["data"],
    )
    tour.ok(f"numbers {parent}, {notes}, {announce}; reused: false")

    tour.step("task_create", f"break #{parent} down into two subtasks")
    subs = await tour.ok_call(
        "task_create",
        {
            "channel": "general",
            "parent": parent,
            "tasks": [{"title": "Freeze the API"}, {"title": "Run the release checklist"}],
        },
    )
    children = _numbers(subs["data"]["tasks"])
    expect(
        all(t["parent"] == parent for t in subs["data"]["tasks"]),
        f"both subtasks under #{parent}",
        subs["data"],
    )
    tour.ok(f"subtasks {children[0]} and {children[1]} of #{parent}")

    tour.step("task_list", "browse the open tasks of #general")
    listed = await tour.ok_call("task_list", {"channel": "general"})
    shown = _numbers(listed["data"]["items"])
    expect(
        shown == [parent, notes, announce] and "next_cursor" not in listed["meta"],
        f"tasks {[parent, notes, announce]} (subtasks hidden by default), no next page",
        shown,
    )
    tour.ok("top-level tasks only; no next_cursor, so this page is everything")

    tour.step("task_list", "search before doing: a non-empty query searches")
    found = await tour.ok_call("task_list", {"channel": "general", "query": "release notes"})
    hits = _numbers(found["data"]["items"])
    expect(bool(hits) and hits[0] == notes, f"#{notes} ranked first", hits)
    tour.ok(f"#{notes} ranks first by relevance")

    tour.step("task_set_claim", f"take #{parent}")
    claim = await tour.ok_call(
        "task_set_claim", {"channel": "general", "numbers": [parent], "claimed": True}
    )
    expect(
        claim["data"]["count"] == 1 and claim["data"]["changed"] == [parent],
        f"#{parent} claimed",
        claim["data"],
    )
    tour.ok("claimed; claiming again would be a harmless no-op (a desired state)")

    tour.step("task_get", f"read #{parent} and remember its revision")
    got = await tour.ok_call("task_get", {"channel": "general", "number": parent})
    seen = got["data"]["task"]["updated_at"]
    tour.ok(f"updated_at {seen}")

    edit = "Target Friday; the release notes go out with it."
    await _teammate_edits(rt, parent, edit)
    tour.note(f"meanwhile @helper-agent edits #{parent}'s description in the runtime")

    tour.step("task_update", "start work with the revision read before the edit")
    stale = await tour.error_call(
        "task_update",
        {
            "channel": "general",
            "number": parent,
            "expected_updated_at": seen,
            "patch": {"status": "in_progress"},
        },
        "stale_update",
    )
    action = stale.get("suggested_action") or {}
    expect(
        action.get("tool") == "task_get",
        "a conflict whose suggested_action is task_get",
        stale,
    )
    tour.ok("refused, not overwritten; the error says what to do next")

    tour.step(action["tool"], "follow the suggested_action as given")
    fresh = await tour.ok_call(action["tool"], action["arguments"])
    task = fresh["data"]["task"]
    expect(task["description"] == edit, "the teammate's description", task.get("description"))
    tour.ok(f"sees the teammate's edit; fresh updated_at {task['updated_at']}")

    tour.step("task_update", "retry with the fresh revision")
    updated = await tour.ok_call(
        "task_update",
        {
            "channel": "general",
            "number": parent,
            "expected_updated_at": task["updated_at"],
            "patch": {"status": "in_progress"},
        },
    )
    expect(updated["data"]["changed"] == ["status"], "only status changed", updated["data"])
    tour.ok("in_progress, and the teammate's description is kept")

    tour.step("task_checkpoint", "record a decision")
    checkpoint = await tour.ok_call(
        "task_checkpoint",
        {"channel": "general", "number": parent, "summary": "Scope frozen: ship v1.0 Friday."},
    )
    expect(
        checkpoint["data"]["checkpoint"]["summary"] == "Scope frozen: ship v1.0 Friday.",
        "the checkpoint as written",
        checkpoint["data"],
    )
    tour.ok("appended (checkpoints are append-only)")

    await _idempotent_create(tour)

    tour.step("list_tasks", "an old client uses a deprecated name (--compat hint)")
    old = await tour.error_call(
        "list_tasks", {"channel": "general", "includeSubtasks": True}, "deprecated_tool"
    )
    action = old.get("suggested_action") or {}
    expect(
        action.get("tool") == "task_list"
        and action.get("arguments") == {"channel": "general", "include_subtasks": True},
        "suggested_action: task_list with the arguments mapped to canonical spellings",
        old,
    )
    tour.ok("not executed; the replacement comes fully mapped")

    tour.step(action["tool"], "send the suggested_action back unchanged")
    everything = await tour.ok_call(action["tool"], action["arguments"])
    every = set(_numbers(everything["data"]["items"]))
    expect(
        {parent, notes, announce, *children} <= every,
        "every task, subtasks included",
        sorted(every),
    )
    expect(
        "deprecation" not in everything["meta"],
        "no deprecation notice on the canonical call",
        everything["meta"],
    )
    tour.ok(f"{len(every)} tasks, subtasks included")

    tour.step("task_delete", f"drop #{parent} but keep its subtasks")
    deleted = await tour.ok_call(
        "task_delete", {"channel": "general", "number": parent, "subtask_mode": "promote"}
    )
    expect(
        deleted["data"]["deleted"] == [parent] and deleted["data"]["promoted"] == children,
        f"#{parent} deleted, {children} promoted",
        deleted["data"],
    )
    tour.ok(f"#{parent} deleted; {children[0]} and {children[1]} moved up a level")

    tour.step("task_get", f"#{children[0]} after the promotion")
    child = await tour.ok_call("task_get", {"channel": "general", "number": children[0]})
    expect(child["data"]["task"]["parent"] is None, "no parent", child["data"]["task"])
    tour.ok("a top-level task now")


async def _teammate_edits(rt: Runtime, number: int, description: str) -> None:
    """Another agent changes the task over the runtime's own API, outside this bridge."""
    route = journal.tasks_route(rt.workspace_id, OTHER_AGENT_ID) + "/update"
    token = rt.mint_token(OTHER_AGENT_ID)
    async with httpx.AsyncClient(base_url=rt.url, timeout=STEP_TIMEOUT_SECONDS) as http:
        response = await http.post(
            route,
            json={"channel": "general", "number": number, "patch": {"description": description}},
            headers={"authorization": f"Bearer {token}"},
        )
    expect(response.status_code == 200, "the teammate's edit lands", response.text)


async def _idempotent_create(tour: Tour) -> None:
    """A workflow callback creates a task, its retry replays the receipt and allocates nothing."""
    rt = tour.runtime
    run, callback = "run_release_1", "cb_followup_1"
    rt.store.open_callback(rt.workspace_id, run, callback, rt.agent_id)
    meta = {META_RUN: run, META_CALLBACK: callback}
    args = {
        "channel": "general",
        "tasks": [{"title": "Collect feedback on v1.0"}],
        "idempotency_key": "followup-feedback",
    }
    tour.note(f"a workflow opens callback {callback} of run {run} for this agent")

    tour.step("task_create", "inside the callback, with an idempotency_key")
    first = await tour.ok_call("task_create", args, meta)
    expect(first["data"]["reused"] is False, "a new task, reused: false", first["data"])
    number = first["data"]["tasks"][0]["number"]
    tour.ok(f"#{number} created; the runtime keeps a receipt for the key")

    before = rt.store.stats()
    tour.step("task_create", "the stream broke; the client re-issues the same call")
    again = await tour.ok_call("task_create", args, meta)
    after = rt.store.stats()
    expect(
        again["data"]["reused"] is True and again["data"]["tasks"] == first["data"]["tasks"],
        f"reused: true with the original #{number}",
        again["data"],
    )
    counts = {"before": before, "after": after}
    expect(after == before, "no new number, activity or receipt", counts)
    tour.ok(f"reused: true, the same #{number}; {after['tasks']} tasks before and after")
