"""`agentteam-bridge runtime board|callback`: organise the local workspace, then use it through
`serve --embedded` (a board of one's own, and a workflow callback for `idempotency_key`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .bridge_harness import open_bridge


def local(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.cli", "runtime", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_board_and_a_callback_opened_locally_serve_every_feature(tmp_path: Path) -> None:
    db = tmp_path / "data" / "runtime.db"
    added = local("board", "add", "ops", "--name", "Operations", "--db", db)
    assert added.returncode == 0 and "board ops (Operations): 3 members" in added.stdout
    assert "ops\tOperations\t3 members\t0 tasks" in local("board", "list", "--db", db).stdout
    opened = local("callback", "open", "run_7", "cb_7", "--db", db)
    assert opened.returncode == 0, opened.stderr
    meta = json.loads(opened.stdout)["_meta"]
    assert meta == {"agentteam/workflow_run_id": "run_7", "agentteam/callback_effect_id": "cb_7"}
    keyed = {"channel": "ops", "tasks": [{"title": "from a local callback"}]}
    keyed["idempotency_key"] = "k-local"
    async with open_bridge({}, tmp_path / "journal.db", "--embedded", "--runtime-db", str(db)) as b:
        first = await b.ok("task_create", keyed, meta)
        again = await b.ok("task_create", keyed, meta)
        assert first["data"]["tasks"][0]["channel"] == "ops"
        assert (first["data"]["reused"], again["data"]["reused"]) == (False, True)
        done = local("callback", "complete", "run_7", "cb_7", "--db", db)
        assert done.returncode == 0, done.stderr
        assert (await b.ok("task_create", keyed, meta))["data"]["reused"] is True
        other = {**keyed, "idempotency_key": "k-new"}
        await b.fails("task_create", other, code="callback_not_active", meta=meta)
    listed = local("callback", "list", "--db", db).stdout
    assert "run_7\tcb_7\tagt_local\tcompleted" in listed
    assert "ops\tOperations\t3 members\t1 tasks" in local("board", "list", "--db", db).stdout


def test_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "runtime.db"
    for args, message in [
        (("board", "add", "Not A Slug"), "is not a board slug"),
        (("callback", "complete", "run_1", "cb_1"), "no callback run_1/cb_1"),
        (("callback", "open", "run 1", "cb_1"), "is not a run id"),
        (("callback", "open", "run_1", "cb_1", "--agent", "agt_nobody"), "no member"),
    ]:
        done = local(*args, "--db", db)
        assert done.returncode == 2, done
        assert message in done.stderr and done.stderr.count("\n") == 1
        assert "Traceback" not in done.stderr
