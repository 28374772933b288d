"""A v2 journal an insider makes read as v1 (the ``merkle_log`` row of ``journal_meta`` deleted,
in any of its files) fails ``verify`` in every mode, whatever else was rewritten.

A v2 checkpoint's signature covers its Merkle tree root, not the chain head it names: read as a
chain only, its ``head_hash`` is anyone's to set. So after a payload is edited and the chain
re-hashed, the checkpoints' head hashes (stored and the exported ``.checkpoint.json``) set to the
new chain, and the mark deleted, nothing a signature covers is checked: such a checkpoint must not
count (``checkpoint_root_mismatch``), in ``journal.verify`` and in ``agentteam-replay verify``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._cli import main

from .fleet_helpers import rewrite_payload
from .journal_helpers import KEY, VKEY
from .journal_helpers.segmented import files_of, write_segmented
from .replay_helpers import tamper

N = 12


def _write(path: Path) -> Path:
    held = Path(f"{path}.checkpoint.json")
    with journal.open_sync_writer(path, key=KEY, checkpoint_every=5, checkpoint_path=held) as w:
        w.append_many(
            [
                journal.Event(
                    session_id="s1",
                    call_id=f"c{i}",
                    gen_ai_tool_name="task_list",
                    payload=journal.CallReceived(arguments={"i": i}),
                )
                for i in range(N)
            ]
        )
    return held


def _verify(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, Any]:
    code = main(["verify", *map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _rewrite_as_v1(path: Path, held: Path, seq: int) -> None:
    """Edit the payload at `seq`, re-chain, set every checkpoint's head hash to the new chain
    (stored and held), and delete the v2 mark."""
    rewrite_payload(path, seq, '{"arguments":{"i":-1}}')
    conn = sqlite3.connect(path)
    hashes = dict(conn.execute("SELECT seq, hash FROM events").fetchall())
    conn.close()
    tamper(path, "DELETE FROM journal_meta WHERE key = 'merkle_log'")
    for cp_seq, digest in hashes.items():
        tamper(path, f"UPDATE checkpoints SET head_hash = '{digest}' WHERE seq = {cp_seq}")
    exported = json.loads(held.read_text())
    exported["head_hash"] = hashes[exported["seq"]]
    held.write_text(json.dumps(exported))


MODES = {
    "--trusted-key": ["--trusted-key", VKEY.to_text()],
    "--checkpoint": ["--trusted-key", VKEY.to_text(), "--checkpoint", "HELD"],
    "--trust-journal-key": ["--trust-journal-key"],
}


@pytest.mark.parametrize("seq", [1, 3, N])
@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
def test_a_rewritten_v2_journal_read_as_v1_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: list[str], seq: int
) -> None:
    path = tmp_path / "journal.db"
    held = _write(path)
    args = [str(held) if a == "HELD" else a for a in mode]
    assert _verify(capsys, path, *args)[0] == 0
    _rewrite_as_v1(path, held, seq)
    code, out = _verify(capsys, path, *args)
    assert code == 1
    rules = {f["rule"] for f in out["findings"]}
    assert "checkpoint_root_mismatch" in rules and "unsigned_history" in rules, out["findings"]
    assert out["journals"][0]["signed_through"] == 0
    report = journal.verify(path, key=KEY, checkpoint=journal.load_checkpoint(held))
    assert not report.ok
    assert {f.rule for f in report.findings} == {"checkpoint_root_mismatch"}


def test_one_segment_of_a_v2_pool_read_as_v1_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    write_segmented(path, 60)
    files = files_of(path)
    assert len(files) >= 3
    trusted = ["--trusted-key", VKEY.to_text()]
    assert _verify(capsys, path, *trusted)[0] == 0
    for victim in files:
        conn = sqlite3.connect(victim)
        mark = conn.execute("SELECT value FROM journal_meta WHERE key = 'merkle_log'").fetchone()
        conn.close()
        tamper(victim, "DELETE FROM journal_meta WHERE key = 'merkle_log'")
        code, out = _verify(capsys, path, *trusted)
        assert code == 1 and out["journals"][0]["log_version"] == 1, victim.name
        assert "checkpoint_root_mismatch" in {f["rule"] for f in out["findings"]}, victim.name
        tamper(victim, "INSERT INTO journal_meta VALUES ('merkle_log', ?)", params=mark)
        assert _verify(capsys, path, *trusted)[0] == 0
