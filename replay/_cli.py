"""Command line of `agentteam-replay`: a thin layer over the functions of `replay`."""

from __future__ import annotations

import argparse
import sys

_COMMANDS = ("verify", "calls", "show", "idempotency", "deprecations", "audit", "rerun", "export")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agentteam-replay",
        description="Verify, debug and audit agentteam-bridge journals offline.",
    )
    parser.add_argument("command", choices=_COMMANDS)
    args = parser.parse_args(argv)
    print(f"agentteam-replay: '{args.command}' is not available in this build yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
