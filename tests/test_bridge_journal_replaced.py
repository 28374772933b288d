"""The live file is the file: a journal unlinked or renamed over under a running bridge makes the
writer fail closed (mutations refused ``journal_unavailable``, nothing sent upstream; reads
answered with ``meta.journal`` saying ``replaced``), and nothing is written under the name of
the journal moved into its place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import BridgeSession, open_bridge

CREATE = {"channel": "general", "tasks": [{"title": "before"}]}


def _unlink_all(path: Path) -> None:
    """``rm journal.db*``: the file, its -wal and -shm, its exported checkpoint."""
    for victim in path.parent.glob(f"{path.name}*"):
        victim.unlink()


def _rename_over(path: Path) -> None:
    """Another journal, whole, renamed over the live one."""
    other = path.with_name("other.db")
    with journal.open_sync_writer(other, key=bytes(range(32))) as writer:
        writer.append(journal.Event(session_id="x", payload=journal.SessionEnded(reason="x")))
    os.replace(other, path)


async def _titles(bridge: BridgeSession) -> tuple[list[str], dict[str, Any]]:
    """The board's task titles, read through the bridge, and the read's meta."""
    result = await bridge.call("task_list", {"channel": "general"})
    assert not result.is_error, result.structured_content
    content: dict[str, Any] = result.structured_content
    return [t["title"] for t in content["data"]["items"]], content["meta"]


@pytest.mark.parametrize("attack", [_unlink_all, _rename_over], ids=["rm", "rename-over"])
async def test_a_journal_unlinked_or_renamed_over_under_a_running_bridge_fails_closed(
    file_runtime: Runtime, tmp_path: Path, attack: Any
) -> None:
    path = tmp_path / "journal.db"
    exported = Path(f"{path}.checkpoint.json")
    env = file_runtime.bridge_env()
    async with open_bridge(env, path, runtime=file_runtime, check_journal=False) as bridge:
        await bridge.ok("task_create", CREATE)
        with journal.open_reader(path) as reader:
            ours = reader.journal_id
        attack(path)
        after_attack = path.read_bytes() if path.exists() else None
        export_after_attack = exported.read_bytes() if exported.exists() else None
        # The mutation is refused before anything goes upstream: the journal cannot take it,
        # and never will in this session (not retryable: a re-probe finds the same).
        refused = await bridge.fails(
            "task_create",
            {"channel": "general", "tasks": [{"title": "after"}]},
            code="journal_unavailable",
        )
        assert refused["retryable"] is False, refused
        titles, meta = await _titles(bridge)
        assert titles == ["before"]
        assert meta["journal"] == {"recorded": False, "reason": "replaced"}
        # It stays so: a re-probe never reopens the path onto another file.
        again = await bridge.fails("task_create", CREATE, code="journal_unavailable")
        assert again["retryable"] is False, again
        assert "journal write failed (upstream_request): replaced" in bridge.stderr()
    # Nothing was written under the name of the file that now holds the path (its WAL beside
    # it is ours, from before the attack: the file is read here without it).
    assert (path.read_bytes() if path.exists() else None) == after_attack
    assert (exported.read_bytes() if exported.exists() else None) == export_after_attack
    if path.exists():
        alone = tmp_path / "alone" / "journal.db"
        alone.parent.mkdir()
        alone.write_bytes(path.read_bytes())
        with journal.open_reader(alone) as reader:
            assert reader.journal_id != ours and reader.head()[0] == 1
