"""``report --from`` counts each call's latency in the page's timeline as the local page does:
the server rounds it to microseconds where that is the local ``round(ns / 1e6, 3)``, and sends
the rest (a tie at half a microsecond, a latency past ``MICROS_EXACT``) in nanoseconds."""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_report import MICROS_EXACT, report_from
from agentteam_task_bridge.replay._fleet_store import connect
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import journal_events
from .journal_helpers import KEY
from .pg_cluster import Cluster

# Clock jumps (ns) by the clock read they come at: past the exact range by far, just under
# it (rounded on the server), just over it.
JUMPS = {500: 5 * 10**18, 800: MICROS_EXACT * 1000 - 7_777_777, 900: MICROS_EXACT * 1000 + 1}


def test_the_servers_microseconds_are_the_local_rounding_in_the_exact_range() -> None:
    """Within ``MICROS_EXACT``, a latency that is no tie rounds on the server (``round(ns /
    1000.0)``, numeric: half away from zero) to the microseconds of the local
    ``round(ns / 1e6, 3)``, and back to the same float."""
    rng = random.Random(11)
    top = MICROS_EXACT * 1000
    for ns in [rng.randrange(-top + 1, top) for _ in range(200_000)] + [top - 1, -top + 1, 1]:
        if ns % 1000 == 500:
            continue
        micros = (abs(ns) + 500) // 1000 * (1 if ns >= 0 else -1)
        assert micros / 1000 == round(ns / 1e6, 3), ns
        assert round(micros / 1000 * 1000) == micros, ns


def test_latencies_at_a_half_microsecond_and_past_the_exact_range_are_the_local_ones(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Calls whose bridge time is a tie the local code rounds from nanoseconds, or too large
    for a server-side sum to stay exact, are binned as the local page bins them."""
    steps = itertools.cycle([125, 250, 375, 1_000, 1_000_125, 77_777, 125, 125, 500])
    now, reads = [10**9], itertools.count()

    def clock() -> int:
        now[0] += next(steps)
        read = next(reads)
        if read in JUMPS:  # inside a call: at and past the edge of the exact range
            now[0] += JUMPS[read]
        return now[0]

    path = tmp_path / "clock.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "monotonic_ns", clock)
        with journal.open_sync_writer(path, key=KEY, journal_id="clock-0") as writer:
            for index in range(6):
                writer.append_many(journal_events(index, 40))
    url = pg_cluster.create_database()
    assert replay.ship([path], url).ok
    with connect(url, autocommit=True) as conn:
        ties, huge = conn.execute(
            "SELECT count(*) FILTER (WHERE mod(bridge_ns, 1000) = 500),"
            f" count(*) FILTER (WHERE bridge_ns >= {MICROS_EXACT} * 1000)"
            " FROM agentteam.call_lines"
        ).fetchone()
    assert (ties > 0, huge >= 2) == (True, True), (ties, huge)
    local = replay.report([path], accept_unverified=True)
    stored = report_from(url)
    assert (stored.bucket_seconds, to_json(stored.buckets)) == (
        local.bucket_seconds,
        to_json(local.buckets),
    )
