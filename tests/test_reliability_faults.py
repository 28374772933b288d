"""Upstream faults injected by the runtime: classification, retryability, no duplicate effect."""

from __future__ import annotations

from pathlib import Path

from tools.reliability import faults
from tools.reliability.audit import audit_journal
from tools.reliability.stand import MARKER, open_stand


async def test_every_upstream_fault_is_classified_and_no_mutation_is_repeated(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.db"
    async with open_stand(tmp_path) as stand:
        timeout = ("--upstream-timeout", str(faults.UPSTREAM_TIMEOUT_S))
        async with stand.bridge(journal, *timeout, client_name="faults") as raw:
            outcomes = await faults.run_scenarios(stand, raw, "fault")
            storm = await faults.storm_401(stand, raw)
        await faults.check_effects_and_attempts(outcomes, journal, stand.runtime_db, "faults")
        assert stand.faults_fired >= len(faults.SCENARIOS) + 16
        report = audit_journal(
            journal,
            answers={"faults": raw.transcript.answers},
            runtime_db=stand.runtime_db,
            marker=MARKER,
        )
    problems = {o.scenario.name: o.problems for o in outcomes if o.problems}
    assert problems == {}
    assert storm == []
    assert report.ok, report.findings
    assert report.effects_checked == sum(s.effects for s in faults.SCENARIOS)
