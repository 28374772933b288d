"""Where the fleet store's checked ingest spends a batch: each part timed apart, in SQL.

Run: ``python -m tools.bench.bench_ingest [--journals J] [--events N] [--repeat R] [--url URL]``
(default 2 journals of 10,000 events, 5 repeats). The journals are ``bench_fleet``'s; they are
shipped into an empty store, then one batch's worth of one journal's events (seq 5,001 to
10,000, ``ship``'s batch) is put through each part of ``agentteam.ingest`` alone: the chain
hash (the canonical text rebuilt, ``sha256()``), the v2 leaf hash, the salted payload digest,
a ``jsonb`` parse of every payload, the call lines' fold (as committed, and with one of its
parts taken out, to show what that part costs), the idempotency state's fold of the batch's
calls (``fold_idem``, the journal's state before the batch folded first), and the
``INSERT ... SELECT`` into a table of the events' columns in several shapes (plain; partitioned
with the key; with each index; with the ``jsonb`` column the store had before issue 25), beside
a client's ``COPY`` of the same rows into a plain table. Printed: the fastest of the repeats
(and every repeat) in ms per batch, and the fastest in CPU time of the server's process when
the server runs on this machine (on a loaded machine the steadier figure); the parts are
measured in one session, one after another, so their ratios hold within a run.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._fleet_calls import fold_sql
from agentteam_task_bridge.replay._fleet_ingest import _ARGUMENTS, _BATCH_HASH, _LEAF
from agentteam_task_bridge.replay._fleet_store import SESSION_DOC, SESSION_STARTED_OF_CALL

from .bench_fleet import cluster_and_journals

_COLUMNS = (
    "e.session_id, e.call_id, e.ts_mono_ns, e.ts_wall, e.kind, e.kind_version,"
    " e.mcp_method_name, e.gen_ai_tool_name, e.jsonrpc_request_id,"
    " e.http_response_status_code, e.error_type, e.duration_ms"
)
_DOC = "agentteam.payload_doc(e.payload) AS doc"
_ENVELOPE = ", ".join(f"e.{name.strip()}" for name in _ARGUMENTS.split(","))
# The shapes of the INSERT's target: (primary key, indexes, the jsonb column of schema 3).
_SHAPES: dict[str, tuple[bool, tuple[str, ...], bool]] = {
    "INSERT: plain table (no key, no index)": (False, (), False),
    "INSERT: partitioned, key": (True, (), False),
    "INSERT: + events_call": (True, ("call",), False),
    "INSERT: + events_call + events_session": (True, ("call", "session"), False),
    "INSERT: + events_call + events_session + events_deprecated (the store now)": (
        True,
        ("call", "session", "deprecated"),
        False,
    ),
    "INSERT: + events_call + (kind, journal_id) (before)": (True, ("call", "kind"), False),
    "INSERT: + events_call + (kind, journal_id) + jsonb doc (before)": (
        True,
        ("call", "kind"),
        True,
    ),
}
_INDEXES = {
    "call": "CREATE INDEX ON t (journal_id, call_id, seq)",
    "session": "CREATE INDEX ON t (journal_id, session_id, kind, seq) WHERE call_id IS NULL",
    "deprecated": "CREATE INDEX ON t (journal_id, seq) WHERE kind = 'deprecated_usage'",
    "kind": "CREATE INDEX ON t (kind, journal_id)",
}


def parts(scope: str) -> dict[str, str]:
    """The ingest's parts as queries over the batch ``scope`` selects (every output read)."""
    fold = fold_sql(scope)
    rows = f"FROM agentteam.events e WHERE {scope}"
    queries = {
        "scan the batch": f"SELECT count(length(e.payload)) {rows}",
        "chain hash (canonical text, sha256)": (
            "SELECT count(encode(sha256(convert_to(agentteam.canonical(e.journal_id, e.seq,"
            f" {_COLUMNS}, e.payload, e.prev_hash), 'UTF8')), 'hex')) {rows}"
        ),
        "leaf hash (v2)": (
            "SELECT count(sha256('\\x00'::bytea || convert_to(agentteam.leaf(e.journal_id,"
            f" e.seq, {_COLUMNS}, e.payload_sha256), 'UTF8'))) {rows}"
        ),
        "chain + leaf hash in one pass (shared envelope text, as the ingest)": (
            f"SELECT count({_BATCH_HASH}), count({_LEAF}) FROM (SELECT e.*,"
            f" agentteam.image_head({_ENVELOPE}) AS image_head,"
            f" agentteam.image_tail({_ENVELOPE}) AS image_tail {rows} OFFSET 0) r"
        ),
        "payload digest sha256(salt || payload)": (
            "SELECT count(encode(sha256(decode(e.salt, 'hex') || convert_to(e.payload,"
            f" 'UTF8')), 'hex')) {rows}"
        ),
        "jsonb parse of every payload": f"SELECT count(agentteam.payload_doc(e.payload)) {rows}",
        "call lines' fold (as committed)": fold,
        "fold, no payload parsed": fold.replace(_DOC, "NULL::jsonb AS doc"),
        "fold, aggregates unordered": re.sub(r" ORDER BY seq( DESC)?", "", fold),
        "fold, no session lookup": fold.replace(SESSION_STARTED_OF_CALL, "NULL::bigint").replace(
            SESSION_DOC.format(s="st"), "NULL::jsonb"
        ),
    }
    return {
        name: sql
        if name.startswith(("scan", "chain", "leaf", "payload", "jsonb"))
        # every column of every line read, so the planner drops none of the fold's work
        else f"SELECT sum(length(f::text)) FROM ({sql}) f"
        for name, sql in queries.items()
    }


def _shape(conn: Any, key: bool, indexes: tuple[str, ...], doc: bool) -> None:
    conn.execute("DROP TABLE IF EXISTS t")
    if not key:
        conn.execute("CREATE TABLE t (LIKE agentteam.events)")
        return
    generated = (
        ", doc jsonb GENERATED ALWAYS AS (agentteam.payload_doc(payload)) STORED" if doc else ""
    )
    conn.execute(f"CREATE TABLE t (LIKE agentteam.events{generated}) PARTITION BY RANGE (ts)")
    conn.execute("CREATE TABLE t1 PARTITION OF t FOR VALUES FROM ('2000-01-01') TO ('2026-12-01')")
    conn.execute("CREATE TABLE t2 PARTITION OF t FOR VALUES FROM ('2026-12-01') TO ('2200-01-01')")
    conn.execute("ALTER TABLE t ADD PRIMARY KEY (journal_id, seq, ts)")
    for name in indexes:
        conn.execute(_INDEXES[name])


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds the server process ``pid`` has run (Linux, a server on this machine)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def measure(url: str, repeat: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds of each part, per repeat, on the store at ``url`` (already shipped into): wall
    time, and the CPU time of the session's server process when it runs here (else empty). On
    a loaded machine the CPU time is the steadier figure; neither counts the client's side."""
    import psycopg

    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = int(row[0])

        def timed(name: str, run: Any) -> None:
            before = _backend_cpu(pid)
            start = time.perf_counter()
            run()
            times.setdefault(name, []).append(time.perf_counter() - start)
            after = _backend_cpu(pid)
            if before is not None and after is not None:
                cpu.setdefault(name, []).append(after - before)

        row = conn.execute("SELECT min(journal_id) FROM agentteam.journals").fetchone()
        assert row is not None
        jid = str(row[0])
        scope = f"e.journal_id = '{jid}' AND e.seq BETWEEN 5001 AND 10000"
        conn.execute("SET extra_float_digits = 1")  # as the ingest runs
        conn.execute(f"CREATE TEMP TABLE batch AS SELECT * FROM agentteam.events e WHERE {scope}")
        names = ", ".join(
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'batch'::regclass"
                " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            )
        )
        rows = conn.execute(f"SELECT {names} FROM batch").fetchall()
        for _ in range(repeat):
            for name, sql in parts(scope).items():
                timed(name, lambda sql=sql: conn.execute(sql).fetchall())
            for name, (key, indexes, doc) in _SHAPES.items():
                _shape(conn, key, indexes, doc)
                timed(
                    name, lambda: conn.execute(f"INSERT INTO t ({names}) SELECT {names} FROM batch")
                )
            _shape(conn, False, (), False)
            # The idempotency state's fold of the batch's calls (schema 7), the journal's state
            # first folded up to the batch (untimed), all of it rolled back.
            with conn.transaction(force_rollback=True):
                conn.execute("SELECT agentteam.fold_idem(%s, 0, 5000)", (jid,))
                timed(
                    "idempotency state's fold (fold_idem, the batch's calls)",
                    lambda: conn.execute("SELECT agentteam.fold_idem(%s, 5001, 10000)", (jid,)),
                )

            def copy() -> None:
                with conn.cursor() as cur, cur.copy(f"COPY t ({names}) FROM STDIN") as out:
                    for r in rows:
                        out.write_row(r)

            timed("COPY of the same rows into a plain table (client)", copy)
        conn.execute("DROP TABLE t")
    return times, cpu


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.bench_ingest",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--journals", type=int, default=2)
    parser.add_argument("--events", type=int, default=10_000, help="per journal (>= 10,000)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--url", help="a PostgreSQL server to use (a database is created on it)")
    parser.add_argument("--keep", type=Path, default=None, help="as bench_fleet's --keep")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with cluster_and_journals(args.url, args.keep, args.journals, args.events) as found:
        cluster, paths, _ = found
        store = cluster.create_database("ingest")
        assert replay.ship(paths[:2], store).ok
        times, cpu = measure(store, args.repeat)
    print(f"{'part, per 5,000-event batch':<66} {'ms (min)':>9} {'server CPU ms':>14}  repeats")
    for name, seconds in times.items():
        each = ", ".join(f"{s * 1000:.0f}" for s in seconds)
        used = f"{min(cpu[name]) * 1000:14.1f}" if cpu.get(name) else f"{'-':>14}"
        print(f"{name:<66} {min(seconds) * 1000:9.1f} {used}  ({each})", flush=True)


if __name__ == "__main__":
    main()
