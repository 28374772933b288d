"""`agentteam-bridge demo`: one realistic agent journey through the real bridge, then its audit.

The reference runtime runs in-process on loopback (a fresh database in a temp dir); the bridge
runs as `agentteam-bridge serve`, a real subprocess, driven by the `mcp` SDK's stdio client, the
way Claude Code or Cursor would drive it. Every step checks its result against the contract, and
the journal the bridge wrote is verified at the end. Exit 0 only if every check held.

One module of about 600 lines: a script of steps, each a few lines of call and check, read in
the order the demo prints them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO, cast

import httpx
import mcp_types as types
import msgspec
import trio
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from rich.console import Console
from rich.text import Text

import journal
import replay
from bridge import TOOLS, __version__
from journal import META_CALLBACK, META_RUN
from runtime import OTHER_AGENT_ID, Runtime, RuntimeConfig, open_runtime

CLIENT = types.Implementation(name="agentteam-demo", version=__version__)
WIDTH = 80
STEP_TIMEOUT_SECONDS = 30.0
METADATA = Path(journal.__file__).parent / "datasette-metadata.json"
# What the bridge subprocess inherits besides the SDK's safe default environment: where its
# journal key lives (XDG), so that this process can check the checkpoints it signs.
_PASSED_ENV = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "LANG", "LC_ALL")
_encode = msgspec.json.Encoder().encode


class DemoFailed(Exception):
    """A step did not behave as the contract says."""

    def __init__(self, expected: str, got: Any) -> None:
        super().__init__(expected)
        self.expected = expected
        self.got = got


class SetupError(Exception):
    """The demo cannot start; the message is one line that says what to do."""


@dataclass(frozen=True)
class DemoConfig:
    journal_path: Path | None = None  # None: journal.db in a fresh temp dir


@dataclass
class Outcome:
    journal_path: Path
    steps: int = 0
    failure: DemoFailed | None = None
    verified: bool = False


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _json(value: Any) -> str:
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
        body = _short(text, self.width - indent - len(marker) - 1)
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
            self.line("_meta", _json(meta), "dim")
        self.line("args", _json(arguments), "dim")
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


def bridge_command(journal_path: Path) -> list[str]:
    """`agentteam-bridge serve` with this interpreter, so it runs the code of this install."""
    return [sys.executable, "-m", "bridge._cli", "serve", "--journal", str(journal_path)]


@asynccontextmanager
async def open_tour(
    console: Console, rt: Runtime, journal_path: Path, errlog: TextIO
) -> AsyncIterator[Tour]:
    command = bridge_command(journal_path)
    passed = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={**passed, **rt.bridge_env()}
    )
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, client_info=CLIENT) as session:
            with trio.fail_after(STEP_TIMEOUT_SECONDS):
                init = await session.initialize()
            console.print(
                Text(
                    f"  connected: {init.server_info.name} {init.server_info.version}, "
                    f"protocol {init.protocol_version}",
                    style="dim",
                )
            )
            yield Tour(console, session, rt)


def _check_journal_path(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise SetupError(
            f"cannot use {path.parent} as the journal's directory ({exc.strerror}); "
            "pass --journal PATH in a writable directory"
        ) from None
    if path.is_dir():
        raise SetupError(f"{path} is a directory; pass --journal PATH to a file, e.g. {path}/j.db")
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        raise SetupError(
            f"the journal {path} is not writable; pass --journal PATH to a writable file"
        )


async def run_journey(console: Console, journal_path: Path, workdir: Path) -> Outcome:
    outcome = Outcome(journal_path)
    config = RuntimeConfig(db_path=str(workdir / "runtime.db"), admin_token=None)
    with tempfile.TemporaryFile("w+") as errfile:
        errlog = cast(TextIO, errfile)
        try:
            async with open_runtime(config) as rt:
                console.print(Text(f"  reference runtime: {rt.url} (ws_local)", style="dim"))
                async with open_tour(console, rt, journal_path, errlog) as tour:
                    try:
                        await journey(tour)
                    except DemoFailed as failed:
                        outcome.failure = failed
                    except Exception as exc:  # the bridge died or hung: a failed step
                        outcome.failure = DemoFailed(
                            "the step to complete", _bridge_said(errlog) or _leaf(exc)
                        )
                    outcome.steps = tour.steps
        except Exception as exc:  # the bridge did not start: say why in one line
            if outcome.failure is None:
                raise SetupError(_startup_failure(exc, errlog)) from None
    return outcome


def _bridge_said(errlog: IO[str]) -> str:
    """The last line the bridge wrote on stderr."""
    errlog.flush()
    errlog.seek(0)
    said = [line for line in errlog.read().splitlines() if line.strip()]
    mine = [line for line in said if line.startswith("agentteam-bridge")]
    return (mine or said or [""])[-1]


def _leaf(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _startup_failure(exc: BaseException, errlog: IO[str]) -> str:
    said = _bridge_said(errlog)
    if said.startswith("agentteam-bridge"):
        return f"the bridge did not start: {said}"
    detail = _short(said or _leaf(exc), 200)
    return f"the bridge did not start ({detail}); try `agentteam-bridge serve --help`"


@dataclass
class JournalSummary:
    verified: replay.VerifyResult
    audited: replay.AuditReport
    deprecated: replay.DeprecationReport


def summarise_journal(path: Path) -> JournalSummary:
    """`agentteam-replay verify`, `audit` and `deprecations` on the journal, as data."""
    key_path = journal.default_key_path()
    key = journal.load_key(key_path, create=False) if key_path.exists() else None
    # The bridge signed with this machine's key: its public half is what verify trusts (as the
    # CLI does by default). verify picks up the checkpoint exported beside the journal itself.
    return JournalSummary(
        verified=replay.verify([path], key=key),
        audited=replay.audit([path]),
        deprecated=replay.deprecations([path]),
    )


def print_summary(console: Console, summary: JournalSummary, path: Path) -> None:
    verified, audited = summary.verified, summary.audited
    console.print()
    console.print(Text("The journal (agentteam-replay)", style="bold"))
    (report,) = verified.journals
    mark, style = ("ok", "bold green") if verified.ok else ("FAIL", "bold red")
    console.print(
        Text.assemble(
            "  ",
            (mark, style),
            f" verify: {report.events} events, {report.calls} calls; chain, "
            f"{report.signatures_checked} signed checkpoints, call grammar",
        )
    )
    for finding in verified.findings[:5]:
        console.print(Text(f"     {finding.where}: {finding.rule}: {finding.detail}", "red"))
    if verified.in_doubt:
        console.print(Text(f"     {len(verified.in_doubt)} in-doubt call(s)", "red"))
    sessions = len(audited.sessions)
    console.print(Text(f"  audit: {audited.calls} calls in {sessions} session(s)"))
    errors = ", ".join(f"{e.error_code} ({e.tool})" for e in audited.error_codes)
    if errors:
        console.print(Text(f"    errors: {errors}"))
    mutations = sum(m.mutations for m in audited.mutations_by_board)
    boards = sorted({f"#{m.channel}" for m in audited.mutations_by_board})
    console.print(Text(f"    mutations: {mutations} on {', '.join(boards) or 'no board'}"))
    for used in summary.deprecated.names:
        users = ", ".join(sorted({u.client_name or "?" for u in used.users}))
        console.print(
            Text(f"    deprecated: {used.old_name} -> {used.replacement}, {used.count}x by {users}")
        )
    console.print()
    rows = [
        ("journal", str(path)),
        ("checkpoint", report.held_checkpoint or "(none exported)"),
        ("verify", f"agentteam-replay verify {path}"),
        ("public key", "agentteam-replay key  (what an auditor verifies with)"),
        ("audit", f"agentteam-replay audit {path}"),
        ("browse", f"datasette {path} -m {METADATA}"),  # not -i: it would ignore the WAL
        ("query", f'sqlite-utils {path} "select * from calls"'),
    ]
    for name, value in rows:
        # soft_wrap: a long path wraps on the terminal, never with a newline inside a command.
        console.print(Text.assemble(("  " + name.ljust(11), "bold"), value), soft_wrap=True)


def make_console(file: IO[str] | None = None) -> Console:
    """Colours only on a terminal (rich's detection, NO_COLOR honoured); at most 80 columns."""
    console = Console(file=file, highlight=False, soft_wrap=False)
    console.width = min(console.width, WIDTH)
    return console


def run_demo(config: DemoConfig, console: Console | None = None) -> int:
    """Run the whole demo; 0 when every step and the journal check held, 1 if not, 2 at setup."""
    console = console or make_console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    workdir = Path(tempfile.mkdtemp(prefix="agentteam-demo-"))
    journal_path = (config.journal_path or workdir / "journal.db").expanduser().absolute()
    try:
        _check_journal_path(journal_path)
        console.print(Text(f"agentteam-bridge demo {__version__}", style="bold"))
        console.print(
            Text(f"  bridge: agentteam-bridge serve --journal {journal_path}", "dim"),
            soft_wrap=True,
        )
        started = time.perf_counter()
        outcome = trio.run(run_journey, console, journal_path, workdir)
        elapsed = time.perf_counter() - started
        summary = summarise_journal(journal_path)
    except replay.ReplayInputError as exc:
        err.print(Text(f"agentteam-bridge demo: cannot read the journal back: {exc}"))
        return 2
    except SetupError as exc:
        err.print(Text(f"agentteam-bridge demo: {exc}"))
        return 2
    except KeyboardInterrupt:
        err.print(Text("agentteam-bridge demo: interrupted"))
        return 130
    finally:
        # The runtime's database is scratch; the journal stays for browsing.
        for name in ("runtime.db", "runtime.db-wal", "runtime.db-shm"):
            (workdir / name).unlink(missing_ok=True)
        if not any(workdir.iterdir()):
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(console, summary, journal_path)
    console.print()
    if outcome.failure is not None:
        failed = outcome.failure
        console.print(Text(f"FAIL at step {outcome.steps}: expected {failed.expected}", "bold red"))
        console.print(Text(f"  got: {_short(_json_or_repr(failed.got), 400)}", "red"))
        return 1
    if not summary.verified.ok or summary.verified.in_doubt:
        console.print(Text("FAIL: the journal does not verify", "bold red"))
        return 1
    console.print(
        Text(
            f"Demo passed: {outcome.steps} steps, every tool, in {elapsed:.1f} s.",
            style="bold green",
        )
    )
    return 0


def _json_or_repr(value: Any) -> str:
    try:
        return _json(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)
