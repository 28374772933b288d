"""Command line of `agentteam-replay`: a thin layer that parses, calls `replay`, and renders."""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

import bridge
import journal

from . import _fleet_cli
from . import _render as render
from ._source import Progress as ProgressCallback
from ._source import ReplayInputError, journal_files
from ._verify import Key, load_key_file, load_trusted_key

PROG: Final = "agentteam-replay"
EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_IN_DOUBT = 0, 1, 2, 3

_MAIN_EPILOG = """\
commands:
  verify        hash chain, sequence, checkpoints, call grammar, invariants; in-doubt calls
  calls         list calls, filtered
  show          one call's whole story
  idempotency   idempotency keys, desired-state claims, idempotentHint against observed repeats
  deprecations  who still uses deprecated names; each name's removal gate
  audit         usage, errors, latency, truncation, mutations per board, sessions (CSV/JSON)
  rerun         re-drive recorded calls through today's bridge and diff
  export        OpenTelemetry spans (OTLP JSON) or raw events (JSONL)
  key           the public key that signs this machine's checkpoints, and its fingerprint
  prune         remove old segments a fleet store holds and has witnessed (journaled)

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
The checkpoint exported beside a journal (<journal>.checkpoint.json) is used when no
--checkpoint is given; it lives on the same machine, so only a copy held elsewhere can show
that the journal was cut back below it.
""",
    "prune": """\
examples:
  agentteam-replay prune --shipped-to postgresql://ship@db/fleet --older-than 30    # the pool
  agentteam-replay prune journals/ --shipped-to postgresql://ship@db/fleet --older-than 90 --dry-run

Removes only whole, closed segments (never a journal's live one) whose every event the store
holds and whose end its witnessed checkpoint covers, oldest first, each older than DAYS; the
prune is journaled first as a segments_pruned event in the live segment, so verify still
passes and accepts the journal's new start. Nothing else ever deletes journal data. A journal
a live session holds is skipped (prune it once the session ends). Ship first.
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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# --- parser -------------------------------------------------------------------------------


class _Version(argparse.Action):
    """--version: the distribution's version, looked up only when asked (it costs an import)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib.metadata import version

        print(f"{PROG} {version('agentteam-task-bridge')}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Verify, debug and audit agentteam-bridge journals offline.",
        epilog=_MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the installed version and exit"
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
    p.add_argument("--limit", type=_positive, help="at most this many calls (the first ones)")

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
    p.add_argument("--gate-days", type=_positive, default=30, metavar="N", help="default 30")
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
        "remove old segments a fleet store holds and witnessed",
        "Remove a journal's closed segment files older than DAYS once the fleet store holds "
        "every event of them and has witnessed a checkpoint at or after their end; journal the "
        "prune in the live segment first.",
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
        type=_days,
        metavar="DAYS",
        help="remove only segments whose last event is older than this many days",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    _fleet_cli.add_ship(sub)
    _fleet_cli.add_store_options(sub)
    return parser


# --- running ------------------------------------------------------------------------------


@contextmanager
def _progress(err: Console) -> Iterator[ProgressCallback | None]:
    """A progress bar on stderr when it is a terminal; nothing otherwise."""
    if not err.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    task = bar.add_task("reading events", total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Compute under a progress bar, then render (so the two never interleave)."""
    if args.command == "key":
        import replay

        info = replay.signing_key(args.key_file, create=args.create)
        if args.json:
            print(render.to_json(info), file=out.file)
        else:
            render.render_key(out, info)
        return EXIT_OK
    if args.command == "ship":
        return _ship(args, out)
    if args.command == "prune":
        return _prune(args, out)
    if args.command == "rerun" and args.allow_mutations and not args.against:
        raise ReplayInputError("--allow-mutations applies only with --against URL")
    with _progress(err) as progress:
        result, draw, code = _execute(args, progress)
    if args.command == "audit" and args.csv is not None:
        written = render.write_audit_csv(result, args.csv)
        err.print(f"wrote {len(written)} CSV files to {args.csv}")
    # An export may be on stdout itself: its summary then goes to stderr.
    on_stdout = args.command == "export" and args.output == "-" and not args.otlp_endpoint
    target = err if on_stdout else out
    if args.json:
        print(render.to_json(result), file=target.file)
    else:
        draw(target, result)
    return code


def _ship(args: argparse.Namespace, out: Console) -> int:
    # Directories stay directories: --follow picks up the journals that appear in them.
    paths = args.journals or default_journals()
    try:
        report, code = _fleet_cli.run_ship(args, paths, out)
    except Exception as exc:
        stopped = _fleet_cli.stopped_code(exc)
        if stopped is None:
            raise
        return stopped
    if args.json:
        print(render.to_json(report), file=out.file)
    elif not args.follow:
        _fleet_cli.render_ship(out, report)
    return code


def _prune(args: argparse.Namespace, out: Console) -> int:
    import replay

    report = replay.prune(
        args.journals or default_journals(),
        args.shipped_to,
        older_than_days=args.older_than,
        dry_run=args.dry_run,
    )
    if args.json:
        print(render.to_json(report), file=out.file)
    else:
        render.render_prune(out, report)
    return EXIT_OK


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not 0 <= value < 100_000:
        raise argparse.ArgumentTypeError("a number of days, 0 or more")
    return value


Drawer = Callable[[Console, Any], None]


def _execute(
    args: argparse.Namespace, progress: ProgressCallback | None
) -> tuple[Any, Drawer, int]:
    import replay

    if getattr(args, "store", None):
        return _fleet_cli.execute_from(args, progress)
    paths = journal_files(args.journals or default_journals())
    if args.command == "verify":
        verified = replay.verify(
            paths,
            checkpoints=args.checkpoint,
            trusted=_trusted(args.trusted_key, args.key) + _fleet_cli.witness_keys(args, paths),
            trust_recorded_keys=args.trust_journal_key,
            accept_unverified=args.accept_unverified,
            auto_checkpoint=not args.no_auto_checkpoint,
            progress=progress,
        )
        verified = _fleet_cli.apply_witness(args, paths, verified)
        code = EXIT_IN_DOUBT if verified.in_doubt else EXIT_OK
        return verified, render.render_verify, code if verified.ok else EXIT_FAILED
    if args.command == "calls":
        where = replay.CallFilter(
            session=args.session,
            tool=args.tool,
            agent=args.agent,
            status=args.status,
            error_code=args.error_code,
            since=args.since,
            until=args.until,
        )
        listed = replay.list_calls(paths, where, limit=args.limit, progress=progress)
        return listed, render.render_calls, EXIT_OK
    if args.command == "show":
        return replay.show_call(paths, args.call_id), render.render_show, EXIT_OK
    if args.command == "idempotency":
        checked = replay.check_idempotency(paths, progress=progress)
        return checked, render.render_idempotency, EXIT_OK if checked.ok else EXIT_FAILED
    if args.command == "deprecations":
        report = replay.deprecations(
            paths, gate_days=args.gate_days, as_of=args.as_of, names=args.name, progress=progress
        )
        return report, render.render_deprecations, EXIT_OK if report.ok else EXIT_FAILED
    if args.command == "audit":
        return replay.audit(paths, progress=progress), render.render_audit, EXIT_OK
    if args.command == "rerun":
        rerun = replay.rerun(
            paths,
            against=args.against,
            allow_mutations=args.allow_mutations,
            call_ids=args.call,
            tool=args.tool,
            session=args.session,
            include_same=args.all,
            progress=progress,
        )
        return rerun, render.render_rerun, EXIT_OK if rerun.ok else EXIT_FAILED
    if args.command == "export":
        if args.otlp_endpoint:
            if args.format != "otlp" or args.output != "-":
                raise ReplayInputError("--otlp-endpoint pushes OTLP spans: no --format or --output")
            try:
                pushed = replay.push_otlp(paths, args.otlp_endpoint, progress=progress)
            except replay.PushError as exc:
                raise ReplayInputError(str(exc)) from None
            return pushed, render.render_export, EXIT_OK
        exporter = replay.export_otlp if args.format == "otlp" else replay.export_jsonl
        with _output(args.output) as file:
            exported = exporter(paths, file, progress=progress)
        return exported, render.render_export, EXIT_OK
    raise AssertionError(args.command)


@contextmanager
def _output(target: str) -> Iterator[IO[str]]:
    if target == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    try:
        file = Path(target).open("w", encoding="utf-8")
    except OSError as exc:
        raise ReplayInputError(f"cannot write {target}: {exc.strerror or exc}") from None
    with file:
        yield file


def default_journals() -> list[Path]:
    """Where the bridge journals with no flag: $AGENTTEAM_JOURNAL or the default pool, and the
    single journal file of earlier versions when it is still there."""
    setting = Path(bridge.journal_setting()).expanduser()
    candidates = (
        [setting] if os.environ.get("AGENTTEAM_JOURNAL") else [setting, bridge.legacy_journal()]
    )
    found = [p for p in candidates if p.exists()]
    if not found:
        raise ReplayInputError(
            f"no journal at the default location {setting}; pass a journal file or directory"
        )
    return found


def _trusted(values: list[str], files: list[Path]) -> list[Key]:
    """The keys given, else this machine's own (the signing key's public half, and the
    HMAC-era key for old checkpoints), when they exist."""
    given = [load_trusted_key(v) for v in values] + [load_key_file(f) for f in files]
    if given:
        return given
    local = [journal.default_key_path(), journal.legacy_key_path()]
    return [load_key_file(path) for path in local if path.exists()]


# A pipe or a file gets whole lines: rich would otherwise wrap them at 80 columns, in the
# middle of paths and JSON. Tables take their natural width there. JSON is never broken.
_UNWRAPPED_WIDTH: Final = 1 << 14


def _console(*, stderr: bool = False) -> Console:
    """Colour and the terminal's width on a terminal; elsewhere, lines that are never wrapped."""
    console = Console(stderr=stderr, highlight=False)
    if console.is_terminal:
        return console
    if os.environ.get("COLUMNS", "").isdigit():
        return console  # a width asked for explicitly is honoured, prose wrapped to it
    return Console(stderr=stderr, highlight=False, width=_UNWRAPPED_WIDTH, soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out, err = _console(), _console(stderr=True)
    try:
        return _run(args, out, err)
    except ReplayInputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except journal.JournalFormatError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
    except sqlite3.Error as exc:
        print(f"{PROG}: cannot read the journal: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"{PROG}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return EXIT_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
