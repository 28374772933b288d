"""A refusal the store does not record is still the ship's refusal; the run goes on.

The shipper records what it refuses through ``agentteam.record_finding``, which keeps none past
a login's MAX_FINDINGS_PER_LOGIN (``findings_capped``) nor for a malformed journal id
(``finding_malformed``): that refusal of the finding stopped the whole ``ship`` run, the
journals after it unshipped, instead of being reported as the journal's refusal.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._fleet_ingest import MAX_FINDINGS_PER_LOGIN

from .fleet_helpers import rewrite_payload, write_fleet_journal
from .replay_helpers import consolidated_copy


def test_a_login_at_its_findings_cap_still_ships_and_reports_what_is_refused(
    mallory: str, tmp_path: Path
) -> None:
    """A refusal the store will not record (the login reported MAX_FINDINGS_PER_LOGIN already)
    is still the ship's refusal, and the journals after it are shipped."""
    with psycopg.connect(mallory, autocommit=True) as conn:
        for n in range(MAX_FINDINGS_PER_LOGIN):
            conn.execute("SELECT agentteam.record_finding('j', %s, 'fork', 'd', 's')", (n,))
    original = tmp_path / "a.db"
    write_fleet_journal(original, 3, 4)
    assert replay.ship([original], mallory).ok
    forked = consolidated_copy(original, tmp_path / "forked.db")
    rewrite_payload(forked, 5, '{"arguments":{"channel":"other"},"meta_keys":[]}')
    other = tmp_path / "b.db"
    other_id = write_fleet_journal(other, 4, 2)
    report = replay.ship([forked, other], mallory)
    refused, shipped = report.journals
    assert refused.refused is not None and refused.refused.rule == "fork"
    assert shipped.journal_id == other_id and shipped.refused is None and shipped.shipped > 0
