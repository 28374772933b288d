"""The fleet's part of the command line: ``ship``, and the ``--from`` / ``--witness`` options."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.markup import escape

from agentteam_task_bridge import bridge

from ._fleet_ship import BATCH_SIZE, ShipReport
from ._fleet_store import is_store_url, store_errors
from ._source import Progress, ReplayInputError

__all__ = [
    "add_ship",
    "add_store_maintain",
    "add_store_options",
    "apply_witness",
    "execute_from",
    "render_ship",
    "render_store_erase",
    "report_from",
    "run_erase_from",
    "run_ship",
    "run_store_maintain",
    "store_url",
    "witness_keys",
]

FROM_COMMANDS: Final = ("calls", "idempotency", "deprecations", "audit", "report")

SHIP_EPILOG: Final = """\
examples:
  agentteam-replay ship ~/.local/share/agentteam-bridge/journals/ --to postgresql://ship@db/fleet
  agentteam-replay ship journal.db --to postgresql://ship@db.example/fleet --json
  agentteam-replay ship journals/ --to postgresql://ship@db.example/fleet --jobs 2
  agentteam-replay ship journals/ --to postgresql://ship@db.example/fleet --follow --interval 2

Each journal resumes after the last event the store holds; a journal whose history differs
from what the store holds (a fork), or whose checkpoint does not verify under the key the store
registered for it, is refused, recorded as a finding in the store, and the exit status is 1.
The store's schema is created on first use by a role allowed to (see docs/fleet.md).
"""


def store_url(text: str) -> str:
    """argparse type of a store URL."""
    if not is_store_url(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a postgresql:// URL")
    return text


def add_ship(sub: Any) -> None:
    p = sub.add_parser(
        "ship",
        help="copy journals into the fleet store (PostgreSQL)",
        description="Copy the events of journals into a PostgreSQL fleet store, incrementally "
        "(each journal resumes after what the store holds), verified (no fork; checkpoints "
        "under the journal's registered key) and idempotent.",
        epilog=SHIP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "journals", nargs="*", metavar="JOURNAL_OR_DIR", type=Path, help="journals or directories"
    )
    p.add_argument("--to", required=True, type=store_url, metavar="URL", help="postgresql://...")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--follow", action="store_true", help="keep shipping live journals")
    p.add_argument(
        "--interval",
        type=bridge.number_type(
            float,
            "a number of seconds",
            lambda v: 0.05 <= v <= 3600,
            "between 0.05 and 3600 seconds",
        ),
        default=1.0,
        metavar="SECONDS",
        help="with --follow (1)",
    )
    p.add_argument(
        "--batch-size",
        type=bridge.number_type(
            int, "a whole number", lambda v: 1 <= v <= 1_000_000, "between 1 and 1000000"
        ),
        default=BATCH_SIZE,
        metavar="N",
        help=f"({BATCH_SIZE})",
    )
    p.add_argument(
        "--jobs",
        type=bridge.number_type(int, "a whole number", lambda v: 1 <= v <= 16, "between 1 and 16"),
        default=1,
        metavar="N",
        help="journals shipped at once, each by its own connection (1; --follow ships one at a"
        " time)",
    )


def add_store_options(sub: Any) -> None:
    """``--from URL`` on the reports the store computes, ``--witness URL`` on verify."""
    for name in FROM_COMMANDS:
        sub.choices[name].add_argument(
            "--from",
            dest="store",
            type=store_url,
            metavar="URL",
            help="read the fleet store (postgresql://...) instead of journal files; computed in "
            "the database, same report",
        )
    erase = sub.choices["erase"]
    erase.add_argument(
        "--from",
        dest="store",
        type=store_url,
        metavar="URL",
        help="erase in the fleet store alone, as its owner (postgresql://...), then rewrite the "
        "touched partitions and the WAL (needs --journal; recorded in the store, not signed)",
    )
    erase.add_argument("--journal", metavar="ID", help="with --from: the journal id to erase in")
    sub.choices["verify"].add_argument(
        "--witness",
        type=store_url,
        metavar="URL",
        help="compare each journal with what the fleet store received of it (catches a journal "
        "truncated, rolled back or rewritten after shipping); trusts the keys it registered",
    )


def witness_keys(args: argparse.Namespace, paths: list[Path]) -> list[Any]:
    """With ``--witness URL``: the keys the store registered for these journals, trusted."""
    if not getattr(args, "witness", None):
        return []
    from ._fleet_witness import registered_keys
    from ._source import open_reader

    ids = []
    for path in paths:
        with open_reader(path) as reader:
            if reader.journal_id is not None:
                ids.append(reader.journal_id)
    with store_errors(args.witness):
        return list(registered_keys(args.witness, ids))


def apply_witness(args: argparse.Namespace, paths: list[Path], verified: Any) -> Any:
    """Add the findings of ``--witness URL`` (the fleet store's copy) to a verify result."""
    if not getattr(args, "witness", None):
        if getattr(args, "witness_key", None):
            raise ReplayInputError("--witness-key needs --witness URL (the store)")
        return verified
    import msgspec

    from ._fleet_store import one_instant
    from ._fleet_witness import pending_erasures, witness_findings
    from ._witness_cli import witness_keys

    keys = witness_keys(args.witness_key)
    with store_errors(args.witness), one_instant(args.witness) as instant:
        found = witness_findings(instant, paths, witness_keys=keys)
        pending = pending_erasures(instant, paths)
    journals = [
        msgspec.structs.replace(
            j,
            erasures_pending=pending[j.journal_id][0],
            erasures_held=pending[j.journal_id][1],
        )
        if j.journal_id in pending
        else j
        for j in verified.journals
    ]
    return msgspec.structs.replace(
        verified, journals=journals, findings=[*verified.findings, *found]
    )


def execute_from(args: argparse.Namespace, progress: Any) -> tuple[Any, Any, int]:
    """Run a report over the store given with ``--from`` (no journal files)."""

    if args.journals:
        raise ReplayInputError("give journals or --from URL, not both")
    with store_errors(args.store):
        return _report_from(args, progress)


def _report_from(args: argparse.Namespace, progress: Any) -> tuple[Any, Any, int]:
    from . import _calls_table
    from . import _fleet_reports as reports
    from . import _render as render
    from ._cli_parser import call_filter

    if args.command == "calls":
        where = call_filter(args)
        return reports.calls_from(args.store, where, limit=args.limit), _calls_table.render_calls, 0
    if args.command == "audit":
        return reports.audit_from(args.store), render.render_audit, 0
    if args.command == "deprecations":
        report = reports.deprecations_from(
            args.store, gate_days=args.gate_days, as_of=args.as_of, names=args.name
        )
        return report, render.render_deprecations, 0 if report.ok else 1
    if args.command == "idempotency":
        checked = reports.idempotency_from(args.store)
        return checked, render.render_idempotency, 0 if checked.ok else 1
    raise AssertionError(args.command)


def report_from(args: argparse.Namespace) -> Any:
    """``report --from URL``: the page's figures computed in the store (``_fleet_report``)."""
    from ._fleet_report import report_from as compute
    from ._report import ReportFilter

    if args.journals:
        raise ReplayInputError("give journals or --from URL, not both")
    if args.trusted_key or args.accept_unverified:
        raise ReplayInputError(
            "--trusted-key and --accept-unverified apply to journal files, not --from: the"
            " store verified what it holds under the keys it registered"
        )
    where = ReportFilter(
        journal=args.journal, session=args.session, since=args.since, until=args.until
    )
    with store_errors(args.store):
        return compute(args.store, where, stories=args.stories)


def run_ship(
    args: argparse.Namespace, paths: list[Path], out: Console, progress: Progress | None = None
) -> tuple[ShipReport, int]:
    """Ship once (``progress`` told the events shipped), or follow until SIGINT/SIGTERM."""
    with store_errors(args.to):
        return _run_ship(args, paths, out, progress)


def _run_ship(
    args: argparse.Namespace, paths: list[Path], out: Console, progress: Progress | None
) -> tuple[ShipReport, int]:
    from ._fleet_follow import ship_follow
    from ._fleet_ship import ship

    if not args.follow:
        report = ship(paths, args.to, batch_size=args.batch_size, progress=progress, jobs=args.jobs)
        return report, 0 if report.ok else 1
    refused = 0

    def on_round(report: ShipReport) -> None:
        nonlocal refused
        refused += report.refused
        if report.shipped or report.refused:
            if args.json:
                from . import _render as render

                print(render.to_json(report), file=out.file, flush=True)
            else:
                render_ship(out, report)

    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt  # a second signal: at once, whatever is in flight
        stopping.set()  # the first: after the batch in flight (see _fleet_follow)

    def on_outage(line: str) -> None:
        print(f"agentteam-replay ship: {line}", file=sys.stderr, flush=True)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    try:
        ship_follow(
            paths,
            args.to,
            interval=args.interval,
            batch_size=args.batch_size,
            on_round=on_round,
            on_outage=on_outage,
            stop=stopping,
        )
    except KeyboardInterrupt:
        pass
    sys.stderr.flush()
    raise _Stopped(1 if refused else 0)


class _Stopped(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def stopped_code(exc: BaseException) -> int | None:
    return exc.code if isinstance(exc, _Stopped) else None


def render_ship(console: Console, report: ShipReport) -> None:
    for item in report.journals:
        line = (
            f"{item.journal_id}  {item.path}: {item.shipped} events shipped"
            f" (store seq {item.store_head_before} -> {item.store_head})"
        )
        if item.checkpoints:
            line += f", {item.checkpoints} checkpoints witnessed"
        if item.checkpoints_skipped:
            line += f", {item.checkpoints_skipped} HMAC-era checkpoints not witnessed"
        console.print(line, markup=False)
        if item.waiting is not None:
            console.print(f"  not shipped yet: {item.waiting}", markup=False)
        if item.refused is not None:
            f = item.refused
            console.print(f"  REFUSED at seq {f.seq}: {f.rule}: {f.detail}", markup=False)
    verdict = "OK" if report.ok else f"FAILED: {report.refused} journal(s) refused"
    console.print(f"{report.shipped} events shipped to {report.store}; {verdict}", markup=False)


MAINTAIN_EPILOG: Final = """\
examples:
  agentteam-replay store-maintain --from postgresql://owner@db.example/fleet
  agentteam-replay store-maintain --from postgresql://owner@db.example/fleet --json
Run it as the store's owner after shipping payload_erased events (erase --from runs it itself):
the partitions holding rows erased since the last run are rewritten (VACUUM FULL), then
pg_statistic, then CHECKPOINT, a WAL switch and a CHECKPOINT remove the old WAL segments.
Exits 1 when a step could not run or a server setting keeps old bytes (said; see docs/fleet.md).
"""


def add_store_maintain(sub: Any) -> None:
    p = sub.add_parser(
        "store-maintain",
        help="make erased payloads leave the fleet store's files (owner)",
        description="Rewrite what holds old versions of the rows erased in the fleet store since "
        "the last run, and remove the old WAL: the erased bytes leave the server's files.",
        epilog=MAINTAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--from", dest="store", required=True, type=store_url, metavar="URL", help="the store"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def run_erase_from(args: argparse.Namespace, selector: Any, out: Console) -> Any:
    """``erase --from URL --journal ID``: the store's erasure (``_fleet_erase``)."""
    from ._fleet_erase import erase_from

    if args.journals:
        raise ReplayInputError("give journals or --from URL, not both")
    if not args.journal:
        raise ReplayInputError("erase --from needs --journal ID (the journal to erase in)")
    if args.key_file is not None:
        raise ReplayInputError("--key-file signs a journal's erasure; --from signs nothing")
    return erase_from(args.store, args.journal, selector, reason=args.reason, dry_run=args.dry_run)


def render_store_erase(out: Console, report: Any) -> None:
    """What ``erase --from`` did to the store's files (after ``render_erase``)."""
    for j in report.journals:
        if j.dry_run:
            continue
        if j.scrubbed:
            out.print(f"  recorded in the store (not signed); {len(j.files)} relations rewritten")
        else:
            out.print(
                "  [red]old bytes may remain in the store's files: run store-maintain --from URL "
                "as the store's owner, and see docs/fleet.md (Erasure)[/]",
                markup=True,
            )


def run_store_maintain(args: argparse.Namespace, out: Console) -> int:
    from . import _render as render
    from ._fleet_erase import scrub_store

    report = scrub_store(args.store)
    if args.json:
        print(render.to_json(report), file=out.file)
    else:
        out.print(
            f"{report.erasures} erasures: {len(report.rewritten)} relations rewritten"
            + (", pg_statistic" if report.statistics else "")
            + ("; WAL switched, old segments removed" if report.wal_switched else "")
        )
        for problem in report.problems:
            out.print(f"[red]{escape(problem)}[/]", markup=True)
    return 0 if report.ok else 1
