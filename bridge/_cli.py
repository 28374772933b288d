"""Command line of `agentteam-bridge`: a thin layer that parses flags and calls the Python API."""

from __future__ import annotations

import argparse
import logging
import sys

from ._paths import default_runtime_db

_EPILOG_RUNTIME = """\
examples:
  agentteam-bridge runtime --port 8765 --db ./runtime.db
  eval "$(agentteam-bridge runtime --port 8765 &)"   # exports AGENTTEAM_* for a bridge
"""


def _runtime(args: argparse.Namespace) -> int:
    import trio

    from runtime import RuntimeConfig, serve_forever

    config = RuntimeConfig(
        db_path=str(args.db), host=args.host, port=args.port, token_ttl_seconds=args.token_ttl
    )
    try:
        trio.run(serve_forever, config)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(
            f"agentteam-bridge runtime: cannot listen on {args.host}:{args.port}: "
            f"{exc.strerror or exc}. Choose another --port.",
            file=sys.stderr,
        )
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    rt.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free)")
    rt.add_argument(
        "--db",
        default=default_runtime_db(),
        help=f"SQLite database file (default {default_runtime_db()})",
    )
    rt.add_argument(
        "--token-ttl",
        type=float,
        default=900.0,
        help="lifetime of minted bearer tokens in seconds (default 900)",
    )
    rt.set_defaults(run=_runtime)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
