"""`agentteam-bridge demo`: one realistic agent journey through the real bridge, then its audit.

The reference runtime runs in-process on loopback (a fresh database in a temp dir); the bridge
runs as `agentteam-bridge serve`, a real subprocess, driven by the `mcp` SDK's stdio client, the
way Claude Code or Cursor would drive it. Every step checks its result against the contract, and
the journal the bridge wrote is verified at the end. Exit 0 only if every check held.

The steps themselves are :mod:`._journey`; here the runtime and the bridge are
started around them, and the journal is read back with ``replay`` at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO, cast

import mcp_types as types
import msgspec
import trio
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from rich.console import Console
from rich.text import Text

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.bridge import __version__
from agentteam_task_bridge.runtime import Runtime, RuntimeConfig, open_runtime

from ._journey import STEP_TIMEOUT_SECONDS, WIDTH, DemoFailed, Tour, journey, short_text, to_json

CLIENT = types.Implementation(name="agentteam-demo", version=__version__)
METADATA = Path(journal.__file__).parent / "datasette-metadata.json"
# What the bridge subprocess inherits besides the SDK's safe default environment: where its
# journal key lives (XDG), so that this process can check the checkpoints it signs.
_PASSED_ENV = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "LANG", "LC_ALL")


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


def bridge_command(journal_path: Path) -> list[str]:
    """`agentteam-bridge serve` with this interpreter, so it runs the code of this install."""
    return [
        sys.executable,
        "-m",
        "agentteam_task_bridge.bridge._cli",
        "serve",
        "--journal",
        str(journal_path),
    ]


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
        journal.make_private_dir(path.parent)
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
    detail = short_text(said or _leaf(exc), 200)
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
        console.print(Text(f"  got: {short_text(_json_or_repr(failed.got), 400)}", "red"))
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
        return to_json(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)
