"""The ``prove`` and ``check-proof`` subcommands of `agentteam-replay`: options, run, render.

The proofs themselves are :mod:`replay._prove`'s; here they are parsed, made and printed (JSON
with ``--json``, else a few lines a person reads).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Final

import msgspec
from rich.console import Console
from rich.text import Text

from agentteam_task_bridge import journal

from . import _prove
from ._source import ReplayInputError
from ._terminal import json_shown

__all__ = ["COMMANDS", "add_prove", "run"]

COMMANDS: Final = ("prove", "check-proof")
EXIT_OK, EXIT_FAILED = 0, 1

_PROVE_EPILOG: Final = """\
examples:
  agentteam-replay prove journal.db --seq 42 --output event-42.proof.json
  agentteam-replay prove journal.db --call s1a2405dba5b1.3 --checkpoint held.json --json
  agentteam-replay prove journal.db --consistency 1000 2000 --output grew.proof.json

The proof shows the event's leaf (its envelope and the salted SHA-256 of its payload, never the
payload) under the journal's latest signed checkpoint covering it, or under --checkpoint. A third
party checks it with the public key alone: agentteam-replay check-proof FILE --trusted-key KEY,
or any RFC 6962 implementation (e.g. Go's golang.org/x/mod/sumdb/tlog and sumdb/note).
"""

_CHECK_EPILOG: Final = """\
examples:
  agentteam-replay check-proof event-42.proof.json --trusted-key "$(cat laptop.vkey)"
  agentteam-replay check-proof grew.proof.json --trusted-key laptop.vkey --json

Needs no journal: checks the checkpoint's signature under the key, that its origin, size and
root are the proof's, and the proof (RFC 9162 2.1.3.2, 2.1.4.2). Exits 1 when anything fails.
"""


def add_prove(sub: Any) -> None:
    p = sub.add_parser(
        "prove",
        help="an RFC 6962 inclusion or consistency proof, for a third party",
        description="Prove that an event (--seq), every event of a call (--call) or an earlier "
        "size of the journal (--consistency) is in the Merkle tree a signed checkpoint commits "
        "to. Reads one journal (any of its segment files).",
        epilog=_PROVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "journal", type=Path, nargs="?", metavar="JOURNAL", help="the journal file (or --from)"
    )
    p.add_argument(
        "--from",
        dest="store",
        metavar="URL",
        help="prove from the fleet store (postgresql://...), its copy of --journal ID",
    )
    p.add_argument("--journal", dest="journal_id", metavar="ID", help="the journal id (--from)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--seq", type=int, metavar="N", help="the event with this seq")
    what.add_argument("--call", metavar="CALL_ID", help="every event of this call")
    what.add_argument(
        "--consistency",
        nargs=2,
        type=int,
        metavar=("OLD", "NEW"),
        help="the tree of OLD events is a prefix of the tree of NEW",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        metavar="FILE",
        help="prove under this held checkpoint (default: the journal's latest covering it)",
    )
    p.add_argument("--json", action="store_true", help="print the proof as JSON")
    p.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="FILE",
        help="write the JSON proof to FILE (owner-only) instead of printing it",
    )
    p = sub.add_parser(
        "check-proof",
        help="check a proof with the public key alone (no journal)",
        description="Check a `prove --json` file: the signed checkpoint under the trusted key, "
        "its origin, size and root, and the inclusion or consistency proof.",
        epilog=_CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("proof", type=Path, metavar="FILE", help="the proof (prove --json)")
    p.add_argument(
        "--trusted-key",
        required=True,
        action="append",
        metavar="VKEY_OR_FILE",
        help="a public key the checkpoints may be signed with (repeatable, e.g. across a key "
        "rotation): name+hash+key, or a file",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def _to_json(value: msgspec.Struct) -> str:
    fields = msgspec.to_builtins(value)
    if isinstance(value, _prove.ProofCheck):
        fields = {"ok": value.ok, **fields}
    return msgspec.json.encode(fields).decode()


def _opened(args: argparse.Namespace) -> AbstractContextManager[_prove._Journal]:
    """The log to prove from: the journal's files, or the fleet store's copy (--from)."""
    if args.store is None:
        if args.journal is None or args.journal_id is not None:
            raise ReplayInputError("give a JOURNAL file, or --from URL --journal ID")
        return _prove._open(args.journal)
    if args.journal is not None or args.journal_id is None:
        raise ReplayInputError("--from URL takes --journal ID, not a JOURNAL file")
    from ._fleet_prove import open_store_log

    return open_store_log(args.store, args.journal_id)


def run(args: argparse.Namespace, out: Console) -> int:
    if args.command == "check-proof":
        from ._verify import load_trusted_key

        keys = [load_trusted_key(value) for value in args.trusted_key]
        verifiers = [k for k in keys if isinstance(k, journal.VerifierKey)]
        if len(verifiers) != len(keys):
            raise ReplayInputError("--trusted-key must be an Ed25519 public key")
        checked = _prove.check_proof(args.proof, verifiers)
        if args.json:
            print(json_shown(_to_json(checked)), file=out.file)
        else:
            _render_check(out, checked)
        return EXIT_OK if checked.ok else EXIT_FAILED
    proof: msgspec.Struct
    try:
        if args.checkpoint is not None and args.consistency is not None:
            raise ReplayInputError("--checkpoint applies to --seq and --call")
        with _opened(args) as log:
            if args.seq is not None:
                proof = _prove.log_seq(log, args.seq, args.checkpoint)
            elif args.call is not None:
                proof = _prove.log_call(log, args.call, args.checkpoint)
            else:
                proof = _prove.log_consistency(log, *args.consistency)
    except _prove.ProofMismatch as exc:
        print(f"agentteam-replay: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.output is not None:
        _write_private(args.output, _to_json(proof) + "\n")
        out.print(f"wrote {args.output}")
    elif args.json:
        print(json_shown(_to_json(proof)), file=out.file)
    else:
        _render_proof(out, proof)
    return EXIT_OK


def _write_private(path: Path, text: str) -> None:
    """Write a proof file 0600, whatever the umask (it names the journal's calls)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(text)
    except OSError as exc:
        raise ReplayInputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _render_proof(out: Console, proof: msgspec.Struct) -> None:
    if isinstance(proof, _prove.ConsistencyProof):
        out.print(f"{proof.origin}: size {proof.old_size} is a prefix of {proof.new_size}")
        out.print(f"  old root {proof.old_root}")
        out.print(f"  new root {proof.new_root}")
        out.print(f"  consistency proof: {len(proof.consistency_proof)} hashes")
        signed = [n for n in (proof.old_checkpoint, proof.new_checkpoint) if n is not None]
        out.print(f"  signed checkpoints at these sizes: {len(signed)}")
        if proof.new_checkpoint is None:
            out.print(
                f"  size {proof.new_size} has no signed checkpoint: check-proof refuses this"
                " proof (prove up to a checkpointed size)"
            )
        return
    assert isinstance(proof, _prove.InclusionProof | _prove.CallProof)
    events = (
        [
            _prove.EventProof(
                leaf_index=proof.leaf_index, leaf=proof.leaf, inclusion_proof=proof.inclusion_proof
            )
        ]
        if isinstance(proof, _prove.InclusionProof)
        else proof.events
    )
    out.print(f"{proof.origin}: tree size {proof.tree_size}, root {proof.root_hash}")
    for event in events:
        leaf = msgspec.json.decode(base64.b64decode(event.leaf))
        out.print(
            f"  seq {leaf['seq']} {leaf['kind']} call {leaf['call_id'] or '-'} at "
            f"{leaf['ts_wall']}: {len(event.inclusion_proof)} proof hashes"
        )
    out.print("signed checkpoint:")
    out.print(Text(proof.checkpoint.rstrip("\n")), soft_wrap=True)
    out.print("(--json for the proof a third party checks with `agentteam-replay check-proof`)")


def _render_check(out: Console, checked: _prove.ProofCheck) -> None:
    verdict = "OK" if checked.ok else "FAILED"
    what = {
        "inclusion": "inclusion of 1 event",
        "call": f"inclusion of {checked.checked} events",
        "consistency": "consistency",
    }[checked.kind]
    out.print(
        f"{verdict}: {what} in {checked.origin} at size {checked.tree_size}, "
        f"signed by {checked.key}"
    )
    for leaf in checked.leaves:
        if leaf:
            out.print(
                f"  seq {leaf.get('seq')} {leaf.get('kind')} call {leaf.get('call_id') or '-'}"
                f" at {leaf.get('ts_wall')}"
            )
    for problem in checked.problems:
        out.print(f"  {problem}")
