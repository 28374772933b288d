"""The witness's part of the command line: ``witness``, and ``--witness-key`` on verify and prune.

``agentteam-replay witness --from postgresql://WITNESS_LOGIN@... --key FILE [--name NAME]
[--approve-key JOURNAL_ID=VKEY ...] [--all] [--follow [--interval S]] [--json]`` cosigns
(:mod:`replay._fleet_cosign`) the journals with a checkpoint added since its last run (``--all``:
every journal); the key file is created on first use (0600) and its verifier key
said on stderr. Exit 0, or 1 when a journal was refused (its history contradicts what this
witness cosigned, its checkpoint does not verify, or it is signed by a key the journal rotated to
that the operator has not approved), 2 on bad usage or an unusable store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from rich.console import Console

from ._cosign import CosignerKey
from ._terminal import shown

__all__ = ["add_witness", "run", "witness_key", "witness_keys"]

EPILOG: Final = """\
examples:
  agentteam-replay witness --from postgresql://witness@db/fleet --key /etc/agentteam/witness.key
  agentteam-replay witness --from postgresql://witness@db/fleet --key witness.key --follow
  agentteam-replay witness --from postgresql://witness@db/fleet --key witness.key \\
      --approve-key j1=h.example/b+b69637c7+AV5CMDMET1ahOmhnmUh7y/pj3R45IEzsJ905om2qYVYo
  agentteam-replay verify journal.db --witness postgresql://audit@db/fleet --witness-key VKEY

The witness login is a member of agentteam_witness (docs/fleet.md); its key file never leaves
this machine. Give its verifier key (the key file's second line) to verify and prune.
A journal that rotated its signing key is not cosigned under the new key until its operator
approves it with --approve-key (nothing signs a rotation: check the key with its owner first).
"""


def witness_key(text: str) -> CosignerKey | Path:
    """argparse type of ``--witness-key``: a witness verifier key (checked now), or the path of
    a file holding one (read by :func:`witness_keys`)."""
    if "+" not in text:
        return Path(text)
    try:
        return CosignerKey.find(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a witness key ({exc})") from None


def witness_keys(given: list[CosignerKey | Path] | None) -> list[CosignerKey] | None:
    """The keys of ``--witness-key``, files read (ReplayInputError when one holds none)."""
    from ._source import ReplayInputError

    if given is None:
        return None
    keys = []
    for item in given:
        if isinstance(item, CosignerKey):
            keys.append(item)
            continue
        try:
            keys.append(CosignerKey.find(item.read_text()))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ReplayInputError(f"cannot read the witness key {item}: {reason}") from None
    return keys


def approval(text: str) -> tuple[str, str]:
    """argparse type of ``--approve-key JOURNAL_ID=VKEY``: the journal id and its verifier key
    (checked now)."""
    from agentteam_task_bridge import journal

    journal_id, sep, vkey = text.partition("=")
    if not sep or not journal_id:
        raise argparse.ArgumentTypeError("expected JOURNAL_ID=VKEY")
    try:
        parsed = journal.VerifierKey.parse(vkey)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a journal verifier key ({exc})") from None
    return journal_id, parsed.to_text()


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError("between 0.05 and 3600 seconds")
    return value


def add_witness(sub: Any) -> None:
    from ._fleet_cli import store_url

    p = sub.add_parser(
        "witness",
        help="cosign the fleet store's checkpoints with this witness's own key",
        description="For each journal in the fleet store, check its newest accepted checkpoint "
        "(signature, tree hash, consistency with what this witness cosigned before) and cosign "
        "it (c2sp.org/tlog-cosignature, Ed25519) into agentteam.cosignatures.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--from",
        dest="store",
        required=True,
        type=store_url,
        metavar="URL",
        help="the store, as a login in agentteam_witness",
    )
    p.add_argument(
        "--key",
        required=True,
        type=Path,
        metavar="FILE",
        help="the witness key (created if absent)",
    )
    p.add_argument("--name", metavar="NAME", help="the witness's name, for a key created here")
    p.add_argument(
        "--approve-key",
        dest="approved",
        action="append",
        default=[],
        type=approval,
        metavar="JOURNAL_ID=VKEY",
        help="cosign this journal under a key it rotated to (repeatable; nothing signs a"
        " rotation, so check the key with the journal's owner first)",
    )
    p.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="check every journal, not only those with a checkpoint added since this witness's"
        " last run (its cost grows with the store)",
    )
    p.add_argument("--follow", action="store_true", help="keep cosigning until SIGTERM")
    p.add_argument(
        "--interval", type=_interval, default=5.0, metavar="SECONDS", help="with --follow (5)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    for name, what in (
        ("verify", "with --witness: trust the store's cosignatures under this witness key"),
        ("prune", "the witness whose cosignature must cover each segment (required)"),
    ):
        sub.choices[name].add_argument(
            "--witness-key",
            dest="witness_key",
            action="append",
            type=witness_key,
            metavar="VKEY",
            required=name == "prune",
            help=f"{what}; repeatable (a verifier key, or a file holding one)",
        )


def run(args: argparse.Namespace, out: Console) -> int:
    from . import _render as render
    from ._cosign import load_witness_key
    from ._fleet_cosign import REFUSED, cosign_once, witness_follow
    from ._fleet_store import store_errors
    from ._source import ReplayInputError

    try:
        key = load_witness_key(args.key, name=args.name)
    except (OSError, ValueError) as exc:
        raise ReplayInputError(f"cannot use the witness key {args.key}: {exc}") from None
    approved: dict[str, set[str]] = {}
    for journal_id, vkey in args.approved:
        approved.setdefault(journal_id, set()).add(vkey)
    with store_errors(args.store):
        if args.follow:
            report = witness_follow(
                args.store, key, interval=args.interval, approved=approved, every=args.every
            )
        else:
            report = cosign_once(args.store, key, approved=approved, every=args.every)
    if args.json:
        print(render.to_json(report), file=out.file)
    else:
        for item in report.journals:
            size = "" if item.tree_size is None else f" size {item.tree_size}"
            was = "" if item.previous_size is None else f" (after {item.previous_size})"
            detail = f": {item.detail}" if item.detail else ""
            out.print(f"{item.journal_id}: {item.outcome}{size}{was}{detail}", highlight=False)
        if not report.journals:
            out.print("no new checkpoint since this witness's last run", highlight=False)
    for item in report.journals:
        if item.outcome in REFUSED:
            refused = shown(item.journal_id, one_line=True)
            print(f"agentteam-replay witness: refused {refused}", file=sys.stderr)
    return 0 if report.ok else 1
