"""Load: thousands of mixed calls, 32 in flight over one session; nothing lost, memory flat."""

from __future__ import annotations

from pathlib import Path

from tools.reliability.load import load_run
from tools.reliability.stand import open_stand

CALLS = 2_000
IN_FLIGHT = 32


async def test_thousands_of_concurrent_calls_lose_nothing(tmp_path: Path) -> None:
    async with open_stand(tmp_path) as stand:
        report = await load_run(
            stand, tmp_path / "journal.db", calls=CALLS, in_flight=IN_FLIGHT, seed=7
        )
    stats = report.stats
    assert stats.sent == stats.answered == CALLS
    assert stats.protocol_errors == [] and report.violations == 0
    assert dict(stats.tool_errors) == {}
    assert report.audit.ok, report.audit.findings[:20]
    assert report.audit.answers_checked == CALLS + 1  # and the seeding call
    assert report.lost == 0
    assert report.rss_growth < 0.15, stats.rss_kib
