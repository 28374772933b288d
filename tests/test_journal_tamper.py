"""Tampering is detected: edits at their seq, deletions, reorders, truncation (by checkpoint)."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentteam_task_bridge import journal

from .journal_helpers import KEY, SESSION, VKEY, write_journal

N = 40


def _events(n: int = N) -> list[journal.Event]:
    return [
        journal.Event(
            session_id=SESSION,
            call_id=f"c{i}",
            gen_ai_tool_name="task_list",
            payload=journal.CallReceived(arguments={"i": i}),
        )
        for i in range(n)
    ]


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, journal.Checkpoint]:
    """A journal of N events and the checkpoint its writer signed on close."""
    path = tmp_path / "j.db"
    writer = write_journal(path, _events(), checkpoint_path=tmp_path / "head.json")
    assert writer.last_checkpoint is not None
    assert writer.last_checkpoint.seq == N
    return path, writer.last_checkpoint


def _tamper(path: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    """What an attacker with file access does: drop the triggers, then edit."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        for statement in statements:
            conn.execute(statement, params if "?" in statement else ())
    finally:
        conn.close()


def _verify(path: Path, **options: Any) -> journal.VerifyReport:
    """Verify trusting the key the journal was written with (the chain is what is tested)."""
    return journal.verify(path, key=KEY, **options)


def _rules(report: journal.VerifyReport) -> list[tuple[int | None, str]]:
    return [(f.seq, f.rule) for f in report.findings]


def test_an_untouched_journal_verifies(written: tuple[Path, journal.Checkpoint]) -> None:
    path, checkpoint = written
    report = journal.verify(path, checkpoint=checkpoint, key=KEY)
    assert report.ok and report.events == N and report.head_seq == N
    assert report.signatures_checked >= 2  # the held one and the stored ones


def test_an_edited_row_is_detected_at_its_exact_seq(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    _tamper(path, """UPDATE events SET payload = '{"arguments":{"i":999}}' WHERE seq = 17""")
    # The chain and the Merkle leaf (its salted payload digest) both see it, at its seq.
    assert _rules(_verify(path)) == [(17, "hash_mismatch"), (17, "payload_digest_mismatch")]


@pytest.mark.parametrize(
    "column_edit",
    [
        "session_id = 'other'",
        "ts_wall = '2020-01-01T00:00:00.000000Z'",
        "kind_version = 1",
        "gen_ai_tool_name = 'task_delete'",
        "duration_ms = 1.5",
        "call_id = NULL",
    ],
)
def test_an_edit_of_any_column_is_detected(
    written: tuple[Path, journal.Checkpoint], column_edit: str
) -> None:
    path, _ = written
    _tamper(path, f"UPDATE events SET {column_edit} WHERE seq = 5")
    findings = _rules(_verify(path))
    if column_edit == "kind_version = 1":  # unchanged value: nothing to find
        assert findings == []
    else:
        assert findings == [(5, "hash_mismatch"), (5, "tree_hash_mismatch")]  # chain, leaf


def test_an_edit_with_a_recomputed_hash_breaks_the_chain_at_the_next_seq(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    conn = sqlite3.connect(path)
    row = list(
        conn.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events WHERE seq = 9").fetchone()
    )
    conn.close()
    row[14] = '{"arguments":{"i":-1}}'
    new_hash = journal.row_hash(tuple(row))
    _tamper(
        path, "UPDATE events SET payload = ?, hash = ? WHERE seq = 9", params=(row[14], new_hash)
    )
    # The leaf still commits to the old payload (v2): the edit shows at its own seq too.
    assert _rules(_verify(path)) == [(9, "payload_digest_mismatch"), (10, "chain_broken")]


def test_a_rewritten_history_is_caught_by_the_signed_checkpoint(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, checkpoint = written
    # The attacker rewrites seq 9 and re-chains everything after it, and drops the stored
    # checkpoints they cannot re-sign: the chain is self-consistent again.
    conn = sqlite3.connect(path)
    rows = [
        list(r)
        for r in conn.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events ORDER BY seq")
    ]
    conn.close()
    rows[8][14] = '{"arguments":{"i":-1}}'
    for i in range(8, len(rows)):
        rows[i][15] = rows[i - 1][16]
        rows[i][16] = journal.row_hash(tuple(rows[i]))
    updates = [
        f"UPDATE events SET payload = '{r[14]}', prev_hash = '{r[15]}', hash = '{r[16]}'"
        f" WHERE seq = {r[0]}"
        for r in rows[8:]
    ]
    _tamper(path, "DELETE FROM checkpoints", *updates)
    # The chain alone cannot tell; the Merkle leaf's salted digest of the payload can.
    assert _rules(_verify(path)) == [(9, "payload_digest_mismatch")]
    report = journal.verify(path, checkpoint=checkpoint, key=KEY)
    assert _rules(report) == [(9, "payload_digest_mismatch"), (N, "checkpoint_hash_mismatch")]


def test_a_deleted_row_is_a_gap_and_a_broken_chain(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    _tamper(path, "DELETE FROM events WHERE seq = 20")
    assert _rules(_verify(path)) == [(21, "sequence_gap"), (21, "chain_broken")]


def test_reordered_rows_are_detected(written: tuple[Path, journal.Checkpoint]) -> None:
    path, _ = written
    # Swap the contents of seq 11 and 12 (keeping each its own hash, seq and prev_hash).
    _tamper(
        path,
        "UPDATE events SET payload = (SELECT payload FROM events WHERE seq = 12),"
        " call_id = 'c11' WHERE seq = 11",
        "UPDATE events SET payload = '{\"arguments\":{\"i\":10}}', call_id = 'c10' WHERE seq = 12",
    )
    # Each row: its chain hash, its payload digest and (call_id moved) its leaf.
    assert _rules(_verify(path)) == [
        (seq, rule)
        for seq in (11, 12)
        for rule in ("hash_mismatch", "payload_digest_mismatch", "tree_hash_mismatch")
    ]


def test_a_truncated_tail_is_detected_against_a_held_checkpoint(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, checkpoint = written
    _tamper(path, "DELETE FROM events WHERE seq > 30", "DELETE FROM checkpoints")
    assert _verify(path).ok  # a clean prefix: nothing inside the file can tell
    report = journal.verify(path, checkpoint=checkpoint, key=KEY)
    assert _rules(report) == [(31, "truncated_before_checkpoint")]


def test_a_truncated_tail_is_detected_by_a_stored_checkpoint_left_behind(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    _tamper(path, "DELETE FROM events WHERE seq > 30")
    assert _rules(_verify(path)) == [(31, "truncated_before_checkpoint")]


def test_a_forged_checkpoint_fails_its_signature(written: tuple[Path, journal.Checkpoint]) -> None:
    path, checkpoint = written
    forged = msgspec.structs.replace(checkpoint, seq=N - 5)
    report = journal.verify(path, checkpoint=forged, key=KEY)
    assert (N - 5, "checkpoint_signature_invalid") in _rules(report)
    other_key = journal.verify(path, checkpoint=checkpoint, key=b"k" * 32)
    assert {f.rule for f in other_key.findings} == {"checkpoint_unverified"}
    assert "not a trusted key" in other_key.findings[0].detail


def test_without_a_trusted_key_signatures_fail_unless_accepted_unverified(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    assert _rules(journal.verify(path)) == [(N, "checkpoint_unverified")]
    assert "no trusted key" in journal.verify(path).findings[0].detail
    lenient = journal.verify(path, accept_unverified=True)
    assert lenient.ok and lenient.signatures_unchecked == 1 and lenient.signatures_checked == 0
    # The key the journal names, trusted only when asked.
    assert journal.verify(path, trust_recorded_keys=True).signatures_checked == 1
    assert journal.verify(path, trusted=[VKEY]).ok


def test_a_checkpoint_of_another_journal_is_refused(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, checkpoint = written
    other = journal.sign_checkpoint(
        journal.SigningKey("agentteam-bridge/seed", KEY),
        journal_id="other",
        seq=1,
        head_hash=checkpoint.head_hash,
        ts_wall=checkpoint.ts_wall,
    )
    assert _rules(journal.verify(path, checkpoint=other, key=KEY)) == [
        (1, "checkpoint_journal_mismatch")
    ]


def test_checkpoints_export_and_import_as_json_with_the_signed_note(
    written: tuple[Path, journal.Checkpoint], tmp_path: Path
) -> None:
    path, checkpoint = written
    exported = tmp_path / "head.json"  # written by the writer (checkpoint_path=)
    assert journal.load_checkpoint(exported) == checkpoint
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    assert journal.Checkpoint.from_json(checkpoint.to_json()) == checkpoint
    fields = msgspec.json.decode(checkpoint.to_json())
    assert set(fields) == {
        "journal_id",
        "seq",
        "head_hash",
        "ts_wall",
        "key_id",
        "signature",
        "root_hash",  # a v2 journal's: the Merkle tree hash the note signs
        "note",
    }
    assert checkpoint.check(VKEY) and checkpoint.key_id == VKEY.key_id
    # The note alone is a checkpoint too (what a witness or another tool holds).
    note = tmp_path / "head.note"
    note.write_text(fields["note"])
    from_note = journal.load_checkpoint(note)
    # Its root line is the tree hash (the chain head is not in the note).
    assert (from_note.seq, from_note.signed_root, from_note.signature) == (
        checkpoint.seq,
        checkpoint.root_hash,
        checkpoint.signature,
    )
    assert journal.verify(path, checkpoint=from_note, trusted=[VKEY]).ok


def test_verification_is_incremental_from_a_trusted_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.append_many(_events(10))
        middle = writer.checkpoint()
        writer.append_many(_events(5))
    report = journal.verify(path, since=middle, key=KEY)
    assert report.ok and report.events == 5 and report.head_seq == 15
    _tamper(path, "UPDATE events SET session_id = 'x' WHERE seq = 3")
    assert _verify(path, since=middle).ok  # before the trusted point: not re-read
    assert _rules(_verify(path)) == [(3, "hash_mismatch"), (3, "tree_hash_mismatch")]


def test_a_chain_verifier_can_be_fed_row_by_row(written: tuple[Path, journal.Checkpoint]) -> None:
    path, _ = written
    with journal.open_reader(path) as reader:
        verifier = journal.ChainVerifier(reader.journal_id)
        for row in reader.rows():
            verifier.feed(row)
    assert verifier.count == N and not verifier.findings
    assert verifier.hash == reader_head(path)


def reader_head(path: Path) -> str:
    with journal.open_reader(path) as reader:
        return reader.head()[1]


def test_a_payload_that_does_not_decode_is_reported(
    written: tuple[Path, journal.Checkpoint],
) -> None:
    path, _ = written
    _tamper(path, "UPDATE events SET payload = '{\"arguments\": 3}' WHERE seq = 2")
    assert _rules(_verify(path)) == [
        (2, "hash_mismatch"),
        (2, "payload_invalid"),
        (2, "payload_digest_mismatch"),
    ]
