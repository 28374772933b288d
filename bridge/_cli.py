"""`serve`, the bridge's own command: its flags and what it runs, as the MCP client launches it.

``agentteam-bridge`` (:mod:`agentteam_cli`) mounts this command beside ``runtime`` and ``demo``
with :func:`add_serve_command`; ``python -m bridge._cli serve`` runs it alone, with nothing of the
runtime or the replay auditor imported.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from . import __version__
from ._paths import default_journal_dir, journal_setting

_EPILOG_SERVE = """\
examples:
  agentteam-bridge serve --embedded                 # local reference runtime, no server needed
  AGENTTEAM_API_URL=https://... AGENTTEAM_WORKSPACE_ID=ws AGENTTEAM_AGENT_ID=agt \\
  AGENTTEAM_TOKEN_COMMAND='agentteam auth token' agentteam-bridge serve
stdout carries only the MCP protocol; logs go to stderr.
"""


def _serve(args: argparse.Namespace) -> int:
    import journal

    journal.warm_up_redaction()  # the secret rule set's import overlaps the rest of start-up
    import trio

    from ._context import ConfigError
    from ._journaling import JournalOpenError
    from ._server import ServeConfig, SessionJournalLost, serve

    config = ServeConfig(
        journal_path=args.journal,
        compat=args.compat,
        api_url=args.api_url,
        embedded=args.embedded,
        runtime_db=args.runtime_db,
        durable=not args.no_durable,
        journal_max_bytes=args.journal_max_bytes,
        upstream_timeout_seconds=args.upstream_timeout,
        upstream_keepalive_seconds=args.upstream_keepalive,
    )
    try:
        trio.run(serve, config)
    except KeyboardInterrupt:
        return 0
    except (ConfigError, JournalOpenError) as exc:
        print(f"agentteam-bridge serve: {exc}", file=sys.stderr)
        return 2
    except SessionJournalLost as exc:
        print(f"agentteam-bridge serve: {exc}", file=sys.stderr)
        return 1
    return 0


def add_serve_command(sub: Any) -> argparse.ArgumentParser:
    """Add `serve` to an ``add_subparsers()`` group; ``args.run(args)`` then runs it."""
    sv: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the stdio MCP server (what an MCP client launches)",
        description="Run the stdio MCP server exposing the seven Task tools. Context comes from "
        "AGENTTEAM_API_URL, AGENTTEAM_WORKSPACE_ID, AGENTTEAM_AGENT_ID and one of "
        "AGENTTEAM_TOKEN_COMMAND, AGENTTEAM_TOKEN_FILE, AGENTTEAM_TOKEN.",
        epilog=_EPILOG_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sv.add_argument(
        "--journal",
        default=journal_setting(),
        metavar="PATH",
        help="a directory (a pool: each session takes a free journal-<n>.db in it) or one "
        f"journal file (default $AGENTTEAM_JOURNAL or {default_journal_dir()}{os.sep})",
    )
    where = sv.add_mutually_exclusive_group()
    where.add_argument("--api-url", help="Agent Runtime API base URL (overrides AGENTTEAM_API_URL)")
    where.add_argument(
        "--embedded", action="store_true", help="start the reference runtime in-process on loopback"
    )
    sv.add_argument(
        "--runtime-db",
        type=Path,
        default=None,
        help="database of the embedded runtime (default: beside the journal)",
    )
    sv.add_argument(
        "--compat",
        choices=("strict", "hint", "forward"),
        default="hint",
        help="policy for deprecated tool names and argument spellings (default hint)",
    )
    sv.add_argument(
        "--upstream-timeout",
        type=float,
        default=10.0,
        help="seconds to wait for the Agent Runtime API (default 10)",
    )
    sv.add_argument(
        "--upstream-keepalive",
        type=float,
        default=4.0,
        metavar="SECONDS",
        help="close an idle connection to the API after this long; keep it below the server's "
        "idle timeout (default 4)",
    )
    sv.add_argument(
        "--journal-max-bytes",
        type=int,
        default=None,
        help="cap on the journal's size; beyond it mutations are refused (default: no cap)",
    )
    sv.add_argument(
        "--no-durable",
        action="store_true",
        help="journal without fsync per outcome (benchmarks only)",
    )
    sv.set_defaults(run=_serve)
    return sv


def main(argv: list[str] | None = None) -> int:
    """`python -m bridge._cli serve ...`: the serve command alone."""
    parser = argparse.ArgumentParser(
        prog="agentteam-bridge", description="The AgentTeam Task MCP bridge."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_serve_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
