"""``check-proof`` accepts a consistency proof only up to a signed size: whoever holds one signed
checkpoint grows any tree from it (events appended with sqlite3, the Merkle log resealed), and
``prove --consistency`` over that copy makes a proof that is RFC 9162-valid but says nothing.
A call's proof holds that call's events, each once: another call's events, each truly included,
are not its story."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._cli import main

from .journal_helpers import KEY, VKEY
from .test_replay_trust_policy import _append_forged


def _write(path: Path, sizes: list[int]) -> None:
    """A journal signed at each of `sizes` (one commit, one checkpoint, each)."""
    done = 0
    for size in sizes:
        with journal.open_sync_writer(path, key=KEY, checkpoint_every=10**9) as writer:
            writer.append_many(
                [
                    journal.Event(session_id="s", payload=journal.CallReceived(arguments={"i": i}))
                    for i in range(done, size)
                ]
            )
        done = size


def _check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: int, new: int
) -> tuple[int, dict[str, Any], str]:
    proof = tmp_path / f"c{old}-{new}.json"
    assert main(["prove", str(tmp_path / "journal.db"), "--consistency", str(old), str(new),
                 "--output", str(proof)]) == 0  # fmt: skip
    capsys.readouterr()
    code = main(["check-proof", str(proof), "--trusted-key", VKEY.to_text()])
    return code, json.loads(proof.read_text()), capsys.readouterr().out


@pytest.mark.parametrize("forged", [1, 3, 9])
def test_a_tree_grown_by_anyone_from_a_signed_size_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], forged: int
) -> None:
    path = tmp_path / "journal.db"
    _write(path, [4, 10])
    for i in range(forged):
        _append_forged(path, journal.CallReceived(arguments={"forged": i}))
    head = 10 + forged
    for old in (4, 10):
        code, proof, out = _check(tmp_path, capsys, old, head)
        assert proof["old_checkpoint"] is not None and proof["new_checkpoint"] is None
        assert code == 1 and out.startswith("FAILED"), out
        assert f"size {head} has no signed checkpoint" in out


def test_a_proof_up_to_a_signed_size_passes_whether_or_not_the_old_size_is_signed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path / "journal.db", [4, 10])
    for old, new, old_signed in ((4, 10, True), (2, 10, False), (3, 4, False), (10, 10, True)):
        code, proof, out = _check(tmp_path, capsys, old, new)
        assert (proof["old_checkpoint"] is not None) == old_signed
        assert code == 0 and out.startswith("OK"), (old, new, out)
    code, proof, out = _check(tmp_path, capsys, 2, 3)  # neither signed
    assert code == 1 and "size 3 has no signed checkpoint" in out


def _calls_journal(path: Path) -> None:
    """Two calls of three events each, signed at the end."""
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.append_many(
            [
                journal.Event(
                    session_id="s",
                    call_id=call,
                    payload=journal.CallReceived(arguments={"call": call, "i": i}),
                )
                for call in ("c1", "c2")
                for i in range(3)
            ]
        )


def _check_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], proof: dict[str, Any]
) -> tuple[int, str]:
    where = tmp_path / "call.json"
    where.write_text(json.dumps(proof))
    capsys.readouterr()
    code = main(["check-proof", str(where), "--trusted-key", VKEY.to_text()])
    return code, capsys.readouterr().out


def test_a_call_proof_holds_its_own_calls_events_once_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    _calls_journal(path)
    proofs = {}
    for call in ("c1", "c2"):
        assert main(["prove", str(path), "--call", call, "--output", str(tmp_path / call)]) == 0
        proofs[call] = json.loads((tmp_path / call).read_text())
        assert _check_call(tmp_path, capsys, proofs[call])[0] == 0
    c1, c2 = proofs["c1"], proofs["c2"]
    forged = {
        "another call's events under its id": {**c1, "events": c2["events"]},
        "one event of another call among its own": {
            **c1,
            "events": [*c1["events"], c2["events"][0]],
        },
        "its id changed": {**c1, "call_id": "c2"},
        "an event listed twice": {**c1, "events": [*c1["events"], c1["events"][0]]},
    }
    for what, proof in forged.items():
        code, out = _check_call(tmp_path, capsys, proof)
        assert code == 1 and out.startswith("FAILED"), what
        assert "another call" in out or "listed twice" in out, (what, out)
