"""Files are owner-only, the schema version is recorded, migrations are additive and idempotent."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from agentteam_task_bridge import journal

from .journal_helpers import KEY, event, write_journal


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_database_wal_and_shm_are_owner_only_under_a_permissive_umask(
    tmp_path: Path, permissive_umask: None
) -> None:
    path = tmp_path / "new" / "j.db"
    async with journal.open_writer(path, key=KEY) as writer:
        await writer.append(event("call_received"))
        for name in ("j.db", "j.db-wal", "j.db-shm"):
            assert _mode(path.parent / name) == 0o600, name
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700


def test_an_existing_journal_with_loose_modes_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    path.chmod(0o644)
    write_journal(path, [event("call_result")])
    assert _mode(path) == 0o600


def test_the_default_key_file_is_created_owner_only_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, permissive_umask: None
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key_path = journal.default_key_path()
    assert key_path == tmp_path / "config" / "agentteam-bridge" / "journal-signing.key"
    write_journal_default_key = journal.open_sync_writer(tmp_path / "j.db")
    write_journal_default_key.append(event("call_received"))
    write_journal_default_key.close()
    assert _mode(key_path) == 0o600 and _mode(key_path.parent) == 0o700
    key = journal.load_key()
    assert journal.load_key(key_path).to_text() == key.to_text()
    secret = key.to_text().split("+", 4)[4]
    assert secret.encode() not in (tmp_path / "j.db").read_bytes()  # never in the database
    assert journal.verify(tmp_path / "j.db", key=key).signatures_checked == 1


def test_the_schema_version_and_migrations_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    write_journal(path, [event("call_result")])  # reopening applies nothing twice
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == journal.SCHEMA_VERSION
        applied = conn.execute("SELECT migration_set, name FROM _sqlite_migrations").fetchall()
        assert applied == [
            ("agentteam_journal", "0001_initial"),
            ("agentteam_journal", "0002_journal_gap"),
            ("agentteam_journal", "0003_key_rotated"),
            ("agentteam_journal", "0004_segments"),
            ("agentteam_journal", "0005_segments_pruned"),
            ("agentteam_journal", "0006_merkle_log"),
            ("agentteam_journal", "0007_answer_undelivered"),
            ("agentteam_journal", "0008_session_handshake"),
            ("agentteam_journal", "0009_payload_erased"),
            ("agentteam_journal", "0010_leaf_columns"),
        ]
        kinds = set(conn.execute("SELECT kind, kind_version FROM event_kinds").fetchall())
        assert kinds == {(k, t.kind_version) for k, t in journal.PAYLOAD_TYPES.items()}
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    with journal.open_reader(path) as reader:
        assert reader.schema_version == journal.SCHEMA_VERSION
        assert reader.created_at is not None


def test_every_migration_ends_at_its_version_so_a_current_journal_opens_without_sqlite_utils(
    tmp_path: Path,
) -> None:
    import sqlite_utils

    from agentteam_task_bridge.journal._schema import migrations

    empty = sqlite_utils.Database(memory=True)
    assert journal.SCHEMA_VERSION == len(migrations().pending(empty))  # a version per migration
    path = tmp_path / "j.db"
    write_journal(path, [event("call_received")])
    script = (
        "import sys, journal\n"
        "from tests.journal_helpers import KEY, event, write_journal\n"
        f"write_journal({str(path)!r}, [event('call_result')])\n"
        "assert 'sqlite_utils' not in sys.modules, 'reopening imported sqlite_utils'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parent.parent, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    assert journal.verify(path, key=KEY).ok


async def test_the_writer_opens_and_closes_off_the_event_loop(tmp_path: Path) -> None:
    # A heartbeat task keeps running while the writer opens, commits and closes.
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            beats += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        async with journal.open_writer(tmp_path / "j.db", key=KEY) as writer:
            for _ in range(20):
                await writer.append(event("call_received"))
        nursery.cancel_scope.cancel()
    assert beats > 20
