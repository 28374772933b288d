"""``prove --from postgresql://... --journal ID``: proofs answered from the fleet store's Merkle
state, byte for byte the local ``prove``'s, accepted by ``check-proof`` and Go's sumdb/tlog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentteam_task_bridge import replay

from .fleet_helpers import append_calls, write_fleet_journal
from .journal_helpers import VKEY
from .replay_helpers import replay_main
from .test_journal_tlog import _check, oracle  # noqa: F401  (the Go oracle fixture)


def _proof(*args: str | Path) -> dict[str, Any]:
    done = replay_main("prove", *args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    proof: dict[str, Any] = json.loads(done.stdout)
    return proof


def test_prove_from_the_store_is_the_local_proof(
    pg_url: str,
    tmp_path: Path,
    oracle: Path,  # noqa: F811
) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 8, 30, checkpoint_every=37)
    assert replay.ship([path], pg_url).ok
    append_calls(path, jid, 40, 2)  # a second signed checkpoint, at close
    assert replay.ship([path], pg_url).ok
    store = ("--from", pg_url, "--journal", jid)
    held = _proof(*store, "--consistency", "1", "1")
    size = int(json.loads(replay_main("prove", path, "--seq", "1", "--json").stdout)["tree_size"])
    assert size > 140
    shipped = [1, 2, 37, 38, 64, size // 2, size - 1]
    for seq in shipped:
        local = _proof(path, "--seq", str(seq))
        from_store = _proof(*store, "--seq", str(seq))
        assert from_store == local, seq
        assert _check(oracle, from_store, tmp_path / f"seq{seq}.json", [VKEY.to_text()]) == (
            True,
            True,
        )
    checked = 0
    pairs = ((1, 2), (3, 37), (37, 74), (140, size), (74, 140), (5, size - 1), (size // 2, size))
    for old, new in pairs:
        local = _proof(path, "--consistency", str(old), str(new))
        from_store = _proof(*store, "--consistency", str(old), str(new))
        assert from_store == local, (old, new)
        signed = from_store["old_checkpoint"] and from_store["new_checkpoint"]
        where = tmp_path / f"c{old}-{new}.json"
        assert _check(oracle, from_store, where, [VKEY.to_text()])[0], (old, new)
        checked += bool(signed and _check(oracle, from_store, where, [VKEY.to_text()])[1])
    assert checked == 1, "check-proof accepts the signed pair (both sizes checkpointed)"
    assert held["old_size"] == 1
    append_calls(path, jid, 50, 3)  # the file goes on; the store proves what it holds
    behind = _proof(*store, "--seq", "3")
    assert behind["tree_size"] == size
    assert _check(oracle, behind, tmp_path / "behind.json", [VKEY.to_text()]) == (True, True)
    past = replay_main("prove", *store, "--seq", str(size + 100), "--json")
    assert past.returncode == 2 and "no event" in past.stderr
    other = replay_main("prove", "--from", pg_url, "--journal", "nope", "--seq", "1")
    assert other.returncode == 2 and "no journal nope" in other.stderr
