"""Starts and stops: every start-up problem is one stderr line naming what to change, exit 2,
and touches no file the bridge does not own; a session whose journal failed ends in one line."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge._context import redact_url
from agentteam_task_bridge.journal import Event, SessionStarted
from agentteam_task_bridge.runtime import Runtime
from tests.bridge_harness import bridge_command, open_bridge
from tests.bridge_inprocess import serve_inprocess
from tests.test_bridge_sessions import default_bridge, home_env


def serve(
    home: Path, *args: str, env: dict[str, str] | None = None, umask: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`agentteam-bridge serve ARGS` for a user whose home is `home`, stdin closed at once."""
    return subprocess.run(
        bridge_command(*args),
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            **(env or {}),
        },
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def one_line(done: subprocess.CompletedProcess[str], *mentioned: str, code: int = 2) -> str:
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for text in mentioned:
        assert text in lines[0], lines[0]
    return lines[0]


def snapshot(path: Path) -> tuple[int, bytes, list[str]]:
    """A file's mode, bytes and companions (`-wal`, `-shm`...): what "untouched" means."""
    companions = sorted(p.name for p in path.parent.glob(f"{path.name}*"))
    return path.stat().st_mode, path.read_bytes(), companions


def foreign_sqlite(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()
    os.chmod(path, 0o644)
    return path


@dataclass(frozen=True)
class Case:
    name: str
    prepare: Callable[[Path], tuple[list[str], Path | None]]  # (serve args, file to keep as is)
    mentioned: tuple[str, ...]


def _non_journal_sqlite(home: Path) -> tuple[list[str], Path | None]:
    target = foreign_sqlite(home / "notes.db")
    return ["--embedded", "--journal", str(target)], target


def _text_file(home: Path) -> tuple[list[str], Path | None]:
    target = home / "notes.txt"
    target.write_text("my notes\n")
    os.chmod(target, 0o644)
    return ["--embedded", "--journal", str(target)], target


def _same_path(home: Path) -> tuple[list[str], Path | None]:
    both = str(home / "both.db")
    return ["--embedded", "--journal", both, "--runtime-db", both], None


def _same_path_in_pool(home: Path) -> tuple[list[str], Path | None]:
    pool = home / "pool"
    return ["--embedded", "--journal", f"{pool}/", "--runtime-db", str(pool / "journal-1.db")], None


def _foreign_runtime_db(home: Path) -> tuple[list[str], Path | None]:
    target = foreign_sqlite(home / "notes.db")
    return ["--embedded", "--journal", str(home / "j.db"), "--runtime-db", str(target)], target


def _journal_as_runtime_db(home: Path) -> tuple[list[str], Path | None]:
    target = home / "old.db"
    with journal.open_sync_writer(target, key=b"k" * 32) as writer:
        writer.append(
            Event(session_id="s", payload=SessionStarted(bridge_version="t", compat_policy="hint"))
        )
    return ["--embedded", "--journal", str(home / "j.db"), "--runtime-db", str(target)], target


def _under_a_file(home: Path) -> tuple[list[str], Path | None]:
    blocker = home / "file"
    blocker.write_text("")
    return ["--embedded", "--journal", f"{blocker}/journals/"], blocker


def _bad_key(home: Path) -> tuple[list[str], Path | None]:
    key = home / "config" / "agentteam-bridge" / "journal-signing.key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_text("not a key at all\n")
    os.chmod(key, 0o600)
    return ["--embedded"], key


def _loose_key_file(home: Path) -> tuple[list[str], Path | None]:
    key = home / "config" / "agentteam-bridge" / "journal-signing.key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_text("ab" * 32 + "\n")
    os.chmod(key, 0o644)
    return ["--embedded"], key


def _loose_key_dir(home: Path) -> tuple[list[str], Path | None]:
    key = home / "config" / "agentteam-bridge" / "journal-signing.key"
    key.parent.mkdir(parents=True)
    os.chmod(key.parent, 0o777)
    key.write_text("ab" * 32 + "\n")
    os.chmod(key, 0o600)
    return ["--embedded"], key


CASES = [
    Case(
        "a non-journal SQLite file", _non_journal_sqlite, ("notes.db", "not a journal", "--journal")
    ),
    Case("a text file", _text_file, ("notes.txt", "not a journal", "--journal")),
    Case("the same path twice", _same_path, ("both.db", "same file", "--runtime-db")),
    Case("the runtime db in the pool", _same_path_in_pool, ("journal-1.db", "same file")),
    Case("a non-runtime database", _foreign_runtime_db, ("notes.db", "--runtime-db")),
    Case("a journal as the runtime db", _journal_as_runtime_db, ("old.db", "--runtime-db")),
    Case("a directory under a file", _under_a_file, ("file", "--journal")),
    Case("a bad key file", _bad_key, ("journal-signing.key", "not a valid key", "move it away")),
    Case("a loose key file", _loose_key_file, ("journal-signing.key", "chmod 600")),
    Case("a loose key directory", _loose_key_dir, ("agentteam-bridge", "chmod 700")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_start_is_one_line_exit_2_and_touches_nothing(
    case: Case, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """In-process, through the CLI's `main`; the first case also runs as the console script."""
    args, kept = case.prepare(tmp_path)
    before = snapshot(kept) if kept is not None and kept.is_file() else None
    one_line(serve_inprocess(tmp_path, capfd, *args), *case.mentioned)
    if case is CASES[0]:
        one_line(serve(tmp_path, *args), *case.mentioned)
    if before is not None:
        assert kept is not None and snapshot(kept) == before


def test_a_journal_locked_by_another_sqlite_connection_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=b"k" * 32) as writer:
        writer.append(
            Event(session_id="s", payload=SessionStarted(bridge_version="t", compat_policy="hint"))
        )
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a program holding SQLite's write lock
    try:
        done = serve(tmp_path, "--embedded", "--journal", str(path))
    finally:
        other.execute("ROLLBACK")
        other.close()
    one_line(done, str(path), "locked by another program")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0500 directory")
def test_an_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.mkdir(mode=0o500)
    try:
        one_line(serve(tmp_path, "--embedded", "--journal", f"{pool}/"), str(pool), "writable")
    finally:
        os.chmod(pool, 0o700)


async def test_a_session_whose_journal_failed_ends_in_one_line(tmp_path: Path) -> None:
    """The journal fills up during the session (a size cap); the session still ends cleanly."""
    path = tmp_path / "small.db"
    args = ("--embedded", "--journal", str(path), "--journal-max-bytes", "262144")
    async with default_bridge(home_env(tmp_path), *args, name="small", expect_code=1) as raw:
        await raw.initialize()
        for i in range(400):
            text = f"{i} " + "x" * 4000
            task = {"title": text[:200], "description": text}
            answer = await raw.call("task_create", {"channel": "general", "tasks": [task]})
            error = (answer["result"].get("structuredContent") or {}).get("error") or {}
            if error.get("code") == "journal_unavailable":
                break
        else:
            raise AssertionError("the journal never filled up")
    stderr = raw.stderr()
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and "JournalFailed" not in stderr
    assert "the journal" in lines[-1] and "failed during the session" in lines[-1], stderr
    assert f"agentteam-replay verify {path}" in lines[-1]


# --- secrets and modes ------------------------------------------------------------------

SECRET_URL = "http://agent:pa55w0rd-s3cret@127.0.0.1:9/api?access_token=tok-s3cret&x=1"


def test_a_credential_in_the_api_url_is_never_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The console script once; the other spellings in-process through the CLI's `main`."""
    env = {
        "AGENTTEAM_API_URL": SECRET_URL,
        "AGENTTEAM_WORKSPACE_ID": "ws",
        "AGENTTEAM_AGENT_ID": "agt",
        "AGENTTEAM_TOKEN": "t",
    }
    line = one_line(serve(tmp_path, env=env), "cannot reach", "REDACTED")
    assert "s3cret" not in line and "agent:" not in line
    flag = serve_inprocess(
        tmp_path, capfd, "--api-url", SECRET_URL, env={**env, "AGENTTEAM_API_URL": ""}
    )
    assert "s3cret" not in one_line(flag)
    bad_port = "http://u:pa55w0rd-s3cret@127.0.0.1:99999/"
    done = serve_inprocess(tmp_path, capfd, env={**env, "AGENTTEAM_API_URL": bad_port})
    assert "s3cret" not in one_line(done, "not a valid URL")


def test_files_are_owner_only_under_umask_000(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = serve(home, "--embedded", umask=0)
    assert done.returncode == 0, done.stderr
    created = [p for p in home.rglob("*")]
    dirs = [p for p in created if p.is_dir()]
    files = [p for p in created if p.is_file()]
    assert {p.name for p in dirs} >= {"data", "config", "agentteam-bridge", "journals"}
    assert {p.name for p in files} >= {
        "journal-1.db",
        "journal-1.db.checkpoint.json",
        "journal-signing.key",
        "runtime.db",
    }
    loose = [
        (str(p), oct(stat.S_IMODE(p.stat().st_mode)))
        for p in created
        if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)
    ]
    assert loose == []


async def test_a_credential_in_the_api_url_is_journaled_redacted(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    port = file_runtime.url.rsplit(":", 1)[1]
    url = f"http://agent:pa55w0rd-s3cret@127.0.0.1:{port}/?access_token=tok-s3cret"
    env = {**file_runtime.bridge_env(), "AGENTTEAM_API_URL": url}
    async with open_bridge(env, tmp_path / "journal.db", runtime=file_runtime) as bridge:
        await bridge.ok("task_list", {"channel": "general"})
        stderr = bridge.stderr()
    with journal.open_reader(tmp_path / "journal.db") as reader:
        (started,) = reader.events(kind="session_started")
    api_url = started.payload.api_url
    assert api_url.startswith(f"http://REDACTED@127.0.0.1:{port}/?access_token=")
    assert "s3cret" not in api_url
    assert "s3cret" not in stderr
    for blob in tmp_path.glob("journal.db*"):
        assert b"s3cret" not in blob.read_bytes()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("https://u:p@h.example/x", "https://REDACTED@h.example/x"),
        ("https://token@h.example", "https://REDACTED@h.example"),
        (
            "https://h.example/?access_token=t&key=k",
            "https://h.example/?access_token=REDACTED&key=REDACTED",
        ),
        ("https://h.example/?t0ken", "https://h.example/?t0ken=REDACTED"),
        ("https://h.example/#frag", "https://h.example/#REDACTED"),
        ("http://u:p@[::1]:80/?a=b", "http://REDACTED@[::1]:80/?a=REDACTED"),
        ("http://h:99999/", "<unparsable URL>"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
