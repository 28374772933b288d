"""Command line of `agentteam-replay`: a thin layer that parses, calls `replay`, and renders.

The parser (subcommands, options, help) is :mod:`replay._cli_parser`; the tables are
:mod:`replay._render`'s; here each parsed command becomes one call of its ``replay`` function,
under a progress bar on a terminal, and its exit status.

An output whose encoding is not UTF (``PYTHONIOENCODING=ascii``, a Latin-1 locale, a pipe on
Windows) gets each character it lacks as a JSON escape (``\\u4efb``; a pair past U+FFFF), so a
journal's text never stops a command and ``--json`` stays JSON.
"""

from __future__ import annotations

import argparse
import codecs
import io
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import IO, Any, Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

from agentteam_task_bridge import bridge, journal

from . import _calls_table, _fleet_cli, _prove_cli, _witness_cli
from . import _render as render
from ._cli_parser import PROG, build_parser, call_filter
from ._source import Progress as ProgressCallback
from ._source import ReplayInputError, journal_files
from ._terminal import SafeConsole, shown
from ._verify import Key, load_key_file, load_trusted_key

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_IN_DOUBT = 0, 1, 2, 3


@contextmanager
def _progress(err: Console, what: str = "reading events") -> Iterator[ProgressCallback | None]:
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
    task = bar.add_task(what, total=None)

    def update(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Compute under a progress bar, then render (so the two never interleave)."""
    if args.command == "completion":
        return int(args.run(args))
    if args.command == "key":
        from agentteam_task_bridge import replay

        info = replay.signing_key(args.key_file, create=args.create)
        if args.json:
            print(render.to_json(info), file=out.file)
        else:
            render.render_key(out, info)
        return EXIT_OK
    if args.command in _prove_cli.COMMANDS:
        return _prove_cli.run(args, out)
    if args.command == "ship":
        return _ship(args, out, err)
    if args.command == "prune":
        return _prune(args, out)
    if args.command == "witness":
        return _witness_cli.run(args, out)
    if args.command == "erase":
        return _erase(args, out)
    if args.command == "store-maintain":
        return _fleet_cli.run_store_maintain(args, out)
    if args.command == "report":
        return _report(args, out, err)
    if args.command == "calls" and not getattr(args, "store", None):
        return _calls(args, out, err)
    if args.command == "rerun" and args.allow_mutations and not args.against:
        raise ReplayInputError("--allow-mutations applies only with --against URL")
    with _progress(err) as progress:
        result, draw, code = _execute(args, progress)
    if args.command == "verify" and getattr(result, "trusted_local_key_file", False):
        _say_local_trust()
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


def _calls(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``calls`` over journal files streams: the calls are never all in memory."""
    from agentteam_task_bridge import replay

    where = call_filter(args)
    paths = journal_files(args.journals or default_journals())
    if args.json:  # written as it is read: no progress bar on the terminal it is written to
        with (
            _progress(err) if not out.is_terminal else nullcontext() as progress,
            replay.stream_calls(paths, where, limit=args.limit, progress=progress) as stream,
        ):
            _calls_table.write_calls_json(out.file, stream)
        return EXIT_OK
    with _progress(err) as progress:
        stream = replay.stream_calls(paths, where, limit=args.limit, progress=progress)
        with stream:
            rows = _calls_table.spill_calls(out, stream)
    with rows:
        _calls_table.print_calls(out, rows, stream)
    if rows.spill_error is not None:  # printed all the same, from memory
        reason = rows.spill_error.strerror or type(rows.spill_error).__name__
        err.print(f"{PROG}: the table was held in memory: no temporary file ({reason})")
    return EXIT_OK


def _ship(args: argparse.Namespace, out: Console, err: Console) -> int:
    # Directories stay directories: --follow picks up the journals that appear in them.
    paths = args.journals or default_journals()
    try:
        if args.follow:
            report, code = _fleet_cli.run_ship(args, paths, out)
        else:
            with _progress(err, "shipping events") as progress:
                report, code = _fleet_cli.run_ship(args, paths, out, progress)
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


def _report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from agentteam_task_bridge import replay

    from ._report_html import write_html

    where = replay.ReportFilter(
        journal=args.journal, session=args.session, since=args.since, until=args.until
    )
    local = False
    if getattr(args, "store", None):
        result = _fleet_cli.report_from(args)
    else:
        result, local = _report_files(args, where, err)
    if local:
        _say_local_trust()
    size = write_html(result, args.html)
    if args.json:  # what the page shows, as data
        print(render.to_json(result), file=out.file)
        err.print(f"wrote {args.html} ({size} bytes)")
    else:
        verdict = "verified" if result.verify.ok else "FAILED verification"
        out.print(f"wrote {args.html} ({size} bytes): {result.audit.calls} calls, {verdict}")
    if not result.ok:
        return EXIT_FAILED
    return EXIT_IN_DOUBT if result.verify.in_doubt else EXIT_OK


def _report_files(args: argparse.Namespace, where: Any, err: Console) -> tuple[Any, bool]:
    """The report over journal files, and whether it trusted this machine's key file."""
    from agentteam_task_bridge import replay

    paths = journal_files(args.journals or default_journals())
    trusted, local = _trusted(args.trusted_key, [])
    with _progress(err) as progress:
        result = replay.report(
            paths,
            where,
            trusted=trusted,
            accept_unverified=args.accept_unverified,
            local_key_file=local,
            stories=args.stories,
            progress=progress,
        )
    return result, local


def _prune(args: argparse.Namespace, out: Console) -> int:
    from agentteam_task_bridge import replay

    report = replay.prune(
        args.journals or default_journals(),
        args.shipped_to,
        older_than_days=args.older_than,
        witness_keys=_witness_cli.witness_keys(args.witness_key) or [],
        dry_run=args.dry_run,
    )
    if args.json:
        print(render.to_json(report), file=out.file)
    else:
        render.render_prune(out, report)
    return EXIT_OK


def _erase(args: argparse.Namespace, out: Console) -> int:
    from agentteam_task_bridge import replay

    selector = replay.Selector(
        call_id=args.call,
        session_id=args.session,
        task=args.task,
        matching=args.matching,
        older_than_days=args.older_than,
    )
    if getattr(args, "store", None):
        report = _fleet_cli.run_erase_from(args, selector, out)
        if not args.json:
            render.render_erase(out, report)
            _fleet_cli.render_store_erase(out, report)
            return EXIT_OK if report.ok else EXIT_FAILED
    else:
        if args.journal:
            raise ReplayInputError("--journal ID goes with --from URL (a journal in the store)")
        report = replay.erase(
            args.journals or default_journals(),
            selector,
            reason=args.reason,
            dry_run=args.dry_run,
            key_file=args.key_file,
        )
    if args.json:
        print(render.to_json(report), file=out.file)
    else:
        render.render_erase(out, report)
    return EXIT_OK if report.ok else EXIT_FAILED


Drawer = Callable[[Console, Any], None]


def _execute(
    args: argparse.Namespace, progress: ProgressCallback | None
) -> tuple[Any, Drawer, int]:
    from agentteam_task_bridge import replay

    if getattr(args, "store", None):
        return _fleet_cli.execute_from(args, progress)
    paths = journal_files(args.journals or default_journals())
    if args.command == "verify":
        trusted, local = _trusted(args.trusted_key, args.key)
        verified = replay.verify(
            paths,
            checkpoints=args.checkpoint,
            trusted=trusted + _fleet_cli.witness_keys(args, paths),
            local_key_file=local,
            trust_recorded_keys=args.trust_journal_key,
            accept_unverified=args.accept_unverified,
            auto_checkpoint=not args.no_auto_checkpoint,
            progress=progress,
        )
        verified = _fleet_cli.apply_witness(args, paths, verified)
        code = EXIT_IN_DOUBT if verified.in_doubt else EXIT_OK
        return verified, render.render_verify, code if verified.ok else EXIT_FAILED
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
        file = open(target, "w", encoding="utf-8", opener=journal.private_opener)
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


def _trusted(values: list[str], files: list[Path]) -> tuple[list[Key], bool]:
    """The keys given, else this machine's own (the signing key's public half, and the
    HMAC-era key for old checkpoints), when they exist, said on stderr; and whether the keys
    are this machine's."""
    given = [load_trusted_key(v) for v in values] + [load_key_file(f) for f in files]
    if given:
        return given, False
    local = [p for p in (journal.default_key_path(), journal.legacy_key_path()) if p.exists()]
    return [load_key_file(path) for path in local], True


def _say_local_trust() -> None:
    """What the default check trusted, on stderr after the check (one line a key file)."""
    local = [p for p in (journal.default_key_path(), journal.legacy_key_path()) if p.exists()]
    for path in local:
        print(
            f"{PROG}: trusted this machine's key file {path}: a key file replaced along with the"
            " whole history cannot be told from here; pass --trusted-key with a key held elsewhere",
            file=sys.stderr,
        )


# A pipe or a file gets whole lines: rich would otherwise wrap them at 80 columns, in the
# middle of paths and JSON. Tables take their natural width there. JSON is never broken.
_UNWRAPPED_WIDTH: Final = 1 << 14


def _console(*, stderr: bool = False) -> Console:
    """Colour and the terminal's width on a terminal; elsewhere, lines that are never wrapped."""
    console = SafeConsole(stderr=stderr, highlight=False)
    if console.is_terminal:
        return console
    if os.environ.get("COLUMNS", "").isdigit():
        return console  # a width asked for explicitly is honoured, prose wrapped to it
    return SafeConsole(stderr=stderr, highlight=False, width=_UNWRAPPED_WIDTH, soft_wrap=True)


def _fail(message: str) -> None:
    """One line on stderr; a file name or journal text in it is shown, never obeyed."""
    print(f"{PROG}: {shown(message, one_line=True)}", file=sys.stderr)


_ESCAPE: Final = "agentteam-replay-escape"


def _escaped(exc: UnicodeError) -> tuple[str, int]:
    """The characters an output's encoding lacks, as JSON escapes (valid in a JSON string)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for c in exc.object[exc.start : exc.end]:
        n = ord(c)
        if n > 0xFFFF:
            n -= 0x10000
            out.append(f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}")
        else:
            out.append(f"\\u{n:04x}")
    return "".join(out), exc.end


codecs.register_error(_ESCAPE, _escaped)


def _escape_what_the_output_cannot_encode() -> None:
    for stream in (sys.stdout, sys.stderr):
        encoding = codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name
        if isinstance(stream, io.TextIOWrapper) and not encoding.startswith("utf"):
            stream.reconfigure(errors=_ESCAPE)


def main(argv: Sequence[str] | None = None) -> int:
    _escape_what_the_output_cannot_encode()
    args = build_parser().parse_args(argv)
    out, err = _console(), _console(stderr=True)
    try:
        return _run(args, out, err)
    except ReplayInputError as exc:
        _fail(str(exc))
    except journal.JournalFormatError as exc:
        _fail(str(exc))
    except sqlite3.Error as exc:
        _fail(f"cannot read the journal: {journal.sqlite_reason(exc)}")
    except OSError as exc:
        _fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        return 130
    return EXIT_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
