"""Erasure in the fleet store: a shipped ``payload_erased`` event (once the witness cosigned it),
or ``erase --from``, makes the erased text leave every file of the PostgreSQL cluster (heap,
TOAST, indexes, statistics, WAL) after ``store-maintain``; every proof, the witness and the
reports ``--from`` still agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from jsonschema import Draft202012Validator

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._cosign import WitnessKey
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from agentteam_task_bridge.replay._fleet_report import report_from
from agentteam_task_bridge.replay._fleet_witness import witness_findings
from agentteam_task_bridge.replay._render import to_json

from .journal_helpers import KEY, SESSION, VKEY, write_journal
from .pg_cluster import Cluster, ClusterUnavailable, start_cluster
from .replay_helpers import replay_main

SIGNER: Final = journal.SigningKey("agentteam-bridge/seed", KEY)
MARKER: Final = journal.ERASED_PAYLOAD
DOCS: Final = Path(__file__).resolve().parent.parent / "docs"
WITNESS: Final = WitnessKey("witness.example/erase", bytes(range(40, 72)))


def _cosign(url: str) -> None:
    """The store's witness cosigns what was shipped: the erasures it covers are applied."""
    done = cosign_once(url, WITNESS)
    assert done.ok, done


def _events(n_calls: int, text_of: dict[int, str]) -> list[journal.Event]:
    """A session of task_create calls; the calls of ``text_of`` carry its text in their title and
    (so the store's call lines hold it too) as the channel of their result."""
    events: list[journal.Event] = [
        journal.Event(
            session_id=SESSION,
            payload=journal.SessionStarted(
                bridge_version="0",
                compat_policy="hint",
                protocol_version="2025-11-25",
                workspace_id="ws",
                agent_id="ag",
                api_url="http://127.0.0.1:1",
            ),
        )
    ]
    for i in range(n_calls):
        text = text_of.get(i)
        title = text or f"task title number {i}"
        common: dict[str, Any] = {
            "session_id": SESSION,
            "call_id": f"call-{i}",
            "mcp_method_name": "tools/call",
            "gen_ai_tool_name": "task_create",
            "jsonrpc_request_id": i,
        }
        channel = text or "eng"
        route = "/api/v1/workspaces/ws/agents/ag/runtime/tasks"
        body = {"channel": channel, "title": title, "pad": "x" * 3000 * (i % 3)}
        for payload in (
            journal.CallReceived(arguments={"channel": "eng", "number": i, "title": title}),
            journal.ContextInjected(
                fields=[
                    journal.InjectedField(name="workspace_id", source="env", value="ws"),
                    journal.InjectedField(name="agent_id", source="env", value="ag"),
                ]
            ),
            journal.UpstreamRequest(method="POST", route=route, body=body),
            journal.UpstreamResponse(status=201, body={"number": i, **body}, duration_ms=1.5),
            journal.CallResult(result={"data": {"number": i, **body}}, duration_ms=2.0),
        ):
            events.append(journal.Event(**common, payload=payload))
    return events


def _journal(directory: Path, text: str, calls: tuple[int, ...]) -> Path:
    directory.mkdir(parents=True)
    path = directory / "journal.db"
    write_journal(path, _events(24, {i: f"{text} #{i}" for i in calls}))
    return path


def _leaks(roots: list[Path], text: str, run: int = 12) -> list[str]:
    """Every file under ``roots`` holding a ``run``-byte piece of ``text`` (raw bytes)."""
    data = text.encode()
    pieces = {data[i : i + run] for i in range(len(data) - run + 1)}
    found = []
    for root in roots:
        for file in sorted(root.rglob("*")):
            try:
                raw = file.read_bytes() if file.is_file() else b""
            except OSError:  # a file the server removed while this walked
                continue
            found += [f"{file}: {p!r}" for p in sorted(pieces) if p in raw][:1]
    return found


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[Cluster]:
    """A server of this module's own, so its data directory holds only these tests' databases."""
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:  # as conftest's pg_cluster: CI fails, elsewhere skips
        if os.environ.get("CI"):
            pytest.fail(f"CI needs PostgreSQL for the fleet tests: {exc}")
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _data_dir(cluster: Cluster) -> Path:
    if cluster.data_dir is None:
        pytest.skip("AGENTTEAM_TEST_PG_URL names a server whose files this test cannot read")
    return cluster.data_dir


def _checkpoint(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _store_rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT journal_id, seq, payload, salt, hash, payload_sha256, tree_hashes"
            " FROM agentteam.events ORDER BY journal_id, seq"
        ).fetchall()


def _erased_in_store(url: str, journal_id: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq FROM agentteam.events WHERE journal_id = %s AND payload = %s"
            " AND salt = '' ORDER BY seq",
            (journal_id, MARKER),
        )
        return [int(r[0]) for r in rows]


def _json(*args: str | Path) -> Any:
    done = replay_main(*args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def _jid(path: Path) -> str:
    with journal.open_reader(path) as reader:
        assert reader.journal_id is not None
        return reader.journal_id


def test_a_shipped_erasure_leaves_no_byte_of_the_text_in_the_store(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    secret = "Grace Hopper, 42 Arlington Ridge Road, grace@example.net"
    data = _data_dir(own_cluster)
    url = own_cluster.create_database()
    # One journal shipped, then erased (its rows erased in the store when the event arrives);
    # one erased before its first ship (its rows arrive erased).
    before = _journal(tmp_path / "shipped-then-erased", secret, (3, 17))
    after = _journal(tmp_path / "erased-then-shipped", secret, (5,))
    assert replay.ship([before], url).ok
    _checkpoint(url)
    assert _leaks([data], secret), "the test sees the text in the store before"

    selector = journal.EraseSelector(matching=secret)
    erased = {
        p: journal.erase_payloads(p, selector, reason="subject request", key=SIGNER)
        for p in (before, after)
    }
    assert [len(r.seqs) for r in erased.values()] == [8, 4]
    shipped = replay.ship([before, after], url)
    assert shipped.ok, shipped
    # Pending until the witness cosigns the signed checkpoint over the payload_erased event.
    assert _erased_in_store(url, _jid(before)) == []
    _cosign(url)
    for path, result in erased.items():
        assert _erased_in_store(url, _jid(path)) == result.seqs
    maintained = _json("store-maintain", "--from", url)
    assert maintained["ok"] and maintained["wal_switched"] and maintained["rewritten"]
    assert maintained["erasures"] == 2 and maintained["statistics"]
    schema = json.loads((DOCS / "replay-json" / "store-maintain.schema.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(maintained))

    assert _leaks([data, tmp_path], secret) == []
    for path in (before, after):
        assert journal.verify(path, trusted=[VKEY]).ok
        assert witness_findings(url, [path]) == []
        verified = replay_main("verify", path, "--witness", url, "--json")
        assert verified.returncode in (0, 3), verified.stdout[-1500:]
        jid = _jid(path)
        for seq in (erased[path].seqs[0], erased[path].seqs[-1], 1):
            local = _json("prove", path, "--seq", str(seq))
            assert _json("prove", "--from", url, "--journal", jid, "--seq", str(seq)) == local
    paths = [before, after]
    calls = replay.list_calls(paths, replay.CallFilter())
    assert to_json(reports.calls_from(url, replay.CallFilter())) == to_json(calls)
    assert to_json(reports.audit_from(url)) == to_json(replay.audit(paths))

    # Erasing again is a no-op, in the journals and in the store.
    rows = _store_rows(url)
    again = [journal.erase_payloads(p, selector, reason="r", key=SIGNER) for p in paths]
    assert all(r.seqs == [] and r.event_seq is None for r in again)
    assert replay.ship(paths, url).shipped == 0
    cli = _json(
        "erase", "--from", url, "--journal", _jid(before), "--matching", secret, "--reason", "r"
    )
    assert cli["journals"][0]["seqs"] == []
    assert _store_rows(url) == rows


def test_erase_from_the_store_alone(own_cluster: Cluster, tmp_path: Path) -> None:
    secret = "Katherine Johnson, 1 Langley Field, kj@example.com"
    data = _data_dir(own_cluster)
    url = own_cluster.create_database()
    path = _journal(tmp_path / "j", secret, (2, 9, 20))
    assert replay.ship([path], url).ok
    jid = _jid(path)
    _checkpoint(url)
    assert _leaks([data], secret)
    rows = _store_rows(url)
    erase = ("erase", "--from", url, "--journal", jid, "--matching", secret, "--reason", "DSR 7")

    dry = _json(*erase, "--dry-run")
    assert dry["dry_run"] and len(dry["journals"][0]["seqs"]) == 12
    assert _store_rows(url) == rows, "--dry-run changes nothing"

    done = _json(*erase)
    seqs = done["journals"][0]["seqs"]
    assert done["ok"] and seqs == dry["journals"][0]["seqs"]
    assert _erased_in_store(url, jid) == seqs
    assert _leaks([data], secret) == []
    # Only payload and salt changed: hashes, digests and the Merkle state are the journal's.
    now = _store_rows(url)
    assert [r[:2] + r[4:] for r in now] == [r[:2] + r[4:] for r in rows]
    assert witness_findings(url, [path]) == []
    for seq in (seqs[0], seqs[-1], 1, len(rows)):
        local = _json("prove", path, "--seq", str(seq))
        assert _json("prove", "--from", url, "--journal", jid, "--seq", str(seq)) == local
    with psycopg.connect(url) as conn:
        (recorded,) = conn.execute(
            "SELECT event_seq, selector, reason, seqs FROM agentteam.erasures"
        ).fetchall()
    assert recorded == (None, "matching", "DSR 7", seqs)

    assert _json(*erase)["journals"][0]["seqs"] == [], "erasing twice is a no-op"
    assert _store_rows(url) == now
    # The journal erases the same text later: shipped, recorded, nothing rewritten twice.
    local = journal.erase_payloads(
        path, journal.EraseSelector(matching=secret), reason="DSR 7", key=SIGNER
    )
    assert local.seqs == seqs
    assert replay.ship([path], url).ok
    _cosign(url)
    assert _erased_in_store(url, jid) == seqs
    assert [r[:7] for r in _store_rows(url)[: len(rows)]] == [r[:7] for r in now]
    assert _json("store-maintain", "--from", url)["ok"]
    assert _leaks([data, tmp_path], secret) == []


def test_the_store_lets_exactly_an_erasure_change_an_event(pg_url: str, tmp_path: Path) -> None:
    path = _journal(tmp_path / "j", "Hedy Lamarr, 5 Film Row", (1,))
    assert replay.ship([path], pg_url).ok
    jid = _jid(path)
    refused = [
        "UPDATE agentteam.events SET payload = '{\"erased\":true}', salt = '' WHERE seq = 2",
        "UPDATE agentteam.events SET payload = '{\"x\":1}' WHERE seq = 2",
        "DELETE FROM agentteam.events WHERE seq = 2",
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        conn.execute("INSERT INTO agentteam.erased_seqs VALUES (%s, 2, 0)", (jid,))
        for statement in (
            "UPDATE agentteam.events SET payload = '{\"x\":1}' WHERE seq = 2",
            "UPDATE agentteam.events SET payload = '{\"erased\":true}', salt = '',"
            " hash = repeat('0', 64) WHERE seq = 2",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        conn.execute(refused[0])
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM agentteam.erased_seqs")


def test_erase_from_says_what_it_cannot_do(
    pg_url: str, pg_cluster: Cluster, tmp_path: Path
) -> None:
    empty = pg_cluster.create_database()
    for args in (
        ("erase", "--from", empty, "--journal", "j", "--call", "c", "--reason", "r", "--dry-run"),
        ("store-maintain", "--from", empty),
    ):
        done = replay_main(*args)
        assert done.returncode == 2 and "holds no fleet store" in done.stderr, done.stderr
    with psycopg.connect(empty) as conn:  # nothing was created there
        assert conn.execute("SELECT to_regnamespace('agentteam')").fetchone() == (None,)
    path = _journal(tmp_path / "j", "Ada Lovelace, 12 St James's Square", (1,))
    assert replay.ship([path], pg_url).ok
    jid = _jid(path)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE erase_shipper LOGIN IN ROLE agentteam_ship")
    shipper = pg_url.replace("postgres@", "erase_shipper@", 1)
    base = ("erase", "--from", pg_url, "--reason", "r")
    cases = [
        ((*base, "--call", "call-1"), "needs --journal ID"),
        ((*base, "--journal", jid, "--older-than", "1"), "--older-than erases a journal's own"),
        ((*base, "--journal", "nope", "--call", "call-1"), "holds no journal 'nope'"),
        ((*base, "--journal", jid, "--call", "call-1", path), "journals or --from URL, not both"),
        (("erase", path, "--journal", jid, "--call", "c", "--reason", "r"), "goes with --from"),
        (
            ("erase", "--from", shipper, "--journal", jid, "--call", "call-1", "--reason", "r"),
            "needs the store's owner",
        ),
    ]
    rows = _store_rows(pg_url)
    for args, said in cases:
        done = replay_main(*args)
        assert done.returncode == 2 and said in done.stderr, (args, done.stderr)
    assert _store_rows(pg_url) == rows
    done = replay_main(*base, "--journal", jid, "--call", "call-1")
    assert done.returncode == 0, done.stderr
    assert "erased 7..11" in done.stdout and "recorded in the store (not signed)" in done.stdout
    # A shipped erasure waits for store-maintain, which only the owner can run to the end.
    journal.erase_payloads(path, journal.EraseSelector(call_id="call-2"), reason="r", key=SIGNER)
    assert replay.ship([path], pg_url).ok
    _cosign(pg_url)
    refused = replay_main("store-maintain", "--from", shipper, "--json")
    assert refused.returncode == 1, refused.stderr
    problems = json.loads(refused.stdout)["problems"]
    assert any("may not rewrite" in p for p in problems)
    assert any("CHECKPOINT" in p for p in problems)
    assert json.loads(refused.stdout)["rewritten"] == []
    done = replay_main("store-maintain", "--from", pg_url)
    assert done.returncode == 0 and "1 erasures: 2 relations rewritten" in done.stdout, done.stdout


def test_every_report_from_the_store_equals_the_local_one_after_erasures(
    pg_url: str, tmp_path: Path
) -> None:
    """Erasures of every selector in a fleet of plausible calls and idempotency journals: some
    shipped before, some after; each report ``--from`` is byte for byte the local one."""
    from .fleet_helpers import write_fleet, write_idempotency_fleet

    written = write_fleet(tmp_path / "written", 3, 9)
    idem = write_idempotency_fleet(tmp_path / "idempotency")
    paths = [*written, *idem]
    assert replay.ship([written[0], *idem[:2]], pg_url).ok
    chosen = [
        (written[0], journal.EraseSelector(session_id="s0")),
        (written[1], journal.EraseSelector(call_id="s1.3")),
        (written[2], journal.EraseSelector(matching="list_tasks")),
        (idem[0], journal.EraseSelector(call_id="idem-s0.1")),
        (idem[1], journal.EraseSelector(task=("eng-中文", 3))),
        (idem[2], journal.EraseSelector(older_than_days=0.0)),
    ]
    for path, selector in chosen:
        assert journal.erase_payloads(path, selector, reason="r", key=SIGNER).seqs, selector
    assert replay.ship(paths, pg_url).ok
    _cosign(pg_url)
    for path in paths:
        with journal.open_reader(path) as reader:
            erased = [r.seq for r in reader.events() if r.payload == {"erased": True}]
        assert _erased_in_store(pg_url, _jid(path)) == erased
    as_of = datetime(2027, 1, 15, tzinfo=UTC)
    assert to_json(reports.calls_from(pg_url, replay.CallFilter())) == to_json(
        replay.list_calls(paths, replay.CallFilter())
    )
    assert to_json(reports.audit_from(pg_url)) == to_json(replay.audit(paths))
    assert to_json(reports.deprecations_from(pg_url, as_of=as_of)) == to_json(
        replay.deprecations(paths, as_of=as_of)
    )
    assert to_json(reports.idempotency_from(pg_url)) == to_json(replay.check_idempotency(paths))
    page = report_from(pg_url, replay.ReportFilter(), stories=7)
    local = replay.report(paths, replay.ReportFilter(), accept_unverified=True, stories=7)
    # Not the stories: the page names the calls its verdict names, and the store's verdict is
    # what its ingest accepted, not verify's call_incomplete (an erased call in doubt becomes one).
    for field in ("audit", "idempotency", "buckets", "errors"):
        assert to_json(getattr(page, field)) == to_json(getattr(local, field)), field


def _idle_after_kill(url: str) -> None:
    """Wait until no session of the killed command works on the store any more (a server goes
    on with a statement whose client died until it next talks to it, then commits or rolls
    back): what the store holds after that is the state the kill left."""
    deadline = time.monotonic() + 60
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND pid <> pg_backend_pid()",
                ("agentteam-replay",),
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.05)
    pytest.fail("the killed erase's server session did not end within 60 s")


def test_a_killed_erase_from_leaves_the_old_state_or_the_new(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    """SIGKILL of `erase --from` at several moments (while it starts, erases, rewrites the
    partitions, switches the WAL): every time the store holds either no erasure or the whole
    one, with every hash, digest and stored hash the journal's; the erasure then completes.
    (On the loaded 2-core machine the first six kills left the old state and the last the new.)"""
    secret = "Dorothy Vaughan, 3 West Area, dv@example.com"
    url = own_cluster.create_database()
    path = _journal(tmp_path / "j", secret, (1, 8, 17, 22))
    assert replay.ship([path], url).ok
    jid = _jid(path)
    before = _store_rows(url)
    erase = ("erase", "--from", url, "--journal", jid, "--matching", secret, "--reason", "r")
    expected = _json(*erase, "--dry-run")["journals"][0]["seqs"]
    assert len(expected) == 16
    command = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", *erase]
    for delay in (0.3, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.kill()
        process.wait()
        _idle_after_kill(url)
        erased = _erased_in_store(url, jid)
        assert erased in ([], expected), erased
        now = _store_rows(url)
        assert [r[:2] + r[4:] for r in now] == [r[:2] + r[4:] for r in before]
        untouched = [r for r in now if r[1] not in erased]
        assert untouched == [r for r in before if r[1] not in erased]
        assert witness_findings(url, [path]) == []
    done = _json(*erase)
    assert done["ok"] and _erased_in_store(url, jid) == expected
    assert _json("store-maintain", "--from", url)["ok"]
