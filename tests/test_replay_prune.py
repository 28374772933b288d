"""``prune`` against a real PostgreSQL fleet store: only segments the store holds and a witness
cosigned.

A journal rolled over into segments is shipped (``replay.ship``), cosigned by the store's
witness (``cosign``), written on, and pruned: only whole, closed segments older than the given
age whose every event the store holds (same hash, same leaf) and whose end a cosignature under
the named witness key covers go, oldest first, and only while ``verify --witness`` finds
nothing; the prune is a ``segments_pruned`` event in the live segment, and ``verify`` still
passes from the new start.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from jsonschema import Draft202012Validator

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import SegmentsPruned
from agentteam_task_bridge.replay._cosign import WitnessKey
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from tests.journal_helpers import KEY, VKEY
from tests.journal_helpers.segmented import files_of, first_row, write_segmented
from tests.replay_helpers import replay_cli

LATER = datetime.now(UTC) + timedelta(days=40)  # every segment written now is 40 days old then
WITNESS = WitnessKey("witness.example/prune", bytes(range(7, 39)))


def prune(path: Path, url: str, **options: object) -> replay.PruneReport:
    options = {
        "older_than_days": 30,
        "key": KEY,
        "now": LATER,
        "witness_keys": [WITNESS.verifier],
        **options,
    }
    return replay.prune([path], url, **options)  # type: ignore[arg-type]


def cosign(url: str, key: WitnessKey = WITNESS) -> None:
    """The store's witness cosigns what was shipped (as the owner here: a member of every
    role; tests/test_fleet_cosign.py runs it as a witness login)."""
    assert cosign_once(url, key).ok


def verify_ok(path: Path) -> replay.JournalReport:
    result = replay.verify([path], trusted=[VKEY])
    assert result.ok, result.findings
    (report,) = result.journals
    return report


def prune_events(path: Path) -> list[SegmentsPruned]:
    with replay.open_journals([path]) as journals:
        return [r.payload for r in journals.records() if isinstance(r.payload, SegmentsPruned)]


def test_prune_removes_only_segments_the_store_holds_and_witnessed(
    pg_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 40)
    shipped_files = files_of(path)
    assert len(shipped_files) >= 4
    assert replay.ship([path], pg_url).ok
    cosign(pg_url)
    write_segmented(path, 40, start=100)  # written after the ship: not in the store
    before = files_of(path)
    jid = first_row(before[-1])[1]
    held = replay.contiguous_seq(pg_url, jid)
    witnessed = replay.witnessed_checkpoint(pg_url, jid)
    assert witnessed is not None and witnessed[0] == held

    # Too young, or a dry run: nothing goes.
    assert prune(path, pg_url, now=datetime.now(UTC)).removed == 0
    dry = prune(path, pg_url, dry_run=True)
    assert dry.removed == len(shipped_files) - 1 and files_of(path) == before

    report = prune(path, pg_url)
    (pruned,) = report.journals
    # Every segment that ended before the ship's head went; the one live at the ship (its end
    # not in the store) and every later one stayed.
    gone = [f for f in before if not f.exists()]
    assert gone == shipped_files[:-1]
    assert [s.file for s in pruned.removed] == [f.name for f in gone]
    assert all(s.last_seq <= held for s in pruned.removed)
    assert "not all of" in pruned.stopped and pruned.bytes_removed > 0
    assert files_of(path) == before[len(gone) :]
    # Journaled in the live segment, before the files went; verify accepts the pruned start.
    (event,) = prune_events(path)
    assert [s.file for s in event.segments] == [f.name for f in gone]
    assert (event.held_seq, event.witnessed_seq) == (held, witnessed[0])
    assert event.store == report.store  # the URL as printed: never a password
    report_after = verify_ok(path)
    assert report_after.pruned_through == event.segments[-1].last_seq
    # The CLI agrees (the journal's first file name still stands for what is left).
    done = replay_cli("verify", path, "--trusted-key", VKEY.to_text())
    assert done.returncode == 0, done.stdout + done.stderr

    # Nothing more until the rest is shipped; then the next segments go, journaled again.
    assert prune(path, pg_url).removed == 0
    assert replay.ship([path], pg_url).ok
    assert prune(path, pg_url).removed == 0, "shipped, not yet cosigned: nothing goes"
    cosign(pg_url)
    again = prune(path, pg_url)
    assert again.removed >= 1
    assert files_of(path)[-1] == before[-1]  # never the live segment
    assert len(prune_events(path)) >= 2
    verify_ok(path)


def test_prune_skips_a_journal_a_live_session_holds(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 30)
    assert replay.ship([path], pg_url).ok
    cosign(pg_url)
    before = files_of(path)
    with journal.open_sync_writer(path, key=KEY):  # a live session
        report = prune(path, pg_url)
    assert report.removed == 0 and "in use" in report.journals[0].stopped
    assert files_of(path) == before


def test_prune_removes_nothing_a_store_never_received(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 30)
    before = files_of(path)
    report = prune(path, pg_url)
    assert report.removed == 0
    assert report.journals[0].held_seq == 0 and report.journals[0].witnessed_seq is None
    assert files_of(path) == before
    assert prune_events(path) == []


def test_the_prune_command_over_a_pool(pg_url: str, tmp_path: Path) -> None:
    """`agentteam-replay prune DIR --shipped-to URL --older-than DAYS`, with this machine's key
    (as the bridge signs), then `verify DIR` passes."""
    config = tmp_path / "config"
    key_file = config / "agentteam-bridge" / "journal-signing.key"
    key_file.parent.mkdir(parents=True, mode=0o700)
    signer = journal.load_key(key_file)
    pool = tmp_path / "journals"
    pool.mkdir(mode=0o700)
    write_segmented(pool / "journal-1.db", 30, key=key_file)
    write_segmented(pool / "journal-2.db", 5, key=key_file)  # one segment: nothing to prune
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    shipped = replay_cli("ship", pool, "--to", pg_url, "--json", env=env)
    assert shipped.returncode == 0, shipped.stderr
    prune_cmd = ["prune", pool, "--shipped-to", pg_url, "--older-than", "0", "--json"]
    refused = replay_cli(*prune_cmd, env=env)
    assert refused.returncode == 2 and "--witness-key" in refused.stderr
    witness_key = tmp_path / "witness" / "witness.key"
    cosigned = replay_cli("witness", "--from", pg_url, "--key", witness_key, env=env)
    assert cosigned.returncode == 0, cosigned.stderr
    done = replay_cli(*prune_cmd, "--witness-key", witness_key, env=env)
    assert done.returncode == 0, done.stderr
    report = msgspec.json.decode(done.stdout)
    schema = json.loads(
        (Path(__file__).parents[1] / "docs/replay-json/prune.schema.json").read_text()
    )
    assert not list(Draft202012Validator(schema).iter_errors(report))
    removed = {Path(j["journal"]).name: len(j["removed"]) for j in report["journals"]}
    assert removed["journal-1.db"] >= 2 and removed["journal-2.db"] == 0
    assert not (pool / "journal-1.db").exists() and (pool / "journal-2.db").exists()
    done = replay_cli("verify", pool, "--trusted-key", signer.verifier.to_text(), env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prune_removes_nothing_a_rolled_back_journal_wrote_after_the_store_saw_another(
    pg_url: str, tmp_path: Path
) -> None:
    """Snapshot a pool, write, ship and cosign, restore the snapshot, write other events: the
    witness cosigned another history, so nothing goes (not even the segments both share)."""
    pool, snapshot = tmp_path / "pool", tmp_path / "snapshot"
    pool.mkdir()
    path = pool / "journal-1.db"
    write_segmented(path, 20)
    shutil.copytree(pool, snapshot)
    write_segmented(path, 40, start=100)
    assert replay.ship([path], pg_url).ok
    cosign(pg_url)
    shutil.rmtree(pool)
    shutil.copytree(snapshot, pool)  # the rollback
    write_segmented(path, 30, start=500)  # other events at the seqs the store holds
    jid = first_row(files_of(path)[-1])[1]
    local = {}
    for file in files_of(path):
        with journal.open_reader(file) as reader:
            local.update({row[0]: row[16] for row in reader.rows()})
    stored = dict(store_hashes(pg_url, jid))
    assert max(local) < max(stored), "the rolled-back journal is behind the store"
    assert any(stored.get(seq) != digest for seq, digest in local.items())
    before = files_of(path)
    report = prune(path, pg_url, older_than_days=0)
    (pruned,) = report.journals
    assert pruned.removed == [] and files_of(path) == before
    assert pruned.stopped.startswith("witness_"), pruned.stopped
    assert prune_events(path) == []


def test_prune_removes_nothing_without_a_cosignature_by_the_named_witness(
    pg_url: str, tmp_path: Path
) -> None:
    """Shipped and checkpointed, but not cosigned, or cosigned by another witness than the one
    named: nothing goes. Without any witness key, prune refuses to run."""
    path = tmp_path / "journal-1.db"
    write_segmented(path, 30)
    assert replay.ship([path], pg_url).ok
    before = files_of(path)
    assert replay.witnessed_checkpoint(pg_url, first_row(before[-1])[1]) is not None
    (uncosigned,) = prune(path, pg_url, older_than_days=0).journals
    assert uncosigned.removed == [] and "witness_uncosigned" in uncosigned.stopped
    cosign(pg_url, WitnessKey("witness.example/prune", bytes(range(50, 82))))  # another key
    (other,) = prune(path, pg_url, older_than_days=0).journals
    assert other.removed == [] and "witness_uncosigned" in other.stopped
    with pytest.raises(replay.ReplayInputError, match="witness key"):
        prune(path, pg_url, witness_keys=[])
    assert files_of(path) == before and prune_events(path) == []
    cosign(pg_url)  # the named witness: now the closed segments go
    assert prune(path, pg_url, older_than_days=0).removed >= 1


def store_hashes(url: str, journal_id: str) -> list[tuple[int, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, hash FROM agentteam.events WHERE journal_id = %s ORDER BY seq",
            (journal_id,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]
