"""A signing or trust key file that is not a regular file of key size (a FIFO, a device, a
directory, a file far too long) is refused at once in one line, by ``key``, ``erase`` and
``verify --trusted-key``: read plainly, a FIFO waits for a writer forever and ``/dev/zero``
never ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentteam_task_bridge import journal

CLI = [sys.executable, "-m", "agentteam_task_bridge.replay._cli"]


def _odd(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "key"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir(mode=0o700)
    else:
        path.write_text("PRIVATE+KEY+" + "A" * 10_000)
        path.chmod(0o600)
    return path


KINDS = ["fifo", "zero", "directory", "long"]


@pytest.mark.parametrize("kind", KINDS)
def test_load_key_refuses_what_is_not_a_key_file(tmp_path: Path, kind: str) -> None:
    with pytest.raises(ValueError):
        journal.load_key(_odd(tmp_path, kind), create=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["key", "verify"])
def test_the_cli_says_so_in_one_line_at_once(tmp_path: Path, kind: str, command: str) -> None:
    path = _odd(tmp_path, kind)
    argv = (
        ["key", "--key-file", str(path)]
        if command == "key"
        else ["verify", "--trusted-key", str(path), str(tmp_path / "none.db")]
    )
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr, done.stderr
