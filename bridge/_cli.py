"""`serve`, the bridge's own command: its flags and what it runs, as the MCP client launches it.

``agentteam-bridge`` (:mod:`agentteam_task_bridge.cli`) mounts this command beside ``runtime``
and ``demo`` with :func:`add_serve_command`; ``python -m agentteam_task_bridge.bridge._cli serve``
runs it alone, with nothing of the runtime or the replay auditor imported.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

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


class CommandParser(argparse.ArgumentParser):
    """The parser of every command of ours, and so of each subcommand (``add_subparsers`` makes
    its children of the parent's class):

    - no abbreviated options: argparse would take ``--statu`` for ``--status``, so an option
      added later could silently change what an existing script means;
    - ``--version`` on the command and on every subcommand (``agentteam-bridge serve --version``);
    - a usage error is one line on stderr and exit 2: an MCP client files a server's stderr in
      its log, and the usage block is what ``--help`` is for.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        program = self.prog.split()[0]
        self.add_argument(
            "--version",
            action="version",
            version=f"{program} {__version__}",
            help="print the installed version and exit",
        )

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


COMPLETION_SHELLS = ("bash", "zsh", "fish")


def add_completion_command(
    sub: Any, program: str, build: Callable[[], argparse.ArgumentParser]
) -> None:
    """``completion SHELL``: print the shell completion script of ``program``, whose parser
    ``build`` makes (shtab writes it from the parser itself, so it names every subcommand and
    option)."""
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script for the shell; install it as your shell reads them.",
        epilog=f"""examples:
  {program} completion bash > ~/.local/share/bash-completion/completions/{program}
  {program} completion zsh > "${{fpath[1]}}/_{program}"
  {program} completion fish > ~/.config/fish/completions/{program}.fish
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=COMPLETION_SHELLS)
    p.set_defaults(completion_of=build, run=print_completion)


def print_completion(args: argparse.Namespace) -> int:
    """Print the script ``completion SHELL`` asked for (see :func:`add_completion_command`)."""
    import shtab

    print(shtab.complete(args.completion_of(), shell=args.shell))
    return 0


def number_type(
    convert: Callable[[str], float], what: str, fits: Callable[[float], bool], range_: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (else "is not ``what``"), then refuse a value
    ``fits`` refuses ("is not ``range_``"), so a bad number stops the start in one line that
    names the value given. Every number option of both commands is one of these."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {range_}")
        return value

    return parse


# A finite number above 0 (seconds, a lifetime): 0, -1, nan and inf are refused at start rather
# than making every call time out; a whole number above 0 (a byte count); a TCP port (0: any).
positive_number = number_type(
    float, "a number", lambda v: v > 0 and math.isfinite(v), "a finite number above 0"
)
positive_integer = number_type(int, "a whole number", lambda v: v > 0, "above 0")
port_number = number_type(int, "a port number", lambda v: 0 <= v <= 65535, "a port (0-65535)")


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


# ``--retain-payloads``, replay's ``--older-than``: a number of days, 0 or more.
retention_days = number_type(
    float, "a number of days", lambda v: 0 <= v < 100_000, "a number of days, 0 or more"
)


def _serve(args: argparse.Namespace) -> int:
    from ._lifecycle import ignore_stop_signals, note_early_signals

    # First, before the SDK's imports: a client may end the session at any time (a signal then
    # ends it cleanly, as one during the session does).
    early_signals = note_early_signals()
    import trio

    from ._context import ConfigError
    from ._exceptions import JournalFailed
    from ._server import ServeConfig, serve

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
        retain_payloads_days=args.retain_payloads,
    )
    try:
        trio.run(serve, config, None, early_signals)
    except (ConfigError, JournalFailed) as exc:
        print(f"agentteam-bridge serve: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, JournalFailed) and exc.stage != "open" else 2
    finally:
        ignore_stop_signals()
        settle_stderr()
        # Nothing the process made is garbage the exit must find: frozen, the exit's collection
        # skips the SDK's models (~1 s on a busy machine when the handshake never froze them).
        gc.freeze()
    return 0


def settle_stderr() -> None:
    """Write out what waits for stderr; when nobody reads it any more (the client closed its
    end), point it at the null device, so that the exit status stays the session's own (the
    interpreter's last flush would fail, and exit 120)."""
    try:
        sys.stderr.flush()
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stderr.fileno())
        os.close(null)


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
        type=positive_number,
        default=10.0,
        help="seconds to wait for the Agent Runtime API (default 10)",
    )
    sv.add_argument(
        "--upstream-keepalive",
        type=positive_number,
        default=4.0,
        metavar="SECONDS",
        help="close an idle connection to the API after this long; keep it below the server's "
        "idle timeout (default 4)",
    )
    sv.add_argument(
        "--journal-max-bytes",
        type=positive_integer,
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
        "--retain-payloads",
        type=retention_days,
        default=None,
        metavar="DAYS",
        help="erase the payloads of journal events older than DAYS, at start and periodically, "
        "journaled as payload_erased; the envelope stays (default: keep them)",
    )
    sv.add_argument(
        "--no-durable",
        action="store_true",
        help="journal without fsync per outcome (benchmarks only)",
    )
    add_logging_options(sv)
    sv.set_defaults(run=_serve)
    return sv


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
LOG_LEVELS |= {"error": logging.ERROR}


def log_level(text: str) -> int:
    """``--log-level`` / ``AGENTTEAM_LOG_LEVEL``: debug, info, warning (the default) or error."""
    try:
        return LOG_LEVELS[text.strip().lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level ({', '.join(LOG_LEVELS)})"
        ) from None


def log_format(text: str) -> str:
    """``--log-format`` / ``AGENTTEAM_LOG_FORMAT``: text (the default) or json."""
    value = text.strip().lower()
    if value not in ("text", "json"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a log format (text, json)")
    return value


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``,
    and ``exception`` when there is one; what log shippers parse without a pattern."""

    def format(self, record: logging.LogRecord) -> str:
        import json
        from datetime import UTC, datetime

        from ._screen import LOG_SCREEN

        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": LOG_SCREEN(record.getMessage()),
        }
        if record.exc_info:
            line["exception"] = LOG_SCREEN(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


class _TextLogFormatter(logging.Formatter):
    """Time, level and logger; a start line reads as a sentence of the command's own
    (``agentteam-bridge serve: session s1a2... journals to PATH``), as README quotes it."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        from ._screen import LOG_SCREEN

        if record.name == "agentteam.bridge.start":
            return f"agentteam-bridge serve: {record.getMessage()}"
        return LOG_SCREEN(super().format(record))


def add_logging_options(parser: argparse.ArgumentParser) -> None:
    """``--log-level``, ``-v`` and ``--log-format``, their defaults from the environment (a bad
    value there is refused at start, as on the command line)."""
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=os.environ.get("AGENTTEAM_LOG_LEVEL", "warning"),
        metavar="LEVEL",
        help="debug, info, warning or error (default $AGENTTEAM_LOG_LEVEL or warning)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="one step more detail than --log-level per -v (info, then debug)",
    )
    parser.add_argument(
        "--log-format",
        type=log_format,
        default=os.environ.get("AGENTTEAM_LOG_FORMAT", "text"),
        metavar="FORMAT",
        help="text or json: one JSON object a line (default $AGENTTEAM_LOG_FORMAT or text)",
    )


def configure_logging(args: argparse.Namespace | None = None) -> None:
    """Logs to stderr at the level and in the format ``args`` chose (:func:`add_logging_options`;
    commands without them: warnings and errors as text, with time, level and logger): stdout
    belongs to MCP in ``serve`` (and to the output of the other commands)."""
    level = getattr(args, "log_level", logging.WARNING)
    level = max(logging.DEBUG, level - 10 * getattr(args, "verbose", 0))
    handler = logging.StreamHandler(sys.stderr)
    if getattr(args, "log_format", "text") == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(_TextLogFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    # The start lines (where the session journals) are info, shown at the default level too.
    start = logging.getLogger("agentteam.bridge.start")
    start.setLevel(logging.INFO if level <= logging.WARNING else level)


def main(argv: list[str] | None = None) -> int:
    """`python -m agentteam_task_bridge.bridge._cli serve ...`: the serve command alone."""
    parser = CommandParser(prog="agentteam-bridge", description="The AgentTeam Task MCP bridge.")
    add_serve_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    configure_logging(args)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
