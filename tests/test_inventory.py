"""The generated inventory and docs table are current and say what the registry says."""

from __future__ import annotations

import json
import subprocess
import sys

from agentteam_task_bridge.bridge._compat import TOOL_MIGRATIONS
from agentteam_task_bridge.bridge._registry import TOOLS
from tools.inventory import INVENTORY, TABLE, render


def test_committed_inventory_and_table_are_current() -> None:
    for path, text in render().items():
        assert path.read_text() == text, f"{path} is stale: run python -m tools.inventory"


def test_inventory_lists_every_tool_and_old_name() -> None:
    inv = json.loads(INVENTORY.read_text())
    assert [t["name"] for t in inv["tools"]] == list(TOOLS)
    assert [m["old"] for m in inv["migrations"]["tool_names"]] == list(TOOL_MIGRATIONS)
    table = TABLE.read_text()
    assert all(f"`{name}`" in table for name in [*TOOLS, *TOOL_MIGRATIONS])


def test_check_mode_fails_on_drift(tmp_path: object) -> None:
    original = TABLE.read_text()
    try:
        TABLE.write_text(original + "drift\n")
        done = subprocess.run(
            [sys.executable, "-m", "tools.inventory", "--check"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 1 and "out of date" in done.stderr
    finally:
        TABLE.write_text(original)
