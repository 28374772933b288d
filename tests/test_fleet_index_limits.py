"""What a shipping login sends is refused by name, never past what the store's indexes hold.

A btree entry holds at most 2,704 bytes (after compression): a journal id, a session id, a call
id or a kind the journal file holds (the chain hashes any text) of a few thousand incompressible
bytes made the store raise ``program_limit_exceeded`` inside ``register_journal``, the ingest
or ``record_finding``: not a refusal the shipper records, but an error that stopped the whole
``ship`` run, the journals after it unshipped. Now the journal id is at most MAX_JOURNAL_ID
bytes (``journal_id_malformed``, ``finding_malformed``) and a row's indexed texts together at
most MAX_ROW_KEYS bytes (``row_malformed`` with its seq), far beyond what the bridge writes.
A refusal the store does not record (its journal id past the bound, or the login at its cap of
findings) is still the ship's refusal: the run goes on with the other journals.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_ingest import (
    MAX_FINDINGS_PER_LOGIN,
    MAX_JOURNAL_ID,
    MAX_ROW_KEYS,
)
from agentteam_task_bridge.replay._fleet_ship import send_batch

from .fleet_helpers import journal_events, rewrite_payload, write_fleet_journal
from .journal_helpers import KEY
from .replay_helpers import consolidated_copy


def _noise(size: int, alphabet: str, seed: int = 1) -> str:
    """`size` characters drawn at random: text compression cannot shrink it."""
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(size))


LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
WIDE = "".join(chr(c) for c in range(0x1F600, 0x1F650))  # four UTF-8 bytes each


@pytest.mark.parametrize(
    ("journal_id", "held"),
    [
        (_noise(MAX_JOURNAL_ID, LATIN), True),
        (_noise(MAX_JOURNAL_ID // 4, WIDE), True),
        (_noise(MAX_JOURNAL_ID + 1, LATIN), False),
        (_noise(MAX_JOURNAL_ID // 4 + 1, WIDE), False),  # 1,000 characters or so, 4 KB
        (_noise(4000, LATIN), False),
        ("x" * 300_000, False),  # compresses well, still no id
    ],
    ids=["max", "max-wide", "max+1", "wide+1", "4000", "300k"],
)
def test_a_journal_id_past_its_bound_is_refused_by_name(
    mallory: str, journal_id: str, held: bool
) -> None:
    register = "SELECT agentteam.register_journal(%s, NULL, 'x', NULL)"
    finding = "SELECT agentteam.record_finding(%s, NULL, 'fork', 'd', 's')"
    with psycopg.connect(mallory, autocommit=True) as conn:
        if held:
            assert conn.execute(register, (journal_id,)).fetchone() == (0,)
            conn.execute(finding, (journal_id,))
            return
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(register, (journal_id,))
        assert caught.value.diag.message_detail == "journal_id_malformed"
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(finding, (journal_id,))
        assert caught.value.diag.message_detail == "finding_malformed"


def _chain(journal_id: str, texts: list[tuple[str, str, str]]) -> list[tuple[Any, ...]]:
    """A chain-valid v1 journal, one event per (session_id, call_id, kind)."""
    prev, rows = journal.GENESIS_HASH, []
    for seq, (session, call, kind) in enumerate(texts, 1):
        row: list[Any] = [seq, journal_id, session, call, seq, "2026-01-02T03:04:05.000000Z"]
        row += [kind, 1, None, "task_get", None, None, None, None, '{"reason": "x"}', prev, ""]
        row[16] = prev = journal.row_hash(tuple(row))
        rows.append(tuple(row))
    return rows


@pytest.mark.parametrize(
    "long",
    [
        ("s", _noise(MAX_ROW_KEYS, LATIN), "call_received"),
        (_noise(3000, LATIN), "c", "call_received"),
        ("s", "c", _noise(3000, LATIN)),
        (_noise(400, WIDE), "c", "call_received"),  # 1,600 bytes
        (_noise(MAX_ROW_KEYS // 2, LATIN), _noise(MAX_ROW_KEYS // 2, LATIN, 2), "k"),
    ],
    ids=["call", "session", "kind", "session-wide", "together"],
)
def test_a_row_whose_indexed_texts_are_past_their_bound_is_row_malformed(
    mallory: str, long: tuple[str, str, str]
) -> None:
    journal_id = f"m-{uuid.uuid4().hex[:8]}"
    rows = _chain(journal_id, [("s", "c1", "call_received"), long, ("s", "c3", "call_received")])
    with psycopg.connect(mallory, autocommit=True) as conn:
        conn.execute("SELECT agentteam.register_journal(%s, NULL, 'x', NULL)", (journal_id,))
        with pytest.raises(psycopg.errors.CheckViolation) as caught, conn.transaction():
            send_batch(conn, journal_id, rows)
        assert caught.value.diag.message_detail == "row_malformed 2"
        head = conn.execute("SELECT seq FROM agentteam.heads WHERE journal_id = %s", (journal_id,))
        assert head.fetchone() == (0,)


def test_one_journal_past_the_bounds_does_not_stop_the_ship_of_the_others(
    pg_url: str, tmp_path: Path
) -> None:
    honest = tmp_path / "honest.db"
    honest_id = write_fleet_journal(honest, 1, 2)
    hostile = tmp_path / "hostile.db"
    with journal.open_sync_writer(hostile, key=KEY, journal_id=_noise(4000, LATIN)) as writer:
        writer.append_many(journal_events(2, 2))
    report = replay.ship([hostile, honest], pg_url)
    outcome = {j.journal_id == honest_id: j for j in report.journals}
    assert outcome[True].refused is None and outcome[True].shipped > 0
    assert outcome[False].refused is not None
    assert outcome[False].refused.rule == "journal_id_malformed"


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
