"""Benchmark of the fleet store: ship against a plain COPY, audit --from against local files.

Run: ``python -m tools.bench.bench_fleet [--journals J] [--events N] [--url URL] [--dir PATH]
[--keep DIR]`` (default 100 journals of 100,000 events: the issue's 10 million; ``--quick`` 10 of
10,000; ``--keep`` generates the journals into DIR once and reuses them on later runs, since
10 million events take the better part of an hour to generate on a busy machine).
The journals are generated with the journal's own writer (``bench_replay``'s sessions of
bridge-shaped calls). Without ``--url`` a throwaway PostgreSQL is started as the tests do
(``tests/pg_cluster.py``). Each journal holds its own sessions (distinct session ids, call
ids, task numbers and idempotency keys). Printed as measured, side by side in one run:

* ``ship`` into an empty store, events per second, beside a plain ``COPY`` of the same rows
  (read from the same files) into a plain table of the same columns on the same server (and,
  with ``--jobs N``, ``ship --jobs N`` into another empty store);
* ``audit --from`` over the store beside ``audit`` over the same journals as local files;
* ``idempotency --from`` beside ``idempotency`` over the files, each as a CLI process
  (``agentteam-replay idempotency ... --json``), their outputs compared;
* ``report --html`` over the files and ``--from`` the store, beside ``audit``, and the pages'
  sizes;
* ``calls --from`` the call lines kept at ingest: ``--since`` the last hour, ``--since`` a
  future date (nothing), ``--session`` one session, beside ``calls`` over the files;
* the shipper's peak RSS shipping one journal of N/10 events and one of N (flat: about 1x).

The journals' events are spread evenly over the last ``--days`` days (30), each journal over
the whole span as a fleet's machines are, so the last hour holds about 1/(24 x days) of them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._render import to_json

from .bench_replay import generate

T = TypeVar("T")
# What --skip may leave out: the local report and calls lists (compared with --from at smaller
# sizes; each reads every event of every file), idempotency, the shipper's RSS.
SKIPPABLE: tuple[str, ...] = ("report-local", "calls-local", "idempotency", "rss")
_PLAIN: str = """
CREATE TABLE plain_events (
  ts timestamptz, journal_id text, seq bigint, session_id text, call_id text,
  ts_mono_ns bigint, ts_wall text, kind text, kind_version integer, mcp_method_name text,
  gen_ai_tool_name text, jsonrpc_request_id text, http_response_status_code integer,
  error_type text, duration_ms double precision, payload text, prev_hash text, hash text
)"""


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def plain_copy(url: str, paths: list[Path]) -> int:
    """COPY every row of the files into a plain table (no keys, triggers, jsonb, partitions)."""
    import psycopg

    columns = ", ".join(("ts", *journal.COLUMNS))
    count = 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_PLAIN)
        for path in paths:
            source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = source.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events ORDER BY seq")
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(f"COPY plain_events ({columns}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row((row[5], *row))
                        count += 1
            source.close()
    return count


def replay_cli(args: list[str], *, output: bool = True) -> tuple[int, str]:
    """``agentteam-replay ARGS`` as a process of its own: exit status and stdout (discarded,
    and "" given, without ``output``)."""
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.replay._cli", *args],
        stdout=subprocess.PIPE if output else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"agentteam-replay {args[0]} failed: {done.stderr[-2000:]}")
    return done.returncode, done.stdout or ""


def idempotency_cli(args: list[str]) -> tuple[int, str]:
    """``agentteam-replay idempotency ARGS --json`` as a process: exit status and stdout."""
    return replay_cli(["idempotency", *args, "--json"])


def spread(path: Path, per: int, first_session: int, days: float) -> int:
    """``generate`` with the writer's clock running evenly over the last ``days`` days."""
    now = datetime.now(UTC)
    step = timedelta(days=days) / max(per, 1)
    moment = [now - timedelta(days=days)]

    def clock() -> str:
        value = moment[0]
        moment[0] = value + step
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    with mock.patch("agentteam_task_bridge.journal._core.wall_now", clock):
        return generate(path, per, first_session=first_session)


def _row(case: str, seconds: float, events: int, ratio: float) -> None:
    print(f"{case:<48} {seconds:>8.1f} {events / seconds:>10,.0f} {ratio:>6.2f}x", flush=True)


def _size(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return f"{(row[0] if row else 0) / 1e9:.1f} GB"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def report_rows(
    tmp: Path,
    paths: list[Path],
    store: str,
    events: int,
    audit_s: float,
    audit_from_s: float,
    local: bool = True,
) -> None:
    """``report --html`` over the files and ``--from`` the store: time beside ``audit``, size."""
    from agentteam_task_bridge.replay._fleet_report import report_from
    from agentteam_task_bridge.replay._report_html import write_html

    if local:
        local_s, page = _timed(lambda: replay.report(paths, accept_unverified=True))
        local_size = write_html(page, tmp / "local.html")
        _row("report --html over local files", local_s, events, audit_s / local_s)
        del page
        print(
            f"report: local {local_s / audit_s:.2f}x the local audit's time;"
            f" HTML {local_size / 1e6:.2f} MB",
            flush=True,
        )
    # A live store's reports find its pages cached and its statistics made; the first pair
    # after the ship does not: the best of three pairs, `audit --from` and `report --from` in
    # turn, is the figure (the first report's time printed beside it).
    first_s, stored = _timed(lambda: report_from(store))
    pairs = [(audit_from_s, first_s)]
    for _ in range(2):
        again_s, _ = _timed(lambda: reports.audit_from(store))
        pairs.append((again_s, _timed(lambda: report_from(store))[0]))
    audit_from_s, from_s = min(a for a, _ in pairs), min(r for _, r in pairs)
    from_size = write_html(stored, tmp / "from.html")
    _row("report --html --from the store (SQL)", from_s, events, audit_from_s / from_s)
    print(
        f"report --from: {from_s / audit_from_s:.2f}x audit --from's time (best of three"
        f" pairs: {audit_from_s:.2f} s and {from_s:.2f} s; the first report {first_s:.2f} s);"
        f" HTML {from_size / 1e6:.2f} MB",
        flush=True,
    )
    # The same pairs as a person runs them: each command its own process (this one's heap,
    # grown by the ship and the local runs, made the in-process report slower than a fresh
    # process's, 1.65x against 1.34x at 1M events in session 21).
    html = tmp / "from-cli.html"
    commands = (["audit", "--from", store], ["report", "--from", store, "--html", str(html)])
    cli = [
        [_timed(functools.partial(replay_cli, args, output=False))[0] for args in commands]
        for _ in range(3)
    ]
    audit_cli, report_cli = min(a for a, _ in cli), min(r for _, r in cli)
    print(
        f"report --from as processes: {report_cli / audit_cli:.2f}x audit --from's (best of"
        f" three pairs: {audit_cli:.2f} s and {report_cli:.2f} s); HTML"
        f" {html.stat().st_size / 1e6:.2f} MB",
        flush=True,
    )


def calls_rows(
    paths: list[Path], store: str, events: int, generated: datetime, local: bool = True
) -> None:
    """``calls`` with a filter, over the files and ``--from`` the store's call lines.

    "The last hour" is the hour before the journals were generated: each journal's events run
    evenly up to the moment it was written. Without ``local`` only ``--from`` is timed (the
    files' lists are not built, so the two are not compared).
    """
    hour = generated - timedelta(hours=1)
    session = f"s{len(paths) // 2 * 1_000:08x}"  # the first session of the middle journal
    filters = [
        ("--since <last hour>", replay.CallFilter(since=hour)),
        ("--since 2099 (nothing)", replay.CallFilter(since=datetime(2099, 1, 1, tzinfo=UTC))),
        (f"--session {session}", replay.CallFilter(session=session)),
    ]
    for label, where in filters:
        from_s, stored = _timed(lambda w=where: reports.calls_from(store, w))  # type: ignore[misc]
        if not local:
            print(f"calls {label}: {len(stored.calls):,} calls; --from {from_s:.3f} s", flush=True)
            continue
        local_s, listed = _timed(lambda w=where: replay.list_calls(paths, w))  # type: ignore[misc]
        same = to_json(stored) == to_json(listed)
        print(
            f"calls {label}: {len(listed.calls):,} calls; files {local_s:.2f} s,"
            f" --from {from_s:.3f} s ({local_s / from_s:.0f}x faster);"
            f" {'equal' if same else 'DIFFER'}",
            flush=True,
        )
        if not same:
            raise SystemExit(f"calls {label} --from differs from the local list")


def _call_lines_size(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), sum(pg_total_relation_size(c.oid))"
            " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'agentteam.call_lines'::regclass"
        ).fetchone()
        lines = conn.execute("SELECT sum(calls) FROM agentteam.call_counts").fetchone()
    size = float(row[1] or 0) if row else 0.0
    return f"call lines {int(lines[0] or 0) if lines else 0:,} in {size / 1e9:.2f} GB"


def shipper_peak_rss_mb(path: Path, url: str) -> float:
    """Peak RSS of a fresh ``agentteam-replay ship`` process shipping one journal."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child started by a large
    # parent reports the parent's peak.
    code = (
        "import sys\n"
        "from agentteam_task_bridge import replay\n"
        "assert replay.ship([sys.argv[1]], sys.argv[2]).ok\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "print(int(status.split()[0]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), url], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1]) / 1024


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.bench_fleet",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--journals", type=int, default=100, help="default 100")
    parser.add_argument("--events", type=int, default=100_000, help="per journal, default 100,000")
    parser.add_argument("--quick", action="store_true", help="10 journals of 10,000 events")
    parser.add_argument("--url", help="a PostgreSQL server to use (a database is created on it)")
    parser.add_argument("--dir", type=Path, default=None, help="directory for the temp files")
    parser.add_argument("--days", type=float, default=30, help="the span of the events (30)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="generate the journals into this directory once and reuse them when its manifest"
        " names the same --journals, --events and --days",
    )
    parser.add_argument(
        "--generate-only", action="store_true", help="with --keep: generate the journals and stop"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="also ship with this many connections at once into a second store (1: not)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts not to run at 10M, where they take longest:"
        f" {', '.join(SKIPPABLE)}",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    skip = frozenset(part for part in args.skip.split(",") if part)
    if unknown := skip - set(SKIPPABLE):
        parser.error(f"--skip: unknown {', '.join(sorted(unknown))}")
    journals, per = (10, 10_000) if args.quick else (args.journals, args.events)
    if args.generate_only:
        if args.keep is None:
            parser.error("--generate-only needs --keep DIR")
        args.keep.mkdir(parents=True, exist_ok=True)
        journals_in(args.keep, journals, per, args.days, keep=True)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.pg_cluster import Cluster, start_cluster

    cluster = Cluster(args.url, None, None, None) if args.url else start_cluster()
    signal.signal(signal.SIGTERM, _exit)  # stop the cluster and remove the files when killed
    try:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            run(Path(tmp), cluster, journals, per, args.days, args.keep, skip, args.jobs)
    finally:
        cluster.stop()


@contextmanager
def cluster_and_journals(
    url: str | None, keep: Path | None, journals: int, per: int
) -> Iterator[tuple[Any, list[Path], int]]:
    """A PostgreSQL server (``url``'s, else a throwaway one started as the tests start it) and
    the journals to measure (:func:`journals_in`: kept in ``keep``, else in a temporary
    folder); the server stopped after."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.pg_cluster import Cluster, start_cluster

    cluster = Cluster(url, None, None, None) if url else start_cluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            paths, events, _ = journals_in(folder, journals, per, 30, keep is not None)
            yield cluster, paths, events
    finally:
        cluster.stop()


def journals_in(
    folder: Path, journals: int, per: int, days: float, keep: bool
) -> tuple[list[Path], int, datetime]:
    """The journals to measure, their events and when they were generated.

    With ``keep`` a ``manifest.json`` in ``folder`` that names the same sizes means the journals
    there are reused as they are; otherwise they are generated (and the manifest written last,
    so an interrupted generation is never reused).
    """
    paths = [folder / f"journal-{i}.db" for i in range(journals)]
    manifest = folder / "manifest.json"
    wanted = {"journals": journals, "events": per, "days": days}
    if keep and manifest.exists():
        kept = json.loads(manifest.read_text())
        if {key: kept.get(key) for key in wanted} == wanted and all(p.exists() for p in paths):
            print(f"reusing the {journals} journals in {folder} ({kept['generated']})", flush=True)
            return paths, int(kept["total"]), datetime.fromisoformat(kept["generated"])
    manifest.unlink(missing_ok=True)
    for path in paths:
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    generated = datetime.now(UTC)
    # Sessions hold 2,000 calls (about 12,000 events): 1,000 session numbers per journal apart.
    gen_s, counts = _timed(lambda: [spread(p, per, i * 1_000, days) for i, p in enumerate(paths)])
    events = sum(counts)
    print(f"generated {journals} journals, {events:,} events in {gen_s:.1f} s", flush=True)
    if keep:
        record = {**wanted, "total": events, "generated": generated.isoformat()}
        manifest.write_text(json.dumps(record))
    return paths, events, generated


def run(
    tmp: Path,
    cluster: object,
    journals: int,
    per: int,
    days: float = 30,
    keep: Path | None = None,
    skip: frozenset[str] = frozenset(),
    jobs: int = 1,
) -> None:
    from tests.pg_cluster import Cluster

    assert isinstance(cluster, Cluster)
    started = time.perf_counter()
    print(f"start: {_load()}", flush=True)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    paths, events, generated = journals_in(keep or tmp, journals, per, days, keep is not None)
    store, baseline = cluster.create_database("bench"), cluster.create_database("plain")
    print(f"{'case':<48} {'seconds':>8} {'events/s':>10} {'ratio':>7}", flush=True)
    ship_s, shipped = _timed(lambda: replay.ship(paths, store))
    assert shipped.ok and shipped.shipped == events
    copy_s, copied = _timed(lambda: plain_copy(baseline, paths))
    assert copied == events
    files = sum(p.stat().st_size for p in paths)
    print(
        f"sizes: journal files {files / 1e9:.1f} GB, store {_size(store)},"
        f" plain table {_size(baseline)}; {_call_lines_size(store)}",
        flush=True,
    )
    _row("plain COPY of the same rows", copy_s, events, 1)
    _row("ship (checked again in SQL, partitioned, call lines)", ship_s, events, copy_s / ship_s)
    if jobs > 1:
        again = cluster.create_database("jobs")
        jobs_s, together = _timed(lambda: replay.ship(paths, again, jobs=jobs))
        assert together.ok and together.shipped == events
        _row(f"ship --jobs {jobs} (as above, {jobs} connections)", jobs_s, events, copy_s / jobs_s)
    local_s, local = _timed(lambda: replay.audit(paths))
    _row("audit over local files", local_s, events, 1)
    from_s, stored = _timed(lambda: reports.audit_from(store))
    _row("audit --from the store (SQL)", from_s, events, local_s / from_s)
    assert to_json(stored) == to_json(local), "audit differs"
    del local, stored
    report_rows(tmp, paths, store, events, local_s, from_s, "report-local" not in skip)
    calls_rows(paths, store, events, generated, "calls-local" not in skip)
    if "idempotency" not in skip:
        idempotency_rows(paths, store, events)
    if "rss" not in skip:
        rss_rows(tmp, per, cluster)
    print(f"end: {_load()}; wall time {time.perf_counter() - started:.0f} s", flush=True)


def idempotency_rows(paths: list[Path], store: str, events: int) -> None:
    """``idempotency --json`` over the files and ``--from`` the store, as CLI processes."""
    idem_s, (idem_rc, idem_local) = _timed(lambda: idempotency_cli([str(p) for p in paths]))
    _row("idempotency over local files (CLI)", idem_s, events, 1)
    idem_from_s, (from_rc, idem_from) = _timed(lambda: idempotency_cli(["--from", store]))
    _row("idempotency --from the store (SQL, CLI)", idem_from_s, events, idem_s / idem_from_s)
    same = idem_rc == from_rc and idem_from == idem_local
    print(
        f"idempotency reports {'equal' if same else 'DIFFER'}"
        f" ({len(idem_local):,} bytes of --json, exit {idem_rc})",
        flush=True,
    )
    if not same:
        raise SystemExit("idempotency --from differs from the local report")


def rss_rows(tmp: Path, per: int, cluster: object) -> None:
    """The shipper's peak RSS for a journal of ``per`` events beside one of a tenth of that."""
    from tests.pg_cluster import Cluster

    assert isinstance(cluster, Cluster)
    big = tmp / "big.db"
    small = tmp / "small.db"
    generate(small, max(1_000, per // 10))
    generate(big, per)
    rss_small = shipper_peak_rss_mb(small, cluster.create_database("rss"))
    rss_big = shipper_peak_rss_mb(big, cluster.create_database("rss"))
    print(
        f"shipper peak RSS: {rss_small:.0f} MB for {max(1_000, per // 10):,} events,"
        f" {rss_big:.0f} MB for {per:,} events ({rss_big / rss_small:.2f}x);"
        f" bench process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
