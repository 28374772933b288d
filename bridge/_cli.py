"""`serve`, the bridge's own command: its flags and what it runs, as the MCP client launches it.

``agentteam-bridge`` (:mod:`agentteam_task_bridge.cli`) mounts this command beside ``runtime``
and ``demo`` with :func:`add_serve_command`; ``python -m agentteam_task_bridge.bridge._cli serve``
runs it alone, with nothing of the runtime or the replay auditor imported.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from pathlib import Path
from typing import Any

from . import __version__
from ._paths import default_journal_dir, journal_setting

# Segment roll-over defaults: a day's heavy use fits a segment, and a week bounds how long a
# prune waits for a quiet journal's segment to close (docs: README "Rotation and retention").
SEGMENT_BYTES_DEFAULT = 64 * 1024 * 1024
SEGMENT_AGE_DEFAULT = 7 * 86400.0
SEGMENT_BYTES_MIN = 256 * 1024  # an empty journal file is 64 KiB
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_EPILOG_SERVE = """\
examples:
  agentteam-bridge serve --embedded                 # local reference runtime, no server needed
  AGENTTEAM_API_URL=https://... AGENTTEAM_WORKSPACE_ID=ws AGENTTEAM_AGENT_ID=agt \\
  AGENTTEAM_TOKEN_COMMAND='agentteam auth token' agentteam-bridge serve
stdout carries only the MCP protocol; logs go to stderr.
"""


def segment_bytes(text: str) -> int | None:
    """``--journal-segment-bytes``: bytes, or with K, M or G (powers of 1024); 0 or off: never."""
    value = text.strip().lower()
    if value in ("0", "off", "never"):
        return None
    number = value.rstrip("kmgib")
    unit = value[len(number) :].removesuffix("b").removesuffix("i")
    if unit not in _SIZE_UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 64M, 1G, 0 = off)")
    size = int(number) * _SIZE_UNITS[unit]
    if size < SEGMENT_BYTES_MIN:
        raise argparse.ArgumentTypeError(f"a segment must be at least 256K, not {text!r}")
    return size


def segment_age(text: str) -> float | None:
    """``--journal-segment-age``: a number with s, m, h or d (days); 0 or off: never."""
    value = text.strip().lower()
    if value in ("0", "off", "never"):
        return None
    try:
        seconds = float(value[:-1]) * _AGE_UNITS[value[-1:]]
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age (e.g. 7d, 12h, 30m, 0 = off)"
        ) from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive age")
    return seconds


def _serve(args: argparse.Namespace) -> int:
    from ._lifecycle import ignore_stop_signals, note_early_signals

    # First, before the SDK's imports: a client may end the session at any time (a signal then
    # ends it cleanly, as one during the session does).
    early_signals = note_early_signals()
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
        journal_segment_bytes=args.journal_segment_bytes,
        journal_segment_age=args.journal_segment_age,
        upstream_timeout_seconds=args.upstream_timeout,
        upstream_keepalive_seconds=args.upstream_keepalive,
    )
    try:
        trio.run(serve, config, None, early_signals)
    except (ConfigError, JournalOpenError) as exc:
        print(f"agentteam-bridge serve: {exc}", file=sys.stderr)
        return 2
    except SessionJournalLost as exc:
        print(f"agentteam-bridge serve: {exc}", file=sys.stderr)
        return 1
    finally:
        ignore_stop_signals()
        # Nothing the process made is garbage the exit must find: frozen, the exit's collection
        # skips the SDK's models (~1 s on a busy machine when the handshake never froze them).
        gc.freeze()
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
        help="cap on each journal file's size; beyond it mutations are refused (default: no cap)",
    )
    sv.add_argument(
        "--journal-segment-bytes",
        type=segment_bytes,
        default=SEGMENT_BYTES_DEFAULT,
        metavar="SIZE",
        help="roll the journal over into a new segment file once its live one is this large "
        "(e.g. 64M, 1G; 0 = never; default 64M)",
    )
    sv.add_argument(
        "--journal-segment-age",
        type=segment_age,
        default=SEGMENT_AGE_DEFAULT,
        metavar="AGE",
        help="roll the journal over once its live segment is this old (e.g. 7d, 12h; 0 = never; "
        "default 7d)",
    )
    sv.add_argument(
        "--no-durable",
        action="store_true",
        help="journal without fsync per outcome (benchmarks only)",
    )
    sv.set_defaults(run=_serve)
    return sv


def configure_logging() -> None:
    """Warnings and errors to stderr, with time, level and logger: stdout belongs to MCP in
    ``serve`` (and to the output of the other commands of ``agentteam-bridge``)."""
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m agentteam_task_bridge.bridge._cli serve ...`: the serve command alone."""
    parser = argparse.ArgumentParser(
        prog="agentteam-bridge", description="The AgentTeam Task MCP bridge."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_serve_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    configure_logging()
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
