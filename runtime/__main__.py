"""`python -m agentteam_task_bridge.runtime mint-token ...`: the token command a bridge runs for a
fresh bearer token."""

from __future__ import annotations

import argparse
import sys

from ._store import Store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentteam_task_bridge.runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    mint = sub.add_parser("mint-token", help="print a fresh bearer token for an agent")
    mint.add_argument("--db", required=True, help="the runtime's database file")
    mint.add_argument("--workspace", required=True)
    mint.add_argument("--agent", required=True)
    mint.add_argument("--ttl", type=float, default=None, help="lifetime in seconds")
    args = parser.parse_args(argv)
    store = Store.open(args.db)
    try:
        token, _ = store.mint_token(args.workspace, args.agent, args.ttl)
    except Exception as exc:  # one clear line for the bridge's stderr, no traceback
        print(f"mint-token: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    print(token)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
