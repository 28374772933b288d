"""The argument parser of `agentteam-replay`: its subcommands, options, help and examples.

Each subcommand's options mirror the keyword arguments of its function in ``replay``; the
running and rendering are :mod:`replay._cli`'s. The fleet store's options (``ship``, ``--from``,
``--witness``) are added by :mod:`replay._fleet_cli`.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from agentteam_task_bridge import bridge

from . import _fleet_cli, _prove_cli, _witness_cli

if TYPE_CHECKING:
    from ._calls import CallFilter

__all__ = ["PROG", "build_parser", "call_filter", "parse_time"]

PROG: Final = "agentteam-replay"

_MAIN_EPILOG = """\
Every command reads one or many journal files or directories of journals (merged by journal id
and sequence); with none, where the bridge writes by default ($AGENTTEAM_JOURNAL, else the pool
~/.local/share/agentteam-bridge/journals/ and an earlier version's journal.db), so every session
is seen. Tables (colour on a terminal), or JSON with --json.

exit status: 0 ok; 1 the check failed (findings, violations, differences, gates not met);
2 an input could not be used (no such file, not a journal, bad flag); 3 verify: the journal is
sound but holds in-doubt calls to reconcile.
"""

_EPILOGS: Final = {
    "verify": """\
examples:
  agentteam-replay verify                         # every session in the default location
  agentteam-replay verify copy.db --trusted-key "$(cat laptop.vkey)" --checkpoint held.json
  agentteam-replay verify old.db --key ~/.config/agentteam-bridge/journal.key   # HMAC era
  agentteam-replay verify fleet/*.db --trusted-key keys/a.vkey --trusted-key keys/b.vkey --json

Signatures count only under a trusted key: --trusted-key / --key, else this machine's own keys
($XDG_CONFIG_HOME/agentteam-bridge/journal-signing.key, and journal.key for HMAC-era
checkpoints). A checkpoint no trusted key signed fails the check (checkpoint_unverified) unless
--accept-unverified. The keys a journal names are trusted only with --trust-journal-key.
In every mode a history no checkpoint covers fails (unsigned_history: a writer signs its
first commit), so do more than 1000 unsigned events after the last one (unsigned_tail), a
segments_pruned or journal_gap no checkpoint covers (excuse_unsigned) and two histories
under one journal id (fork). With no key given, this machine's key file is trusted, said on
stderr, and a rotation to it from a key it does not hold fails (key_file_replaced).
The checkpoint exported beside a journal (<journal>.checkpoint.json) is used when no
--checkpoint is given; it lives on the same machine, so only a copy held elsewhere can show
that the journal was cut back below it.
""",
    "prune": """\
examples:
  agentteam-replay prune --shipped-to postgresql://ship@db/fleet --older-than 30 --witness-key w.vk
  agentteam-replay prune pool/ --shipped-to postgresql://ship@db/f --older-than 9 --dry-run \\
      --witness-key w.vk

Removes only whole, closed segments (never a journal's live one) whose every event the store
holds (same hash, same Merkle leaf) and whose end a cosignature by the witness named with
--witness-key covers (agentteam-replay witness), oldest first, each older than DAYS, and only
while verify --witness with that key finds nothing for the journal; the prune is journaled
first as a segments_pruned event in the live segment, so verify still passes and accepts the
journal's new start. Nothing else ever deletes journal data. A journal a live session holds is
skipped (prune it once the session ends). Ship, and let the witness cosign, first.
""",
    "erase": """\
examples:
  agentteam-replay erase journal.db --call s1.4 --reason "data subject request 2026-112"
  agentteam-replay erase journals/ --matching "Ada Lovelace" --reason "GDPR art. 17" --dry-run
  agentteam-replay erase journal.db --task "eng#42" --reason "ticket 991" --json
  agentteam-replay erase --older-than 90 --reason retention    # the pool
  agentteam-replay erase --from postgresql://owner@db/fleet --journal J1 --call s1.4 --reason r

Removes the payload text (and the leaf's salt) of the chosen events from every file of the
journal (each segment, the -wal, free pages); their envelope (who, when, which tool, outcome,
latency), hashes and Merkle leaves stay, so verify passes and every prove still checks. The
erasure is journaled first: a payload_erased event naming the seqs, the reason and who ran it
(never the erased text), under a checkpoint signed with this machine's key (--key-file: another;
it must be the key the journal names). Works on a journal a live bridge writes. Erasing again
is a no-op; --dry-run lists the seqs and changes no byte. See docs/privacy.md.
With --from, the store's own copy is erased (by its owner; recorded in the store, not signed),
then its files are rewritten as store-maintain does (docs/fleet.md); the journal is untouched.
""",
    "key": """\
examples:
  agentteam-replay key                   # print the public key to give auditors
  agentteam-replay key --create --json   # create the key now if the bridge has not yet

The private key stays in $XDG_CONFIG_HOME/agentteam-bridge/journal-signing.key (0600). The
public key is a C2SP signed-note verifier key: agentteam-replay verify --trusted-key takes it,
and so does any signed-note reader.
""",
    "calls": """\
examples:
  agentteam-replay calls journal.db --status error
  agentteam-replay calls journal.db --tool task_create --since 2h
  agentteam-replay calls fleet/*.db --agent agt_local --since 2026-12-01 --until 2026-12-02
  agentteam-replay calls journal.db --status in_doubt --json
""",
    "show": """\
examples:
  agentteam-replay show journal.db s1a2405dba5b1.3
  agentteam-replay show journal.db s1a2405dba5b1.3 --json | jq .outcome
""",
    "idempotency": """\
examples:
  agentteam-replay idempotency journal.db
  agentteam-replay idempotency fleet/*.db --json | jq '.findings'
""",
    "deprecations": """\
examples:
  agentteam-replay deprecations journal.db
  agentteam-replay deprecations fleet/*.db --gate-days 60 --name list_tasks
  agentteam-replay deprecations journal.db --as-of 2027-01-31 --json

Exits 1 unless the removal gate is met for every name reported.
""",
    "audit": """\
examples:
  agentteam-replay audit journal.db
  agentteam-replay audit fleet/*.db --csv audit/ --json > audit.json
""",
    "rerun": """\
examples:
  agentteam-replay rerun journal.db                       # against the recorded answers
  agentteam-replay rerun journal.db --call s1a2405dba5b1.3 --all
  agentteam-bridge runtime --port 8765 > runtime.env &
  until grep -q TOKEN runtime.env; do sleep 0.2; done; . ./runtime.env
  agentteam-replay rerun journal.db --against http://127.0.0.1:8765 --allow-mutations

With --against, the credential comes from AGENTTEAM_TOKEN_COMMAND, AGENTTEAM_TOKEN_FILE or
AGENTTEAM_TOKEN; ids, timestamps and cursors are normalized before comparing.
""",
    "report": """\
examples:
  agentteam-replay report journal.db --html report.html
  agentteam-replay report fleet/*.db --html day.html --since 2026-12-01 --until 2026-12-02
  agentteam-replay report journals/ --html s.html --session s1a2405dba5b1 --stories 200
  agentteam-replay report --from postgresql://auditor@db.example/fleet --html fleet.html --since 1d

One HTML file that loads nothing (inline SVG charts, each beside its table), written 0600:
the verification verdict first, then calls over time per tool and per outcome, latency,
error codes, sessions, deprecated usage, idempotency, truncation, mutations per board, and
the stories of the calls it names. The filters select the calls; the verdict is the whole
journals'. Exits 1 when verify or idempotency finds a broken rule, 3 when calls are in doubt.
With --from, the figures are computed in the fleet store and the verdict is the store's.
""",
    "export": """\
examples:
  agentteam-replay export journal.db --output spans.json            # OTLP JSON
  agentteam-replay export fleet/*.db --format jsonl --output events.jsonl
  agentteam-replay export journal.db --otlp-endpoint http://127.0.0.1:4318
  agentteam-replay export journal.db | curl -H 'content-type: application/json' \\
      --data-binary @- http://localhost:4318/v1/traces
""",
}

_RELATIVE: Final = re.compile(r"^(?P<n>\d+(\.\d+)?)(?P<unit>[smhdw])$")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_STORIES: Final = "between 0 and 100000"


def parse_time(text: str) -> datetime:
    """ISO 8601 (a date, or date and time, UTC unless an offset is given) or a relative
    age such as ``30m``, ``2h``, ``7d`` (that long before now)."""
    found = _RELATIVE.match(text.strip())
    if found:
        amount = float(found["n"])
        return datetime.now(UTC) - timedelta(**{_UNITS[found["unit"]]: amount})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: use 2026-12-02, 2026-12-02T16:00, or 30m / 2h / 7d"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def call_filter(args: argparse.Namespace) -> CallFilter:
    """The filter ``calls`` was given (over journal files or a fleet store alike)."""
    from ._calls import CallFilter

    return CallFilter(
        session=args.session,
        tool=args.tool,
        agent=args.agent,
        status=args.status,
        error_code=args.error_code,
        since=args.since,
        until=args.until,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = bridge.CommandParser(
        prog=PROG,
        description="Verify, debug and audit agentteam-bridge journals offline.",
        epilog=_MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_text,
            description=description,
            epilog=_EPILOGS[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "journals",
            nargs="*",
            metavar="JOURNAL",
            type=Path,
            help="journal files or directories of journals (default: where the bridge writes, "
            "$AGENTTEAM_JOURNAL or ~/.local/share/agentteam-bridge/journals/)",
        )
        p.add_argument("--json", action="store_true", help="print JSON instead of tables")
        return p

    p = command(
        "verify",
        "check integrity, call grammar and invariants",
        "Verify the hash chain, the sequence, signed checkpoints and truncation; the event "
        "grammar of every call; that no model argument carried hidden context, that injected "
        "context is the session's, at most one refresh-and-replay per call, and no secret in "
        "any event. Lists in-doubt calls (a mutation sent with no known outcome).",
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a checkpoint held outside the journal (repeatable; matched by journal id)",
    )
    p.add_argument(
        "--trusted-key",
        action="append",
        default=[],
        metavar="VKEY_OR_FILE",
        help="a public key whose signatures count (repeatable): name+hash+key, or a file",
    )
    p.add_argument(
        "--key",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a key file to trust (repeatable): signing key, public key, or HMAC-era journal.key",
    )
    p.add_argument(
        "--trust-journal-key",
        action="store_true",
        help="also trust the keys the journal itself names (only for a file you trust)",
    )
    p.add_argument(
        "--accept-unverified",
        action="store_true",
        help="pass checkpoints no trusted key signed (counted as unchecked)",
    )
    p.add_argument(
        "--no-auto-checkpoint",
        action="store_true",
        help="do not use <journal>.checkpoint.json when no --checkpoint is given",
    )

    p = command("calls", "list calls", "List the calls of the journals, filtered, in order.")
    p.add_argument("--session", help="only this session id")
    p.add_argument("--tool", help="only this tool (canonical or the name the model used)")
    p.add_argument("--agent", help="only this agent id")
    p.add_argument(
        "--status",
        choices=("result", "error", "rejected", "cancelled", "in_doubt", "incomplete"),
        help="only calls that ended so",
    )
    p.add_argument("--error-code", help="only calls that failed with this code")
    p.add_argument("--since", type=parse_time, help="calls started at or after (ISO or 2h)")
    p.add_argument("--until", type=parse_time, help="calls started at or before (ISO or 2h)")
    p.add_argument(
        "--limit", type=bridge.positive_integer, help="at most this many calls (the first ones)"
    )

    p = command(
        "show",
        "one call's whole story",
        "What the model sent, what the bridge injected and from where, what went upstream, what "
        "came back, what the model saw, with timings.",
    )
    p.add_argument("call_id", metavar="CALL_ID", help="the call id (see `calls`)")

    command(
        "idempotency",
        "check idempotency keys, claims and hints",
        "Group every keyed task_create by workspace, agent, run, callback, tool and key and check "
        "that a replay returned the same tasks with reused: true and allocated nothing, that "
        "another payload conflicted and that no key was honoured outside a callback; that "
        "task_set_claim repeats changed nothing; that idempotentHint holds for observed repeats.",
    )

    p = command(
        "deprecations",
        "deprecated usage and removal gates",
        "Deprecated tool names, argument spellings and upstream routes by name, replacement, "
        "client and agent, with first and last use, counts, and each name's removal gate "
        "(no use for N consecutive days).",
    )
    p.add_argument(
        "--gate-days", type=bridge.positive_integer, default=30, metavar="N", help="default 30"
    )
    p.add_argument("--as-of", type=parse_time, help="judge the gate at this time (default now)")
    p.add_argument(
        "--name", action="append", default=[], help="only this name, reported even if unused"
    )

    p = command(
        "audit",
        "usage, errors, latency, truncation, sessions",
        "Tool usage by tool, agent and outcome; error codes; bridge and upstream latency "
        "percentiles; truncation rate; mutations per board; one row per session.",
    )
    p.add_argument("--csv", type=Path, metavar="DIR", help="also write one CSV per section")

    p = command(
        "rerun",
        "re-drive recorded calls through today's bridge",
        "Send every recorded call (or those selected) through today's bridge code, with the "
        "upstream answered from the journal's recorded responses, and report where today's "
        "story, requests or outcome differ from the recorded ones.",
    )
    p.add_argument("--call", action="append", default=[], metavar="CALL_ID", help="repeatable")
    p.add_argument("--tool", help="only calls of this tool")
    p.add_argument("--session", help="only calls of this session")
    p.add_argument("--against", metavar="URL", help="send to this live Agent Runtime instead")
    p.add_argument(
        "--allow-mutations",
        action="store_true",
        help="with --against, also send mutations (they change the live runtime)",
    )
    p.add_argument("--all", action="store_true", help="list identical calls too")

    p = command(
        "report",
        "one self-contained HTML page of the audit",
        "Verify the journals and write one HTML page an auditor can open offline: the verdict, "
        "calls over time, latency, errors, sessions, deprecated names, idempotency, truncation, "
        "mutations per board, and call stories.",
    )
    p.add_argument("--html", required=True, type=Path, metavar="FILE", help="the page to write")
    p.add_argument("--journal", metavar="JOURNAL_ID", help="only this journal (an id or its start)")
    p.add_argument("--session", help="only calls of this session")
    p.add_argument("--since", type=parse_time, help="calls started at or after (ISO or 2h)")
    p.add_argument("--until", type=parse_time, help="calls started at or before (ISO or 2h)")
    p.add_argument(
        "--stories",
        type=bridge.number_type(int, "a whole number", lambda v: 0 <= v <= 100_000, _STORIES),
        default=50,
        metavar="N",
        help="keep the first N calls' stories",
    )
    p.add_argument(
        "--trusted-key",
        action="append",
        default=[],
        metavar="VKEY_OR_FILE",
        help="a public key whose signatures count (repeatable), as for verify",
    )
    p.add_argument(
        "--accept-unverified",
        action="store_true",
        help="pass checkpoints no trusted key signed (counted as unchecked), as for verify",
    )

    p = command(
        "export",
        "OpenTelemetry spans or JSONL events",
        "Write one span per call (child spans for upstream requests) as an OTLP JSON trace "
        "request following the MCP semantic conventions, or every raw event as JSONL.",
    )
    p.add_argument("--format", choices=("otlp", "jsonl"), default="otlp", help="default otlp")
    p.add_argument(
        "--output", "-o", default="-", metavar="FILE", help="where to write (default stdout)"
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="push the spans to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318) in "
        "batches of 512, retrying 429/502/503/504, instead of writing a file",
    )

    p = sub.add_parser(
        "key",
        help="the public key of this machine's checkpoints",
        description="Print the public verifier key (C2SP signed-note format) and fingerprint of "
        "the key the bridge signs checkpoints with on this machine.",
        epilog=_EPILOGS["key"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--key-file", type=Path, metavar="FILE", help="another signing key file")
    p.add_argument("--create", action="store_true", help="create the key if there is none")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command(
        "prune",
        "remove old segments a fleet store holds and its witness cosigned",
        "Remove a journal's closed segment files older than DAYS once the fleet store holds "
        "every event of them and its witness (--witness-key) cosigned a checkpoint at or after "
        "their end; journal the prune in the live segment first.",
    )
    p.add_argument(
        "--shipped-to",
        required=True,
        metavar="URL",
        type=_fleet_cli.store_url,
        help="the fleet store the journals were shipped to (postgresql://...)",
    )
    p.add_argument(
        "--older-than",
        required=True,
        type=bridge.retention_days,
        metavar="DAYS",
        help="remove only segments whose last event is older than this many days",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    p = command(
        "erase",
        "erase the payloads of chosen events, every proof intact",
        "Erase the payloads of the events of a call, a session, a task, holding a text, or older "
        "than DAYS: the text leaves every file of the journal; the envelope, the hash chain, "
        "the Merkle tree and every proof stay, and a signed payload_erased event says who "
        "erased which seqs and why.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--call", metavar="ID", help="every event of this call")
    which.add_argument("--session", metavar="ID", help="every event of this session")
    which.add_argument(
        "--task",
        metavar="CHANNEL#NUMBER",
        type=_task,
        help="every event of the calls whose arguments name this task",
    )
    which.add_argument("--matching", metavar="TEXT", help="every event whose payload holds TEXT")
    which.add_argument(
        "--older-than",
        type=bridge.retention_days,
        metavar="DAYS",
        help="every event older than DAYS",
    )
    p.add_argument("--reason", required=True, metavar="TEXT", help="why (journaled)")
    p.add_argument("--dry-run", action="store_true", help="list the seqs; change nothing")
    p.add_argument("--key-file", type=Path, metavar="FILE", help="the signing key to sign with")
    _prove_cli.add_prove(sub)
    _fleet_cli.add_ship(sub)
    _fleet_cli.add_store_maintain(sub)
    _fleet_cli.add_store_options(sub)
    _witness_cli.add_witness(sub)
    bridge.add_completion_command(sub, PROG, build_parser)
    return parser


def _task(text: str) -> tuple[str, int]:
    from ._erase import parse_task

    try:
        return parse_task(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
