"""Benchmark of the journal's durable write path against raw sqlite3 doing the same work.

Run: ``python -m tools.bench.bench_journal [--events N] [--dir PATH]``. Prints durable events per
second for single-event commits and for group commit under 16 concurrent trio writers, beside raw
``sqlite3`` (WAL, ``synchronous=FULL``, the same events encoded and hash-chained, but no triggers,
indexes, redaction or threads), and the ratio; and verification beside a plain scan recomputing
the hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from agentteam_task_bridge import journal

KEY = b"bench-key-0123456789abcdef012345"
WRITERS = 16


def _event(i: int) -> journal.Event:
    return journal.Event(
        session_id="bench-session",
        call_id=f"call-{i // 4}",
        mcp_method_name="tools/call",
        gen_ai_tool_name="task_create",
        jsonrpc_request_id=i,
        payload=journal.CallReceived(
            arguments={"channel": "eng", "title": f"Task number {i}", "body": "x" * 200},
            meta_keys=["agentteam/workflow_run_id"],
            jsonrpc_request_id=i,
        ),
    )


async def _journal_single(path: Path, n: int) -> float:
    async with journal.open_writer(path, key=KEY) as writer:
        start = time.perf_counter()
        for i in range(n):
            await writer.append(_event(i), durable=True)
        elapsed = time.perf_counter() - start
    return n / elapsed


async def _journal_group(path: Path, n: int) -> tuple[float, journal.WriterStats]:
    per_writer = n // WRITERS
    async with journal.open_writer(path, key=KEY) as writer:

        async def one(w: int) -> None:
            for k in range(per_writer):
                await writer.append(_event(w * per_writer + k), durable=True)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for w in range(WRITERS):
                nursery.start_soon(one, w)
        elapsed = time.perf_counter() - start
        stats = writer.stats
    return per_writer * WRITERS / elapsed, stats


def _raw_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"CREATE TABLE events ({', '.join(journal.COLUMNS)}, PRIMARY KEY (seq))")
    return conn


def _raw_write(path: Path, n: int, per_commit: int) -> float:
    """The same events, encoded and hash-chained, inserted with per_commit rows a transaction."""
    conn = _raw_connect(path)
    insert = f"INSERT INTO events VALUES ({', '.join('?' * len(journal.COLUMNS))})"
    encode = msgspec.json.Encoder(order="sorted").encode
    prev = journal.GENESIS_HASH
    start = time.perf_counter()
    for at in range(0, n, per_commit):
        batch = []
        for i in range(at, min(at + per_commit, n)):
            event = _event(i)
            payload = encode(msgspec.to_builtins(event.payload)).decode()
            row = (
                i + 1,
                "j",
                event.session_id,
                event.call_id,
                time.monotonic_ns(),
                "ts",
                "call_received",
                1,
                event.mcp_method_name,
                event.gen_ai_tool_name,
                str(i),
                None,
                None,
                None,
                payload,
                prev,
                "",
            )
            digest = journal.row_hash(row)
            batch.append((*row[:16], digest))
            prev = digest
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, batch)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def _plain_scan(path: Path) -> float:
    """A plain sqlite3 scan recomputing every hash with the documented recipe."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    start = time.perf_counter()
    count = 0
    # The canonical columns by name (the cheapest read: not the leaf columns of schema 10).
    for row in conn.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events ORDER BY seq"):
        cols = {k: row[k] for k in row.keys() if k not in ("hash", "payload")}
        cols["payload"] = "\0"
        text = json.dumps(cols, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        text = text.replace('"payload":"\\u0000"', '"payload":' + row["payload"], 1)
        assert hashlib.sha256(text.encode()).hexdigest() == row["hash"]
        count += 1
    elapsed = time.perf_counter() - start
    conn.close()
    return count / elapsed


def _timed(fn: Callable[[], journal.VerifyReport]) -> tuple[float, journal.VerifyReport]:
    start = time.perf_counter()
    report = fn()
    return time.perf_counter() - start, report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.bench_journal",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--events", type=int, default=16_000, help="events for group commit")
    parser.add_argument("--single", type=int, default=1_500, help="events for single commits")
    parser.add_argument("--dir", type=Path, default=None, help="directory for the files")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        j_single = trio.run(_journal_single, base / "single.db", args.single)
        r_single = _raw_write(base / "raw-single.db", args.single, per_commit=1)
        j_group, stats = trio.run(_journal_group, base / "group.db", args.events)
        r_group = _raw_write(base / "raw-group.db", args.events, per_commit=WRITERS)
        r_scan = _plain_scan(base / "group.db")
        seconds, report = _timed(lambda: journal.verify(base / "group.db", key=KEY))
        assert report.ok, report.findings[:3]
        j_scan = report.events / seconds
    rows = [
        ("single-event durable commits", j_single, r_single),
        (f"group commit, {WRITERS} trio writers", j_group, r_group),
        ("verify: hash chain recomputed", j_scan, r_scan),
    ]
    print(f"{'case':<34} {'journal ev/s':>13} {'raw sqlite3 ev/s':>17} {'ratio':>6}")
    for name, ours, raw in rows:
        print(f"{name:<34} {ours:>13,.0f} {raw:>17,.0f} {ours / raw:>6.2f}")
    print(
        f"group commit: {stats.committed:,} events in {stats.commits:,} transactions "
        f"(mean {stats.committed / max(stats.commits, 1):.1f}, largest {stats.largest_batch}); "
        f"raw group = {WRITERS} rows per transaction; raw verify = the documented json recipe"
    )


if __name__ == "__main__":
    main()
