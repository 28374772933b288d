"""SIGKILL under concurrent load, seeded and repeated: the journal keeps every promise."""

from __future__ import annotations

from pathlib import Path

from tools.reliability.crash import crash_loop
from tools.reliability.stand import open_stand

SEED = 20251202
KILLS = 4


async def test_sigkill_under_load_leaves_a_journal_that_accounts_for_everything(
    tmp_path: Path,
) -> None:
    async with open_stand(tmp_path) as stand:
        report = await crash_loop(stand, tmp_path / "journal.db", seed=SEED, kills=KILLS)
    audit = report.audit
    assert audit is not None
    assert report.kills == KILLS
    assert audit.ok, audit.findings[:20]
    assert report.answered > 0 and audit.answers_checked >= report.answered
    assert audit.effects_checked > 0  # marked side effects were matched to journaled requests
    assert audit.in_doubt_replay == len(audit.in_doubt)  # replay's verifier agrees
    for drive in report.drives:
        assert drive.protocol_errors == []
