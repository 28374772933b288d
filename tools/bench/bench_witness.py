"""What the store's witness costs: cosigning a fleet, and ``verify`` checking against it.

Run: ``python -m tools.bench.bench_witness [--journals J] [--events N] [--url URL] [--keep DIR]``
(default 10 journals of 100,000 events; ``--quick`` 10 of 10,000; ``--keep`` as
``bench_fleet``'s). The journals are ``bench_fleet``'s, shipped into an empty store by its
owner; a login in the witness role then cosigns (``cosign_once``, what ``agentteam-replay
witness`` runs): first over every journal (each one's consistency from nothing, its tree
recomputed from the store's stored hashes), then again with nothing new (one tick of
``witness --follow`` on a quiet fleet). Last, the files' ``verify`` beside the part that
``verify --witness URL --witness-key VKEY`` adds (:func:`replay._fleet_witness.witness_findings`:
the local trees at the cosigned sizes against the cosigned roots, and the store's rows against
the files). Then ``--quiet`` (10,000) journals more are registered, and three ticks timed:
``--all``, one with nothing new, one with 3 new checkpoints (the journals each visits said).
Printed: seconds and events per second of each, and the witness check's share of
``verify`` (its time over the local verify's, one run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._cosign import WitnessKey
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from agentteam_task_bridge.replay._fleet_witness import witness_findings

from .bench_fleet import cluster_and_journals
from .bench_replay import KEY

_KEY = WitnessKey("bench.example/witness", bytes(range(100, 132)))
_LOGIN = "bench_witness"


def _row(case: str, seconds: float, events: int, ratio: str = "") -> None:
    print(f"{case:<58} {seconds:8.2f} {events / seconds:>10,.0f} {ratio:>8}", flush=True)


def run(store: str, paths: list[Path], events: int, quiet: int = 10_000) -> None:
    """Ship ``paths`` into ``store`` (its owner's URL), then time the witness's parts; then
    with ``quiet`` more journals registered."""
    import psycopg

    assert replay.ship(paths, store).ok
    with psycopg.connect(store, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {_LOGIN} LOGIN IN ROLE agentteam_witness")
    witness = store.replace("://postgres@", f"://{_LOGIN}@", 1)
    print(f"{'case':<58} {'seconds':>8} {'events/s':>10} {'ratio':>8}", flush=True)
    started = time.perf_counter()
    first = cosign_once(witness, _KEY)
    cosign_s = time.perf_counter() - started
    assert [j.outcome for j in first.journals] == ["cosigned"] * len(paths), first
    _row(f"witness: first cosignature of {len(paths)} journals", cosign_s, events)
    started = time.perf_counter()
    again = cosign_once(witness, _KEY)
    tick_s = time.perf_counter() - started
    assert again.journals == [], again
    _row("witness: a tick with nothing new (--follow)", tick_s, events)
    started = time.perf_counter()
    verified = replay.verify(paths, key=KEY)
    verify_s = time.perf_counter() - started
    assert verified.ok, verified
    _row("verify over the files", verify_s, events)
    started = time.perf_counter()
    found = witness_findings(store, paths, witness_keys=[_KEY.verifier])
    check_s = time.perf_counter() - started
    assert found == [], found
    ratio = f"{check_s / verify_s:.2f}x"
    _row("verify --witness-key's check of the cosignatures", check_s, events, ratio)
    _quiet_ticks(store, witness, len(paths), quiet)


def _quiet_ticks(store: str, witness: str, shipped: int, quiet: int) -> None:
    """``quiet`` more journals registered, each with a checkpoint (the owner's rows, not
    signed: the witness refuses each it visits, checkpoint_unverified); then the ticks timed:
    ``--all`` (every journal, as each tick did before schema 8), one with nothing new, one with
    3 new checkpoints."""
    import psycopg

    if not quiet:
        return
    with psycopg.connect(store, autocommit=True) as owner, owner.transaction():
        for table, columns, values in (
            ("journals", "journal_id", "'quiet-' || i"),
            ("heads", "journal_id, seq, hash", "'quiet-' || i, 1, repeat('a', 64)"),
            (
                "checkpoints",
                "journal_id, seq, head_hash, ts_wall, key_id, signature",
                "'quiet-' || i, 1, repeat('a', 64), '', 'k+1', 's'",
            ),
        ):
            owner.execute(
                f"INSERT INTO agentteam.{table} ({columns})"
                f" SELECT {values} FROM generate_series(1, %s) i",
                (quiet,),
            )
    total = shipped + quiet
    for case, every, expected in (
        (f"witness --all over {total:,} journals", True, total),
        (f"witness: a tick with nothing new, {total:,} journals", False, 0),
        (f"witness: a tick with 3 new checkpoints, {total:,} journals", False, 3),
    ):
        if expected == 3:
            with psycopg.connect(store, autocommit=True) as owner:
                owner.execute(
                    "INSERT INTO agentteam.checkpoints"
                    " (journal_id, seq, head_hash, ts_wall, key_id, signature)"
                    " SELECT 'quiet-' || i, 2, repeat('a', 64), '', 'k+1', 's'"
                    " FROM generate_series(1, 3) i"
                )
        started = time.perf_counter()
        done = cosign_once(witness, _KEY, every=every)
        seconds = time.perf_counter() - started
        assert len(done.journals) == expected, (case, len(done.journals))
        print(f"{case:<58} {seconds:8.3f} s, {len(done.journals):,} visited", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.bench_witness",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--journals", type=int, default=10)
    parser.add_argument("--events", type=int, default=100_000, help="per journal")
    parser.add_argument("--quick", action="store_true", help="10 journals of 10,000 events")
    parser.add_argument("--url", help="a PostgreSQL server to use (a database is created on it)")
    parser.add_argument("--keep", type=Path, default=None, help="as bench_fleet's --keep")
    parser.add_argument(
        "--quiet", type=int, default=10_000, help="journals registered for the last ticks"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    journals, per = (10, 10_000) if args.quick else (args.journals, args.events)
    with cluster_and_journals(args.url, args.keep, journals, per) as (cluster, paths, events):
        run(cluster.create_database("witness"), paths, events, args.quiet)


if __name__ == "__main__":
    main()
