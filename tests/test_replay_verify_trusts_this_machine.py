"""`agentteam-replay verify` with no path, on the machine that wrote the journals: it finds every
session's journal in the pool and counts their signed checkpoints under that machine's own key,
and only because of it (another machine's config cannot vouch for them until given the key).
Each session is `agentteam-bridge serve` as a process.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.replay_helpers import replay_cli
from tests.test_bridge_sessions import default_bridge, home_env

CREATE = {"channel": "general", "tasks": [{"title": "x"}]}
SESSIONS = 3


async def test_no_path_verify_checks_every_session_under_this_machines_own_key(
    tmp_path: Path,
) -> None:
    env = home_env(tmp_path)
    all_started = trio.Event()
    started = 0

    async def session(i: int) -> None:
        nonlocal started
        async with default_bridge(env, "--embedded", name=f"session-{i}") as raw:
            await raw.initialize()
            started += 1
            if started == SESSIONS:
                all_started.set()
            await all_started.wait()  # every session holds a journal of its own at once
            answer = await raw.call("task_create", CREATE)
            assert answer["result"]["isError"] is False, answer

    with trio.fail_after(300):  # bounds a hang only
        async with trio.open_nursery() as nursery:
            for i in range(SESSIONS):
                nursery.start_soon(session, i)

    done = await trio.to_thread.run_sync(lambda: replay_cli("key", "--json", env=env))
    assert done.returncode == 0, done.stderr
    vkey: str = json.loads(done.stdout)["vkey"]
    key_id = "+".join(vkey.split("+")[:2])  # name+hash: how a checkpoint names its signer

    done = await trio.to_thread.run_sync(lambda: replay_cli("verify", "--json", env=env))
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    verified = json.loads(done.stdout)
    assert verified["ok"] is True and verified["findings"] == []
    assert verified["trusted_keys"] == [key_id]
    pool = tmp_path / "data" / "agentteam-bridge" / "journals"
    assert sorted(j["path"] for j in verified["journals"]) == sorted(
        str(p) for p in pool.glob("journal-*.db")
    )
    assert len(verified["journals"]) == SESSIONS
    # Each session signed a final checkpoint on exit, and verify counted it under the key.
    assert all(j["checkpoints_checked"] >= 1 for j in verified["journals"]), verified["journals"]

    # Another machine (its own config, no key of this one) cannot vouch for the same journals...
    other = {**env, "XDG_CONFIG_HOME": str(tmp_path / "elsewhere")}
    done = await trio.to_thread.run_sync(lambda: replay_cli("verify", "--json", env=other))
    assert done.returncode == 1, done.stderr
    rules = {f["rule"] for f in json.loads(done.stdout)["findings"]}
    assert rules == {"checkpoint_unverified"}
    # ...until it is given this machine's public key.
    done = await trio.to_thread.run_sync(
        lambda: replay_cli("verify", "--json", "--trusted-key", vkey, env=other)
    )
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
