"""``verify --witness postgresql://...``: a journal cut, rolled back or rewritten after shipping."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_witness import witness_findings

from .fleet_helpers import (
    append_calls,
    consolidated_copy,
    reseal_merkle,
    rewrite_payload,
    split_in_segments,
    truncate_to,
    write_fleet_journal,
)
from .journal_helpers import KEY, VKEY


def rules(url: str, *paths: Path) -> list[tuple[str, int | None]]:
    return [(f.rule, f.seq) for f in witness_findings(url, paths)]


def head(path: Path) -> int:
    with journal.open_reader(path) as reader:
        return reader.head()[0]


def test_an_intact_journal_agrees_with_its_witness(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 1, 5)
    assert replay.ship([path], pg_url).ok
    assert rules(pg_url, path) == []
    append_calls(path, jid, 9, 2)
    assert rules(pg_url, path) == [], "a journal ahead of the store is fine"


def test_truncation_after_shipping_is_caught(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 2, 6)
    assert replay.ship([path], pg_url).ok
    last = head(path)
    cut = consolidated_copy(path, tmp_path / "cut.db")
    truncate_to(cut, last - 4)
    assert rules(pg_url, cut) == [
        ("witness_truncated", last - 3),
        ("witness_checkpoint_beyond", last - 3),
    ]


def test_a_rewritten_history_is_caught_at_its_first_changed_seq(
    pg_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 3, 6)
    assert replay.ship([path], pg_url).ok
    rewritten = consolidated_copy(path, tmp_path / "rewritten.db")
    rewrite_payload(rewritten, 7, '{"arguments":{"channel":"elsewhere"},"meta_keys":[]}')
    assert rules(pg_url, rewritten) == [("witness_rewritten", 7)]


def test_a_rollback_to_an_older_copy_is_caught(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 4, 3)
    older = consolidated_copy(path, tmp_path / "older.db")
    backup = head(older)
    append_calls(path, jid, 20, 3)
    assert replay.ship([path], pg_url).ok
    assert rules(pg_url, older)[0] == ("witness_truncated", backup + 1)
    # rolled back, then written on: the first event after the rollback differs
    continued = tmp_path / "continued.db"
    shutil.copy(older, continued)
    append_calls(continued, jid, 40, 1)
    assert ("witness_rewritten", backup + 1) in rules(pg_url, continued)


def test_a_journal_the_store_never_received_is_not_witnessed(pg_url: str, tmp_path: Path) -> None:
    shipped, other = tmp_path / "a.db", tmp_path / "b.db"
    write_fleet_journal(shipped, 5, 1)
    write_fleet_journal(other, 6, 1)
    assert replay.ship([shipped], pg_url).ok
    assert rules(pg_url, other) == [("witness_unknown", None)]


def test_the_witness_is_a_trusted_key_source(pg_url: str, tmp_path: Path) -> None:
    """A copy on an auditor's machine (no key of its own) verifies against the store's key."""
    path = tmp_path / "a.db"
    write_fleet_journal(path, 8, 3)
    assert replay.ship([path], pg_url).ok
    copy = consolidated_copy(path, tmp_path / "copy.db")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "auditor")}
    cmd = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "verify", str(copy), "--json"]
    alone = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert alone.returncode == 1, "no trusted key: not OK"
    witnessed = subprocess.run(
        [*cmd, "--witness", pg_url], capture_output=True, text=True, timeout=120, env=env
    )
    assert witnessed.returncode in (0, 3), witnessed.stdout + witnessed.stderr
    out = json.loads(witnessed.stdout)
    assert out["ok"] and out["journals"][0]["signatures_checked"] > 0


def test_verify_witness_on_the_command_line(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 7, 4)
    assert replay.ship([path], pg_url).ok
    cut = consolidated_copy(path, tmp_path / "cut.db")
    truncate_to(cut, 5)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentteam_task_bridge.replay._cli",
            "verify",
            str(cut),
            "--witness",
            pg_url,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)["findings"]
    assert {"rule": "witness_truncated", "seq": 6} in [
        {"rule": f["rule"], "seq": f["seq"]} for f in found
    ]


def test_a_journal_in_segments_is_shipped_and_witnessed_as_one(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 11, 8)
    last = head(path)
    first, second = split_in_segments(path, last // 2, tmp_path)
    waiting = replay.ship([second], pg_url)
    assert waiting.ok and waiting.shipped == 0 and waiting.journals[0].waiting
    assert replay.ship([first, second], pg_url).ok
    with journal.open_reader(path) as reader:
        whole = [(row[0], row[16]) for row in reader.rows()]
    assert [(s, h) for s, h in _store(pg_url, jid)] == whole
    assert rules(pg_url, first, second) == []
    assert rules(pg_url, second) == [], "the first segment pruned: the rest still agrees"
    assert rules(pg_url, first) == [
        ("witness_truncated", last // 2 + 1),
        ("witness_checkpoint_beyond", last // 2 + 1),
    ], "only the first segment: the rest is missing"
    rewritten = consolidated_copy(second, tmp_path / "seg2-rewritten.db")
    rewrite_payload(rewritten, last // 2 + 3, '{"arguments":{},"meta_keys":[]}')
    assert rules(pg_url, first, rewritten) == [("witness_rewritten", last // 2 + 3)]


def _store(url: str, journal_id: str) -> list[tuple[int, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, hash FROM agentteam.events WHERE journal_id = %s ORDER BY seq",
            (journal_id,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def test_a_failing_store_is_one_line(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 12, 1)
    cmd = [sys.executable, "-m", "agentteam_task_bridge.replay._cli"]
    for args in (["audit", "--from", pg_url], ["verify", str(path), "--witness", pg_url]):
        done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "failed" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_forged_prune_of_segments_the_store_never_held_is_caught(
    pg_url: str, tmp_path: Path
) -> None:
    from .journal_helpers.segmented import files_of, write_segmented
    from .test_replay_trust_policy import _append_forged

    path = tmp_path / "journal-1.db"
    write_segmented(path, 30)
    assert replay.ship([path], pg_url).ok  # the store holds the journal as it was then
    write_segmented(path, 40, start=100)
    files = files_of(path)
    with journal.open_reader(files[-1]) as reader:
        jid = reader.journal_id
    assert jid is not None
    held = replay.contiguous_seq(pg_url, jid)
    ends = []
    for victim in files[:-2]:  # all but the last two: more than the store ever held
        with journal.open_reader(victim) as reader:
            ends.append((victim.name, reader.segment.first_seq, *reader.head()))
        victim.unlink()
    unheld = {name for name, _, last, _ in ends if last > held}
    assert unheld and len(unheld) < len(ends)
    pruned = journal.SegmentsPruned(
        segments=[
            journal.PrunedSegment(file=f, first_seq=a, last_seq=b, last_hash=h)
            for f, a, b, h in ends
        ],
        store="postgresql://store/fleet",
        held_seq=ends[-1][2],
        witnessed_seq=ends[-1][2],
        witnessed_hash=ends[-1][3],
        older_than_days=30,
    )
    forged = _append_forged(files[-1], pruned)
    found = [f for f in witness_findings(pg_url, [tmp_path]) if f.rule == "witness_prune_unheld"]
    assert {f.seq for f in found} == {forged}
    # Only the segments the store never held are named; those it holds were prunable.
    assert {f.detail.split(" names ")[1].split(" ")[0] for f in found} == unheld


def _fork_leaves(path: Path, target: Path, since_seq: int) -> Path:
    """A copy of the journal with the same events (so the same hash chain) but other leaves
    from `since_seq` on (each salt and payload digest anew), its checkpoints signed anew over
    the new tree by the journal's own key, as an insider holding the machine can: a fork of the
    Merkle log that `verify` alone finds sound."""
    fork = consolidated_copy(path, target)
    reseal_merkle(fork, since_seq)
    conn = sqlite3.connect(fork)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        checkpoints = conn.execute(
            "SELECT id, journal_id, seq, head_hash, ts_wall FROM checkpoints"
        ).fetchall()
        with journal.open_reader(fork) as reader:
            read = journal.files_reader([(reader.segment.first_seq, reader.stored_hash)])
            roots = {seq: journal.tree_hash(seq, read) for _, _, seq, _, _ in checkpoints}
        for row_id, jid, seq, head_hash, ts_wall in checkpoints:
            signed = journal.sign_checkpoint(
                journal.SigningKey("agentteam-bridge/seed", KEY),
                journal_id=jid,
                seq=seq,
                head_hash=head_hash,
                ts_wall=ts_wall,
                root_hash=roots[seq].hex(),
            )
            conn.execute(
                "UPDATE checkpoints SET signature = ?, root_hash = ? WHERE id = ?",
                (signed.signature, signed.root_hash, row_id),
            )
        conn.commit()
    finally:
        conn.close()
    return fork


@pytest.mark.parametrize("since_seq", [1, 7, "last"])
@pytest.mark.parametrize("shipped_first", ["original", "fork"])
def test_a_fork_of_the_merkle_log_under_the_same_chain_is_caught(
    pg_url: str, tmp_path: Path, since_seq: int | str, shipped_first: str
) -> None:
    """Two files of one journal with the same events but other leaves (salts) from some seq on
    (two trees, each signed): whichever is shipped, the other is `witness_root_mismatch` at its
    first other leaf, without a witness key too (the chain alone agrees)."""
    original = tmp_path / "a.db"
    write_fleet_journal(original, 9, 6)
    last = head(original)
    first = last if since_seq == "last" else int(since_seq)
    fork = _fork_leaves(original, tmp_path / "fork.db", first)
    assert replay.verify([fork], trusted=[VKEY]).ok, "a sound journal on its own"
    shipped, other = (original, fork) if shipped_first == "original" else (fork, original)
    report = replay.ship([shipped], pg_url)
    assert report.ok
    assert rules(pg_url, shipped) == []
    assert rules(pg_url, other) == [("witness_root_mismatch", first)]
