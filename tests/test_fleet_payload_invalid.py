"""The store takes no payload its readers cannot parse (``payload_invalid``).

The chain hash covers any text, so a shipping login can ship a chain-valid journal whose payload
is not JSON, escapes a lone surrogate, or nests deeper than PostgreSQL's parser goes. Held in
the store, one such row made every report over the fleet that reads it fail, for every journal
(``audit --from``, ``deprecations --from``, ``report --from``). The ingest parses each payload of
a batch as the readers do and refuses the batch at the first that does not parse.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._fleet_report import report_from
from agentteam_task_bridge.replay._fleet_ship import send_batch
from agentteam_task_bridge.replay._report import ReportFilter

from .fleet_helpers import write_fleet_journal

UNREADABLE = {
    "not JSON": "{",
    "a value cut short": '{"reason": "end',
    "an escaped lone surrogate": '{"reason": "\\ud800"}',
    "a low surrogate first": '{"reason": "\\udc00\\ud800"}',
    "nested past the parser's stack": "[" * 100_000 + "]" * 100_000,
}
READABLE = {
    "an escaped U+0000": '{"reason": "a\\u0000b"}',
    "a surrogate pair": '{"reason": "\\ud83d\\ude00"}',
    "nested 500 deep": "[" * 500 + "]" * 500,
    "a scalar": "12",
    "5 MB": '{"reason": "' + "x" * 5_000_000 + '"}',
}
# Events outside a call (what the session and deprecation reports read) and one in a call.
KINDS = [("session_started", None), ("deprecated_usage", None), ("session_ended", "c1")]


def _rows(journal_id: str, payload: str, bad_at: int) -> list[tuple[Any, ...]]:
    """A chain-valid v1 journal of len(KINDS) events, ``payload`` at seq ``bad_at``."""
    prev, rows = journal.GENESIS_HASH, []
    for seq, (kind, call) in enumerate(KINDS, 1):
        text = payload if seq == bad_at else '{"reason": "fine"}'
        row: list[Any] = [seq, journal_id, "s", call, seq, "2026-12-04T10:00:00.000000Z", kind, 1]
        row += [None, None, None, None, None, None, text, prev, ""]
        row[16] = prev = journal.row_hash(tuple(row))
        rows.append(tuple(row))
    return rows


def _reports_work(pg_url: str) -> None:
    """The reports that read payloads outside the call lines, over the whole fleet."""
    reports.audit_from(pg_url)
    reports.deprecations_from(pg_url)
    report_from(pg_url, ReportFilter())


@pytest.mark.parametrize("bad_at", [1, 2, 3])
def test_a_payload_the_store_cannot_parse_is_refused_and_the_reports_go_on(
    pg_url: str, mallory: str, tmp_path: Path, bad_at: int
) -> None:
    honest = tmp_path / "honest.db"
    write_fleet_journal(honest, 1, 2)
    assert replay.ship([honest], pg_url).ok
    with psycopg.connect(mallory, autocommit=True) as conn:
        for what, payload in UNREADABLE.items():
            journal_id = f"m-{uuid.uuid4().hex[:8]}"
            conn.execute("SELECT agentteam.register_journal(%s, NULL, 'x', NULL)", (journal_id,))
            with pytest.raises(psycopg.errors.CheckViolation) as caught, conn.transaction():
                send_batch(conn, journal_id, _rows(journal_id, payload, bad_at))
            assert caught.value.diag.message_detail == f"payload_invalid {bad_at}", what
            held = conn.execute(
                "SELECT seq FROM agentteam.heads WHERE journal_id = %s", (journal_id,)
            ).fetchone()
            assert held == (0,), what
        for what, payload in READABLE.items():
            journal_id = f"m-{uuid.uuid4().hex[:8]}"
            conn.execute("SELECT agentteam.register_journal(%s, NULL, 'x', NULL)", (journal_id,))
            with conn.transaction():
                assert send_batch(conn, journal_id, _rows(journal_id, payload, bad_at)) == 3, what
    _reports_work(pg_url)


def test_a_journal_with_a_text_that_is_not_utf8_is_refused_and_the_run_goes_on(
    pg_url: str, tmp_path: Path
) -> None:
    """sqlite3 refuses to read a text that is not UTF-8: one such row stopped `ship`'s whole run,
    the other journals with it, and its error quoted the text. The reader gives it as bytes:
    that journal is refused at the row (row_malformed), the others ship."""
    paths = [tmp_path / f"j{i}.db" for i in range(3)]
    for i, path in enumerate(paths):
        write_fleet_journal(path, 60 + i, 2)
    conn = sqlite3.connect(paths[1], isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
        conn.execute(f"DROP TRIGGER {name}")
    raw = (b"atk_" + b"Q" * 20 + b"\xff").hex()
    conn.execute(f"UPDATE events SET payload = CAST(X'{raw}' AS TEXT) WHERE seq = 3")
    conn.close()
    shipped = replay.ship(paths, pg_url, jobs=2)
    refused = [j for j in shipped.journals if j.refused is not None]
    assert [j.path for j in refused] == [str(paths[1])]
    finding = refused[0].refused
    assert finding is not None and (finding.seq, finding.rule) == (3, "row_malformed")
    assert "QQQQQQQ" not in finding.detail
    assert all(j.shipped > 0 for j in shipped.journals if j.refused is None)
