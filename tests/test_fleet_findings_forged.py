"""A shipping login's findings are its word, bounded, and the reports say whose word it is.

Any shipping login may record a finding about any journal id (a copy of someone's journal that
the store refused is worth knowing), and ``report --from`` lists the store's findings in its
verdict. A login posted findings of any rule, size and number about every journal of the fleet,
and the page listed them as the store's own. Now each is bounded (the rule's shape, its texts'
lengths, one row per distinct finding of a login, MAX_FINDINGS_PER_LOGIN rows a login) and the
page names the login that reported it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import replay
from agentteam_task_bridge.replay._fleet_ingest import MAX_FINDING_TEXT, MAX_FINDINGS_PER_LOGIN
from agentteam_task_bridge.replay._fleet_report import report_from

from .fleet_helpers import write_fleet_journal

RECORD = "SELECT agentteam.record_finding(%s, %s, %s, %s, %s)"


def _rows(pg_url: str, who: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(
            "SELECT journal_id, seq, rule, length(detail), length(source) FROM agentteam.findings"
            " WHERE reported_by = %s ORDER BY id",
            (who,),
        ).fetchall()


def test_a_finding_is_bounded_and_named_with_its_reporter(
    pg_url: str, shipping_login: Callable[[], tuple[str, str]], tmp_path: Path
) -> None:
    honest = tmp_path / "honest.db"
    victim = write_fleet_journal(honest, 1, 3)
    assert replay.ship([honest], pg_url).ok
    mallory, url = shipping_login()
    with psycopg.connect(url, autocommit=True) as conn:
        for rule, journal_id in [
            ("Fork!", victim),
            ("fork; DROP TABLE x", victim),
            ("", victim),
            ("a" * 65, victim),
            ("fork", ""),
            ("fork", "j" * 1025),
        ]:
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                conn.execute(RECORD, (journal_id, 1, rule, "d", None))
            assert caught.value.diag.message_detail == "finding_malformed", (rule, journal_id)
        huge = "x" * 1_000_000
        for _ in range(50):  # the same finding, again and again: one row
            conn.execute(RECORD, (victim, 7, "fork", huge, huge))
    assert _rows(pg_url, mallory) == [(victim, 7, "fork", MAX_FINDING_TEXT, MAX_FINDING_TEXT)]
    verdict = report_from(pg_url).verify
    assert not verdict.ok
    [shown] = verdict.findings
    assert shown.rule == "fork" and shown.detail.endswith(f" (reported by {mallory})")
    assert len(shown.detail) < MAX_FINDING_TEXT + 100


def test_a_login_records_at_most_its_share_of_findings(
    pg_url: str, shipping_login: Callable[[], tuple[str, str]]
) -> None:
    mallory, url = shipping_login()
    other, other_url = shipping_login()
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                RECORD, [(f"j{i % 7}", i, "fork", "d", None) for i in range(MAX_FINDINGS_PER_LOGIN)]
            )
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(RECORD, ("j-new", 1, "fork", "d", None))
        assert caught.value.diag.message_detail == "findings_capped"
        conn.execute(RECORD, ("j1", 1, "fork", "d", None))  # a repeat is no new row: taken
    with psycopg.connect(other_url, autocommit=True) as conn:
        conn.execute(RECORD, ("j-new", 1, "fork", "d", None))  # another login's share is its own
    assert len(_rows(pg_url, mallory)) == MAX_FINDINGS_PER_LOGIN
    assert len(_rows(pg_url, other)) == 1


def test_sessions_whose_snapshot_predates_the_lock_cannot_pass_the_findings_cap(
    pg_url: str, shipping_login: Callable[[], tuple[str, str]]
) -> None:
    """attack9: REPEATABLE READ sessions counted the login's findings in a snapshot taken before
    its lock, so each added its own up to the cap (four sessions at one place short of it: four
    rows past it). A finding is recorded only in a READ COMMITTED transaction."""
    mallory, url = shipping_login()
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            RECORD, [(f"j{i}", i, "fork", "d", None) for i in range(MAX_FINDINGS_PER_LOGIN - 1)]
        )
    go = threading.Barrier(4)
    refused: list[str | None] = []

    def race(seq: int) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1")  # the snapshot, before any other session records
            go.wait()
            try:
                conn.execute(RECORD, ("j-race", seq, "fork", "d", None))
                conn.commit()
            except psycopg.errors.CheckViolation as exc:
                refused.append(exc.diag.message_detail)

    threads = [threading.Thread(target=race, args=(seq,)) for seq in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(_rows(pg_url, mallory)) <= MAX_FINDINGS_PER_LOGIN
    assert refused == ["findings_capped"] * 4
    with psycopg.connect(url, autocommit=True) as conn:  # READ COMMITTED: the last place
        conn.execute(RECORD, ("j-race", 9, "fork", "d", None))
    assert len(_rows(pg_url, mallory)) == MAX_FINDINGS_PER_LOGIN
