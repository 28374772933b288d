"""Command line of `agentteam-bridge`: a thin layer that parses flags and calls the Python API.

`serve` is the bridge's own command (:func:`bridge.add_serve_command`); `runtime` runs the
reference runtime and its local workspace commands; `demo` (:mod:`.cli._demo`) drives
all three packages. The packages stay apart: nothing of ``bridge`` imports this one.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from agentteam_task_bridge import bridge
from agentteam_task_bridge.bridge import default_runtime_db

_EPILOG_RUNTIME = """\
examples:
  agentteam-bridge runtime --port 8765 --db ./runtime.db
  # in the background, then the AGENTTEAM_* exports it prints, in this shell:
  agentteam-bridge runtime --port 8765 > runtime.env &
  until grep -q TOKEN runtime.env; do sleep 0.2; done; . ./runtime.env
"""


def _runtime(args: argparse.Namespace) -> int:
    import trio

    from agentteam_task_bridge.runtime import (
        RuntimeConfig,
        serve_forever,
    )  # start-up: `--help` needs none of it

    config = RuntimeConfig(
        db_path=str(args.db), host=args.host, port=args.port, token_ttl_seconds=args.token_ttl
    )

    failed: list[OSError] = []

    async def until_stopped() -> None:
        # SIGTERM stops it as Ctrl-C does: a runtime started in the background (where the shell
        # has SIGINT ignored, and Python then never raises KeyboardInterrupt) can still be stopped.
        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                try:
                    await serve_forever(config)
                except OSError as exc:  # kept out of the nursery's exception group
                    failed.append(exc)
                nursery.cancel_scope.cancel()

            nursery.start_soon(serve)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(until_stopped)
    except KeyboardInterrupt:
        return 0
    for exc in failed:
        print(
            f"agentteam-bridge runtime: cannot listen on {args.host}:{args.port}: "
            f"{exc.strerror or exc}. Choose another --port.",
            file=sys.stderr,
        )
        return 1
    return 0


_EPILOG_LOCAL = """\
examples:
  agentteam-bridge runtime board add ops --name Operations
  agentteam-bridge runtime board list
  agentteam-bridge runtime callback open run_1 cb_1     # prints the _meta a client passes
  agentteam-bridge runtime callback complete run_1 cb_1
They act on the runtime database (default: the one `serve --embedded` uses), also while a bridge
is running; the local agent is a member of every board added here.
"""


def _local(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from agentteam_task_bridge.runtime import _local as local  # not in runtime's public face (yet)

    db = str(args.db)
    try:
        shown: object
        if args.what == "board" and args.action == "add":
            board = local.add_board(db, args.slug, args.name)
            shown = dataclasses.asdict(board)
            text = (
                f"board {board.slug} ({board.name}): {board.members} members, {board.tasks} tasks"
            )
        elif args.what == "board":
            boards = local.list_boards(db)
            shown = [dataclasses.asdict(b) for b in boards]
            text = "\n".join(
                f"{b.slug}\t{b.name}\t{b.members} members\t{b.tasks} tasks" for b in boards
            )
        elif args.action == "open":
            local.open_callback(db, args.run_id, args.callback_id, args.agent)
            meta = {
                "agentteam/workflow_run_id": args.run_id,
                "agentteam/callback_effect_id": args.callback_id,
            }
            shown = {"_meta": meta}
            text = json.dumps(shown)  # what a client passes, so JSON either way
        elif args.action == "complete":
            local.complete_callback(db, args.run_id, args.callback_id)
            shown = {"run_id": args.run_id, "callback_effect_id": args.callback_id}
            shown["state"] = "completed"
            text = f"callback {args.run_id}/{args.callback_id} completed"
        else:
            callbacks = local.list_callbacks(db)
            shown = [dataclasses.asdict(cb) for cb in callbacks]
            text = "\n".join(
                f"{cb.run_id}\t{cb.callback_effect_id}\t{cb.responder}\t{cb.state}"
                for cb in callbacks
            )
    except local.LocalError as exc:
        print(f"agentteam-bridge runtime {args.what}: {exc}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"agentteam-bridge runtime {args.what}: cannot use {db}: {reason}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(shown, ensure_ascii=False))
    elif text:
        print(text)
    return 0


def _local_commands(rt: argparse.ArgumentParser) -> None:
    """`runtime board ...` and `runtime callback ...`: organise the local workspace."""
    sub = rt.add_subparsers(dest="what", metavar="{board,callback}")

    def command(name: str, action: str, help: str) -> argparse.ArgumentParser:
        p = groups[name].add_parser(
            action,
            help=help,
            epilog=_EPILOG_LOCAL,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "--db",
            default=default_runtime_db(),
            help=f"the runtime database (default {default_runtime_db()})",
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(run=_local, action=action)
        return p

    groups = {}
    for name, help in (
        ("board", "add or list boards of the local workspace"),
        ("callback", "open, complete or list workflow callbacks"),
    ):
        group = sub.add_parser(
            name,
            help=help,
            epilog=_EPILOG_LOCAL,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        groups[name] = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = command("board", "add", "add a board (every local member on it)")
    add.add_argument("slug", help="the board's slug: a-z, 0-9 and '-'")
    add.add_argument("--name", help="display name (default: the slug)")
    command("board", "list", "list the boards, their members and tasks")
    opened = command("callback", "open", "open an active callback; print the _meta to pass")
    opened.add_argument("run_id")
    opened.add_argument("callback_id")
    opened.add_argument("--agent", default="agt_local", help="the responder (default agt_local)")
    done = command("callback", "complete", "complete a callback (receipts still replay)")
    done.add_argument("run_id")
    done.add_argument("callback_id")
    command("callback", "list", "list callbacks and their state")


_EPILOG_DEMO = """\
examples:
  agentteam-bridge demo                           # journal in a fresh temp dir
  agentteam-bridge demo --journal ./demo/journal.db
Exit status: 0 when every step behaved as the contract says, 1 when one did not, 2 when the
demo could not start.
"""


def _demo(args: argparse.Namespace) -> int:
    from ._demo import DemoConfig, run_demo  # start-up: imports all three packages

    return run_demo(DemoConfig(journal_path=args.journal))


def build_parser() -> argparse.ArgumentParser:
    parser = bridge.CommandParser(
        prog="agentteam-bridge",
        description="The AgentTeam Task MCP bridge and its reference runtime.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    rt = sub.add_parser(
        "runtime",
        help="run the reference Agent Runtime API alone on loopback",
        description="Run the reference Agent Runtime API and print the AGENTTEAM_* environment "
        "a bridge needs to reach it (on stdout, as shell exports).",
        epilog=_EPILOG_RUNTIME,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rt.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    rt.add_argument(
        "--port", type=bridge.port_number, default=8765, help="port (default 8765; 0 = any free)"
    )
    rt.add_argument(
        "--db",
        default=default_runtime_db(),
        help=f"SQLite database file (default {default_runtime_db()})",
    )
    rt.add_argument(
        "--token-ttl",
        type=bridge.positive_number,
        default=900.0,
        help="lifetime of minted bearer tokens in seconds (default 900)",
    )
    rt.set_defaults(run=_runtime)
    _local_commands(rt)

    bridge.add_serve_command(sub)

    dm = sub.add_parser(
        "demo",
        help="walk an agent through every tool against the local reference runtime",
        description="Start the reference runtime on loopback, launch `agentteam-bridge serve` "
        "through a real MCP stdio client, drive all seven tools (a stale update, an idempotent "
        "replay and a deprecated name included), then verify and summarise the journal.",
        epilog=_EPILOG_DEMO,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dm.add_argument(
        "--journal",
        type=Path,
        default=None,
        help="journal file to write (default: journal.db in a fresh temp dir, printed at the end)",
    )
    dm.set_defaults(run=_demo)
    _install_command(sub)
    bridge.add_completion_command(sub, "agentteam-bridge", build_parser)
    dr = sub.add_parser(
        "doctor",
        help="check what `serve` would meet at start, without starting a session",
        description="Check the configuration, the credential, the API through the proxy and TLS, "
        "the journal's location and free space, and the signing key's mode; one line a check. "
        "Nothing is journaled.",
        epilog="Exit status: 0 every check passed, 1 one failed.",
    )
    dr.add_argument("--embedded", action="store_true", help="as `serve --embedded` would start")
    dr.add_argument("--api-url", help="as `serve --api-url` (default AGENTTEAM_API_URL)")
    dr.add_argument("--journal", default=bridge.journal_setting(), metavar="PATH")
    dr.add_argument("--runtime-db", type=Path, default=None, help="the embedded runtime's database")
    dr.set_defaults(run=_doctor)
    return parser


def _doctor(args: argparse.Namespace) -> int:
    import os

    import trio

    checks = trio.run(
        lambda: bridge.doctor(
            os.environ,
            journal_setting=args.journal,
            embedded=args.embedded,
            api_url=args.api_url,
            runtime_db=args.runtime_db,
        )
    )
    for check in checks:
        print(check.line())
    return 0 if all(check.ok for check in checks) else 1


_EPILOG_INSTALL = """\
examples:
  agentteam-bridge install claude-desktop --dry-run    # print the change, write nothing
  agentteam-bridge install cursor                      # the embedded reference runtime
  AGENTTEAM_API_URL=https://... AGENTTEAM_WORKSPACE_ID=ws AGENTTEAM_AGENT_ID=agt \\
  AGENTTEAM_TOKEN_COMMAND='agentteam auth token' agentteam-bridge install codex --from-env
Exit status: 0 registered (or already was), 1 refused (a different server of that name, a file
that cannot be read or written), 2 a bad flag or environment.
"""


def _install_command(sub: Any) -> None:
    from ._install import CLIENTS

    p = sub.add_parser(
        "install",
        help="register this bridge with an MCP client (" + ", ".join(CLIENTS) + ")",
        description="Write or merge the client's MCP server configuration (Claude Code: run "
        "`claude mcp add` when it is on PATH) so that it launches this installation's bridge.",
        epilog=_EPILOG_INSTALL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("client", choices=CLIENTS)
    p.add_argument("--name", default="agentteam-tasks", help="the server's name there")
    p.add_argument(
        "--from-env",
        action="store_true",
        help="a real server, from this shell's AGENTTEAM_* variables (default: --embedded)",
    )
    p.add_argument(
        "--compat",
        choices=("strict", "hint", "forward"),
        default="hint",
        help="the serve --compat policy (default hint)",
    )
    p.add_argument("--config", type=Path, help="this file instead of the client's own")
    p.add_argument("--dry-run", action="store_true", help="print the change; write nothing")
    p.add_argument("--force", action="store_true", help="replace a different server of the name")
    p.set_defaults(run=_install)


def _install(args: argparse.Namespace) -> int:
    import os

    from ._install import InstallError, install

    try:
        print(
            install(
                args.client,
                name=args.name,
                embedded=not args.from_env,
                compat=args.compat,
                dry_run=args.dry_run,
                force=args.force,
                config=args.config,
                environ=dict(os.environ),
            )
        )
    except InstallError as exc:
        print(f"agentteam-bridge install: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    bridge.configure_logging(args)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
