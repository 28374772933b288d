"""Text is exact through the fleet store: U+0000 (and the store's own escape character) in a
client name, an idempotency key or a title comes back byte for byte, and keys that differ only
there (``a\\0b``, ``a\\ufffdb``, ``a\\uffffb``) stay apart: each ``--from`` report is the
local one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import Event, SessionStarted
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._render import to_json

from .fleet_helpers import IDEM_WS, _Calls, _create, _task
from .journal_helpers import KEY

# Each differs from the others only where the store's jsonb cannot hold, or escapes, a character.
KEYS = ["a\x00b", "a\ufffdb", "a\uffffb", "a\uffff0b", "a\uffff1b", "a\x00\x00b", "\x00"]
NAMES = ["cur\x00sor", "cur\ufffdsor", "cur\uffff0sor"]


def exact_journal(path: Path, index: int) -> None:
    calls = _Calls(f"exact-{index}")
    calls.events.append(
        Event(
            session_id=calls.session,
            payload=SessionStarted(
                bridge_version="0.1.0",
                compat_policy="hint",
                client_name=NAMES[index],
                client_version="1\x00.0",
                workspace_id=IDEM_WS,
                agent_id=f"agent\x00{index}",
            ),
        )
    )
    for n, key in enumerate(KEYS):
        _create(calls, key, f"title\x00{n}", [_task(100 * index + n)])
        _create(calls, key, f"title\x00{n}", [_task(100 * index + n)], reused=True)
    calls.ended()
    with journal.open_sync_writer(path, key=KEY, journal_id=f"exact-{index}") as writer:
        writer.append_many(calls.events)


def test_nul_and_the_escape_character_round_trip_through_every_report(
    pg_url: str, tmp_path: Path
) -> None:
    paths = [tmp_path / f"exact-{i}.db" for i in range(len(NAMES))]
    for index, path in enumerate(paths):
        exact_journal(path, index)
    assert replay.ship(paths, pg_url).ok
    local = replay.check_idempotency(paths)
    assert sorted({g.key for g in local.groups}) == sorted(KEYS), "every key its own group"
    assert any("\\x00" in f.detail for f in local.findings), "findings name NUL keys too"
    assert to_json(reports.idempotency_from(pg_url)) == to_json(local)
    assert to_json(reports.audit_from(pg_url)) == to_json(replay.audit(paths))
    assert to_json(reports.calls_from(pg_url, replay.CallFilter())) == to_json(
        replay.list_calls(paths)
    )
    cli = [sys.executable, "-m", "agentteam_task_bridge.replay._cli"]
    for command in (["idempotency", "--json"], ["audit", "--json"]):
        here = subprocess.run([*cli, *command, *map(str, paths)], capture_output=True, timeout=300)
        there = subprocess.run([*cli, *command, "--from", pg_url], capture_output=True, timeout=300)
        assert (there.returncode, there.stdout) == (here.returncode, here.stdout), there.stderr
        assert b"\\u0000" in here.stdout


def test_nul_in_the_text_columns_a_client_fills_ships_and_reads_back(
    pg_url: str, tmp_path: Path
) -> None:
    """A tool name (the model's text), a request id (the client's), a session and call id:
    PostgreSQL text cannot hold U+0000, so they are stored escaped, hashed as the journal
    hashed them, and read back exactly."""
    path = tmp_path / "columns.db"
    odd = ["\x00", "a\x00b", "a\ufffdb", "a\uffffb", "a\uffff0b", "a\uffff1b"]
    with journal.open_sync_writer(path, key=KEY) as writer:
        for n, text in enumerate(odd):
            ev = {
                "session_id": f"s{text}",
                "call_id": f"c{n}{text}",
                "mcp_method_name": "tools/call",
                "gen_ai_tool_name": f"task{text}",
                "jsonrpc_request_id": f"r{text}",
            }
            writer.append(Event(**ev, payload=journal.CallReceived(arguments={"n": n})))
            writer.append(Event(**ev, payload=journal.CallResult(result={"data": {}})))
        jid = writer.journal_id
    report = replay.ship([path], pg_url)
    assert report.ok, report.journals[0].refused
    assert replay.contiguous_seq(pg_url, jid) == 2 * len(odd)
    local = replay.list_calls([path])
    assert {c.tool for c in local.calls} == {f"task{t}" for t in odd}
    assert to_json(reports.calls_from(pg_url, replay.CallFilter())) == to_json(local)
    assert to_json(reports.audit_from(pg_url)) == to_json(replay.audit([path]))
