"""`verify` takes on trust only what a signature covers (replay._trust, replay._forks): each
attack of someone with write access to the files (sqlite3 after dropping the triggers) fails.

Stripped signatures (`unsigned_history`, `unsigned_tail`), a forged excuse for missing data
(`excuse_unsigned`), two histories under one journal id (`fork`) and a replaced key file
(`key_file_replaced`); and what must still pass: a short unsigned tail, a live session, a
backup copy beside its journal, a key rotation under the key that took over. (A real journal
gap is signed as it is written: test_bridge_journal_degraded verifies one under its key.)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._cli import main

from .fleet_helpers import reseal_merkle, rewrite_payload
from .journal_helpers import KEY, VKEY
from .journal_helpers.segmented import files_of, write_segmented
from .replay_helpers import consolidated_copy, tamper

N = 12  # events, written in one commit: signed on close, at N


def _call(i: int) -> journal.Event:
    return journal.Event(
        session_id="s1",
        call_id=f"c{i}",
        gen_ai_tool_name="task_list",
        payload=journal.CallReceived(arguments={"i": i}),
    )


def _write(path: Path, n: int, key: Any = KEY, first: int = 0, **options: Any) -> None:
    options.setdefault("checkpoint_every", 5)
    with journal.open_sync_writer(path, key=key, **options) as writer:
        writer.append_many([_call(i) for i in range(first, first + n)])


def _verify(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, Any]:
    code = main(["verify", *map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _rules(out: Any) -> list[tuple[int | None, str]]:
    return [(f["seq"], f["rule"]) for f in out["findings"]]


def _strip(path: Path) -> None:
    """Edit a payload, re-chain every hash after it, drop every signature."""
    rewrite_payload(path, 3, '{"arguments":{"i":-1}}')
    reseal_merkle(path, 3)
    tamper(path, "DELETE FROM checkpoints")
    Path(f"{path}.checkpoint.json").unlink(missing_ok=True)


def _append_forged(path: Path, payload: journal.Payload) -> int:
    """A chain-valid event, unsigned, appended with sqlite3: what an attacker adds."""
    with journal.open_reader(path) as reader:
        head = reader.head()[0]
        [last] = reader.rows(since_seq=head - 1)
    text = msgspec.json.encode(payload, order="sorted").decode()
    row: tuple[Any, ...] = (
        head + 1, last[1], "forger", None, last[4] + 1, last[5], payload.kind,
        payload.kind_version, None, None, None, None, None, None, text, last[16], "",
    )  # fmt: skip
    row = (*row[:16], journal.row_hash(row))
    columns = ", ".join(journal.COLUMNS)
    marks = ", ".join("?" * len(journal.COLUMNS))
    tamper(path, f"INSERT INTO events ({columns}) VALUES ({marks})", params=row)
    reseal_merkle(path, head + 1)
    return head + 1


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> journal.SigningKey:
    """This machine's signing key, where the default check finds it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return journal.load_key(journal.default_key_path())


# --- stripped signatures --------------------------------------------------------------------

MODES = {
    "default (this machine's key)": [],
    "--trusted-key": ["--trusted-key", VKEY.to_text()],
    "--accept-unverified": ["--accept-unverified"],
    "--trust-journal-key": ["--trust-journal-key"],
}


@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
def test_a_history_with_its_signatures_stripped_fails_in_every_mode(
    tmp_path: Path, machine: journal.SigningKey, capsys: pytest.CaptureFixture[str], mode: list[str]
) -> None:
    path = tmp_path / "journal.db"
    key = machine if not mode or mode[0] != "--trusted-key" else KEY
    _write(path, N, key=key, checkpoint_path=Path(f"{path}.checkpoint.json"))
    assert _verify(capsys, path, *mode)[0] == 0
    _strip(path)
    code, out = _verify(capsys, path, *mode)
    assert code == 1 and _rules(out) == [(1, "unsigned_history")]
    assert f"seqs 1..{N} ({N} events)" in out["findings"][0]["detail"]
    assert out["journals"][0]["signed_through"] == 0


@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
def test_a_forged_unsigned_journal_dropped_into_a_pool_fails_in_every_mode(
    tmp_path: Path, machine: journal.SigningKey, capsys: pytest.CaptureFixture[str], mode: list[str]
) -> None:
    pool = tmp_path / "journals"
    pool.mkdir()
    key = machine if not mode or mode[0] != "--trusted-key" else KEY
    _write(pool / "journal-1.db", N, key=key)
    forged = pool / "journal-2.db"
    _write(forged, 3, key=bytes(range(1, 33)))  # anyone's key: the signatures go anyway
    tamper(forged, "DELETE FROM checkpoints")
    with journal.open_reader(forged) as reader:
        forged_id = reader.journal_id
    code, out = _verify(capsys, pool, *mode)
    assert code == 1
    assert [(f["journal_id"], f["seq"], f["rule"]) for f in out["findings"]] == [
        (forged_id, 1, "unsigned_history")
    ]


@pytest.mark.parametrize("tail", [0, 1, 999, 1000, 1001, 2500])
def test_an_unsigned_tail_is_counted_and_fails_beyond_what_a_writer_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: int
) -> None:
    path = tmp_path / "journal.db"
    _write(path, 1, checkpoint_every=10**9)  # signed on close, at seq 1
    _write(path, tail, first=1, checkpoint_every=10**9)
    tamper(path, "DELETE FROM checkpoints WHERE seq > 1")  # the signatures of the tail go
    code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
    [report] = out["journals"]
    assert report["signed_through"] == 1 and report["unsigned_tail"] == tail
    if tail <= journal.CHECKPOINT_EVERY:
        assert code == 0, out["findings"]
    else:
        assert code == 1 and _rules(out) == [(2, "unsigned_tail")]
        assert (
            f"{tail} events after the last trusted checkpoint (seq 1)"
            in (out["findings"][0]["detail"])
        )


def test_a_live_session_is_signed_from_its_first_commit_and_a_lock_excuses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    options = {"checkpoint_every": 10**9, "checkpoint_interval": 1e9}
    with journal.open_sync_writer(path, key=KEY, **options) as writer:
        writer.append(_call(0))
        writer.append_many([_call(i) for i in range(1, 3)])
        code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
        [report] = out["journals"]
        # Its first commit signed seq 1; the two events after it are the live tail.
        assert code == 0 and report["live"] and report["unsigned_tail"] == 2, out
        assert report["signed_through"] == 1
    code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
    assert code == 0 and out["journals"][0]["unsigned_tail"] == 0  # signed on close
    # Stripped of its signatures and held by anyone's lock: not a live session's tail.
    _strip(path)
    with path.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert journal.held_by_a_writer(path)
        code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
    assert code == 1 and _rules(out) == [(1, "unsigned_history")]


# --- forged excuses -------------------------------------------------------------------------


def test_a_forged_prune_does_not_excuse_deleted_segments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal-1.db"
    write_segmented(path, 40)
    files = files_of(path)
    assert len(files) >= 3
    with journal.open_reader(files[0]) as reader:
        last_seq, last_hash = reader.head()
    for victim in files[:1]:
        victim.unlink()
    pruned = journal.SegmentsPruned(
        segments=[
            journal.PrunedSegment(
                file=files[0].name, first_seq=1, last_seq=last_seq, last_hash=last_hash
            )
        ],
        store="postgresql://store/fleet",
        held_seq=last_seq,
        witnessed_seq=last_seq,
        witnessed_hash=last_hash,
        older_than_days=30,
    )
    forged = _append_forged(files[-1], pruned)
    code, out = _verify(capsys, tmp_path, "--trusted-key", VKEY.to_text())
    assert code == 1 and _rules(out) == [
        (last_seq + 1, "segment_missing"),
        (forged, "excuse_unsigned"),
    ]
    assert out["journals"][0]["pruned_through"] == 0


def test_a_forged_journal_gap_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "journal.db"
    _write(path, N)
    gap = journal.JournalGap(reason="disk_full", since="2026-01-01T00:00:00Z", seconds=1.0)
    forged = _append_forged(path, gap)
    code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
    assert code == 1 and _rules(out) == [(forged, "excuse_unsigned")]


# --- forks ----------------------------------------------------------------------------------


def _resign(path: Path, since_seq: int = 1) -> None:
    """Sign the (rewritten) head with the journal's own key: each file verifies on its own."""
    root = reseal_merkle(path, since_seq)
    with journal.open_reader(path) as reader:
        seq, head = reader.head()
        journal_id = reader.journal_id
    assert journal_id is not None
    cp = journal.sign_checkpoint(
        journal.SigningKey("agentteam-bridge/seed", KEY),
        journal_id=journal_id,
        seq=seq,
        head_hash=head,
        ts_wall="2026-01-01T00:00:00Z",
        root_hash=None if root is None else root.hex(),
    )
    tamper(
        path,
        "DELETE FROM checkpoints",
        "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature,"
        " root_hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
        params=(
            cp.journal_id,
            cp.seq,
            cp.head_hash,
            cp.ts_wall,
            cp.key_id,
            cp.signature,
            cp.root_hash,
        ),
    )


@pytest.mark.parametrize("at", [1, 3, N])
def test_two_histories_under_one_journal_id_are_a_fork_and_no_reader_picks_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], at: int
) -> None:
    original = tmp_path / "journal.db"
    _write(original, N)
    given = tmp_path / "given"
    given.mkdir()
    a = consolidated_copy(original, given / "a.db")
    b = consolidated_copy(original, given / "b.db")
    rewrite_payload(b, at, '{"arguments":{"i":-1}}')
    _resign(b, at)
    for alone in (a, b):  # each history verifies on its own
        assert _verify(capsys, alone, "--trusted-key", VKEY.to_text())[0] == 0
    code, out = _verify(capsys, given, "--trusted-key", VKEY.to_text())
    assert code == 1 and _rules(out) == [(at, "fork")]
    assert f"{a} and {b}" in out["findings"][0]["detail"]
    assert main(["calls", str(given)]) == 2
    assert "a fork" in capsys.readouterr().err
    # A backup copy and a copy cut short hold the same history: no fork.
    shutil.rmtree(given)
    given.mkdir()
    consolidated_copy(original, given / "a.db")
    cut = consolidated_copy(original, given / "cut.db")
    tamper(cut, "DELETE FROM events WHERE seq > 4", "DELETE FROM checkpoints WHERE seq > 4")
    _resign(cut, 5)
    code, out = _verify(capsys, given, "--trusted-key", VKEY.to_text())
    assert code == 0, out["findings"]
    assert main(["calls", str(given), "--json"]) == 0
    capsys.readouterr()


# --- the key file ---------------------------------------------------------------------------


def test_a_key_file_replaced_and_the_old_signatures_removed_fails_the_default_check(
    tmp_path: Path, machine: journal.SigningKey, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    _write(path, N, key=machine)
    # The attacker: a new key file, the old key's signatures gone, a session under his key.
    intruder = journal.SigningKey("agentteam-bridge/intruder", bytes(range(3, 35)))
    key_file = journal.default_key_path()
    key_file.write_text(intruder.to_text() + "\n")
    rewrite_payload(path, 3, '{"arguments":{"i":-1}}')
    reseal_merkle(path, 3)
    tamper(path, "DELETE FROM checkpoints")
    _write(path, 3, key=journal.load_key(key_file, create=False), first=N)
    code = main(["verify", str(path), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 1 and _rules(out) == [(N + 1, "key_file_replaced")]
    assert machine.verifier.key_id in out["findings"][0]["detail"]
    assert f"trusted this machine's key file {key_file}" in captured.err
    # Whoever holds the intruder's key as his own may say so: it covers the history.
    assert _verify(capsys, path, "--trusted-key", intruder.verifier.to_text())[0] == 0


def test_a_key_rotation_verifies_under_the_key_that_took_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    _write(path, N)
    new = journal.SigningKey("agentteam-bridge/new", bytes(range(5, 37)))
    _write(path, 3, key=new, first=N)  # key_rotated at N + 1, signed into the chain by `new`
    code, out = _verify(capsys, path, "--trusted-key", new.verifier.to_text())
    assert code == 0, out["findings"]
    [report] = out["journals"]
    # The old key's checkpoint (seq N) counts: the rotation, in the chain, names it.
    assert report["signatures_checked"] == 2 and report["signed_through"] == N + 4
    # Under the old key alone, the new key's checkpoints are unverified (nothing vouches for it).
    code, out = _verify(capsys, path, "--trusted-key", VKEY.to_text())
    assert code == 1 and {rule for _, rule in _rules(out)} == {"checkpoint_unverified"}
    # A forged signature under the vouched old key is still a forgery.
    tamper(path, f"UPDATE checkpoints SET seq = {N - 1}, head_hash = (SELECT hash FROM events"
           f" WHERE seq = {N - 1}) WHERE seq = {N}")  # fmt: skip
    code, out = _verify(capsys, path, "--trusted-key", new.verifier.to_text())
    # (its signed tree root no longer matches either, in a v2 journal)
    assert code == 1 and (N - 1, "checkpoint_signature_invalid") in _rules(out)
    assert {seq for seq, _ in _rules(out)} == {N - 1}


def test_the_policy_findings_are_in_the_published_schema_fields(tmp_path: Path) -> None:
    schema = json.loads(
        (Path(__file__).parent.parent / "docs" / "replay-json" / "verify.schema.json").read_text()
    )
    report = schema["$defs"]["JournalReport"]["properties"]
    assert {"signed_through", "unsigned_tail", "live"} <= set(report)
    assert "trusted_local_key_file" in schema["properties"]
    assert os.path.exists(tmp_path)
