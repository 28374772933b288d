"""``ship`` into a real PostgreSQL: incremental, idempotent, resumable, verified, append-only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay import contiguous_seq, ship, store_findings, witnessed_checkpoint
from agentteam_task_bridge.replay._fleet_store import connect

from .fleet_helpers import (
    append_calls,
    consolidated_copy,
    journal_events,
    rewrite_payload,
    write_fleet,
    write_fleet_journal,
)
from .journal_helpers import KEY
from .pg_cluster import Cluster


def store_rows(url: str, journal_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq, hash FROM agentteam.events WHERE journal_id = %s ORDER BY seq",
            (journal_id,),
        ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def local_rows(path: Path) -> list[tuple[int, str]]:
    with journal.open_reader(path) as reader:
        return [(row[0], row[16]) for row in reader.rows()]


def test_ship_copies_every_event_once_and_resumes(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 1, 12)
    first = ship([path], pg_url, batch_size=7)
    assert first.ok and first.shipped == len(local_rows(path))
    assert store_rows(pg_url, jid) == local_rows(path)
    again = ship([path], pg_url)
    assert again.ok and again.shipped == 0, "a repeated ship ships nothing"
    append_calls(path, jid, 50, 5)
    more = ship([path], pg_url, batch_size=4)
    assert more.journals[0].store_head_before == first.journals[0].store_head
    assert store_rows(pg_url, jid) == local_rows(path)
    head = local_rows(path)[-1]
    assert contiguous_seq(pg_url, jid) == head[0]
    witnessed = witnessed_checkpoint(pg_url, jid)
    assert witnessed is not None and witnessed == head, "the close checkpoint is the witness"


def test_payloads_are_the_redacted_text_as_hashed(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "secret.db"
    secret = "sk-live-4eC39HqLyjWDarjtT1zdp7dc"
    with journal.open_sync_writer(path, key=KEY, secrets=[secret]) as writer:
        writer.append(
            journal.Event(
                session_id="s",
                call_id="c",
                payload=journal.CallReceived(arguments={"note": f"token {secret} ✓"}),
            )
        )
        jid = writer.journal_id
    assert ship([path], pg_url).ok
    with psycopg.connect(pg_url) as conn:
        payloads = [r[0] for r in conn.execute("SELECT payload FROM agentteam.events")]
    assert payloads and not any(secret in p for p in payloads)
    with journal.open_reader(path) as reader:
        assert payloads == [row[14] for row in reader.rows()]
    assert jid


def test_a_fork_is_refused_and_recorded(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 2, 6)
    assert ship([path], pg_url).ok
    shipped = store_rows(pg_url, jid)
    forked = consolidated_copy(path, tmp_path / "forked.db")
    rewrite_payload(forked, 5, '{"arguments":{"channel":"other"},"meta_keys":[]}')
    report = ship([forked], pg_url)
    assert not report.ok and report.refused == 1
    refused = report.journals[0].refused
    assert refused is not None and refused.rule == "fork"
    assert [f.rule for f in store_findings(pg_url, jid)] == ["fork"]
    assert store_rows(pg_url, jid) == shipped, "nothing of the fork is stored"


def test_a_forged_checkpoint_is_refused(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 3, 4, checkpoint_every=1000)
    assert ship([path], pg_url).ok
    append_calls(path, jid, 10, 3)
    forged = consolidated_copy(path, tmp_path / "forged.db")
    attacker = journal.SigningKey("agentteam-bridge/attacker", bytes(range(1, 33)))
    head_seq, head_hash = local_rows(forged)[-1]
    cp = journal.sign_checkpoint(
        attacker, journal_id=jid, seq=head_seq, head_hash=head_hash, ts_wall="2026-12-03T00:00:00Z"
    )
    import sqlite3

    conn = sqlite3.connect(forged)
    conn.execute(
        "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (cp.journal_id, cp.seq, cp.head_hash, cp.ts_wall, cp.key_id, cp.signature),
    )
    conn.commit()
    conn.close()
    report = ship([forged], pg_url)
    refused = report.journals[0].refused
    assert refused is not None and refused.rule == "checkpoint_unverified"
    assert refused.seq == head_seq
    witnessed = witnessed_checkpoint(pg_url, jid)
    assert witnessed is not None and witnessed[0] < head_seq


def test_the_store_is_append_only(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    write_fleet_journal(path, 4, 2)
    assert ship([path], pg_url).ok
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE ROLE shipper LOGIN IN ROLE agentteam_ship")
        for statement in (
            "UPDATE agentteam.events SET kind = 'x'",
            "DELETE FROM agentteam.events",
            "DELETE FROM agentteam.checkpoints",
            "TRUNCATE agentteam.findings",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                admin.execute(statement)
    shipper_url = pg_url.replace("postgresql://postgres@", "postgresql://shipper@")
    with psycopg.connect(shipper_url, autocommit=True) as shipper:
        for statement in ("UPDATE agentteam.events SET kind = 'x'", "DELETE FROM agentteam.events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                shipper.execute(statement)
    more = tmp_path / "b.db"
    write_fleet_journal(more, 5, 2)
    assert ship([more], shipper_url).ok, "the shipping role can ship"


@pytest.mark.slow
def test_a_hundred_journals_ship_and_an_interrupted_ship_resumes(
    pg_url: str, tmp_path: Path
) -> None:
    paths = write_fleet(tmp_path / "fleet", 100, 3)
    expected = {p: local_rows(p) for p in paths}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "-m",
        "agentteam_task_bridge.replay._cli",
        "ship",
        str(tmp_path / "fleet"),
    ]
    cmd += ["--to", pg_url, "--batch-size", "5"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while time.monotonic() < deadline and proc.poll() is None:
            row = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'agentteam'"
                " AND tablename = 'events'"
            ).fetchone()
            if row and row[0]:
                count = conn.execute("SELECT count(*) FROM agentteam.events").fetchone()
                if count and count[0] >= 300:
                    break
            time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    report = ship([tmp_path / "fleet"], pg_url)
    assert report.ok
    again = ship([tmp_path / "fleet"], pg_url)
    assert again.ok and again.shipped == 0
    with psycopg.connect(pg_url) as conn:
        total = conn.execute(
            "SELECT count(*), count(DISTINCT (journal_id, seq)) FROM agentteam.events"
        ).fetchone()
    assert total is not None
    assert total[0] == total[1] == sum(len(rows) for rows in expected.values())
    for path, rows in expected.items():
        with journal.open_reader(path) as reader:
            jid = reader.journal_id
        assert jid is not None
        assert store_rows(pg_url, jid) == rows


def test_follow_ships_live_journals_with_a_bounded_lag(pg_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "live"
    directory.mkdir()
    first = directory / "journal-1.db"
    jid = write_fleet_journal(first, 7, 2)
    cmd = [
        sys.executable,
        "-m",
        "agentteam_task_bridge.replay._cli",
        "ship",
        str(directory),
        "--to",
        pg_url,
    ]
    proc = subprocess.Popen(
        [*cmd, "--follow", "--interval", "0.2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def wait_shipped(journal_id: str, path: Path) -> None:
        want = local_rows(path)[-1][0]
        deadline = time.monotonic() + 60  # bounds a hang only
        while contiguous_seq(pg_url, journal_id) < want:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, f"{journal_id} not shipped up to {want}"
            time.sleep(0.05)

    try:
        wait_shipped(jid, first)
        with journal.open_sync_writer(first, key=KEY, journal_id=jid) as writer:
            for round_ in range(3):  # a live writer appending while the shipper follows
                writer.append_many(journal_events(100 + round_, 2))
                wait_shipped(jid, first)
        second = directory / "journal-2.db"
        other = write_fleet_journal(second, 8, 1)
        wait_shipped(other, second)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert store_rows(pg_url, jid) == local_rows(first)
    assert all(json.loads(line)["ok"] for line in out.splitlines())


def test_ship_json_follows_its_published_schema(pg_url: str, tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    from tools.replay_schemas import DIRECTORY

    path = tmp_path / "a.db"
    write_fleet_journal(path, 9, 2)
    cmd = [
        sys.executable,
        "-m",
        "agentteam_task_bridge.replay._cli",
        "ship",
        str(path),
        "--to",
        pg_url,
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"] is True and out["shipped"] == len(local_rows(path))
    assert "postgres@" in out["store"] and "sock" in out["store"]
    schema = json.loads((DIRECTORY / "ship.schema.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(out))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ship:s3cret@db.example/fleet?password=s3cret&sslmode=require#s3cret",
        "postgres://:s3cret@[::1]:5432/fleet?options=s3cret&application_name=&host=/run/pg",
        "https://ship:s3cret@h.example/?token=s3cret&key=#s3cret",
        "postgresql://db.example/fleet?k=s3cret",
    ],
)
def test_api_and_store_urls_share_one_redaction_rule(url: str) -> None:
    from agentteam_task_bridge import bridge
    from agentteam_task_bridge.replay._fleet_store import STORE_QUERY_SHOWN, redact_store_url

    # A password, a query value, a fragment: hidden by both (an API URL hides its user too).
    shown = {bridge.redact_url(url), redact_store_url(url)}
    assert all("s3cret" not in text for text in shown), shown
    assert "ship" not in bridge.redact_url(url)
    # The store's is the one rule with its role and connection keys shown, nothing else.
    assert redact_store_url(url) == bridge.redact_url(
        url, keep_user=True, keep_query=STORE_QUERY_SHOWN
    )


def test_store_urls_are_printed_without_secrets(tmp_path: Path) -> None:
    from agentteam_task_bridge.replay._fleet_store import redact_store_url

    url = "postgresql://ship:s3cr%C3%A9t@db.example:6432/fleet?sslmode=require&password=p4ss"
    shown = redact_store_url(url)
    assert "s3cr" not in shown and "p4ss" not in shown
    assert shown.startswith("postgresql://ship:REDACTED@db.example:6432/fleet?sslmode=require")
    cmd = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "ship", str(tmp_path), "--to"]
    path = tmp_path / "a.db"
    write_fleet_journal(path, 10, 1)
    unreachable = "postgresql://ship:s3cret@127.0.0.1:1/fleet?connect_timeout=5"
    done = subprocess.run(
        [*cmd, unreachable], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert "cannot reach the store" in done.stderr and "s3cret" not in done.stderr


def test_partitions_are_months_in_utc_whatever_the_session_time_zone(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        from agentteam_task_bridge.replay._fleet_store import ensure_schema

        ensure_schema(conn)
        conn.execute("SET TimeZone = 'Pacific/Kiritimati'")  # UTC+14
        conn.execute("SELECT agentteam.ensure_partition('2026-12-01')")
        conn.execute("SELECT agentteam.ensure_partition('2026-11-01')")
        for at, month in (("2026-12-01T00:30:00Z", "2026_12"), ("2026-11-30T23:30:00Z", "2026_11")):
            row = conn.execute(
                "SELECT %s::timestamptz >= lower_bound AND %s::timestamptz < upper_bound FROM"
                " (SELECT (regexp_match(pg_get_expr(relpartbound, oid),"
                "  'FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)'))[1]::timestamptz lower_bound,"
                "  (regexp_match(pg_get_expr(relpartbound, oid),"
                "  'FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)'))[2]::timestamptz upper_bound"
                "  FROM pg_class WHERE relname = %s) b",
                (at, at, f"events_{month}"),
            ).fetchone()
            assert row is not None and row[0], (at, month)


@pytest.mark.parametrize("function", ["ensure_partition", "ensure_call_partition"])
def test_two_ingests_making_one_months_partition_both_go_on(pg_url: str, function: str) -> None:
    """Two shippers whose batches open the same new month: the second waits for the first to
    make the partition, then finds it (it once failed with duplicate_table: its cache of the
    catalog, read before it waited, still said the partition was missing)."""
    import threading

    from agentteam_task_bridge.replay._fleet_store import ensure_schema

    with psycopg.connect(pg_url, autocommit=True) as first, psycopg.connect(pg_url) as second:
        ensure_schema(first)
        first.execute("BEGIN")
        first.execute(f"SELECT agentteam.{function}('2031-05-01')")  # made, not committed
        waiter = second.execute("SELECT pg_backend_pid()").fetchone()
        assert waiter is not None
        failed: list[BaseException] = []

        def make() -> None:
            try:
                second.execute(f"SELECT agentteam.{function}('2031-05-01')")
                second.commit()
            except BaseException as exc:  # reported below
                failed.append(exc)

        thread = threading.Thread(target=make)
        thread.start()
        for _ in range(500):  # until it waits for the first one's lock (bounded: 10 s)
            waiting = first.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", waiter
            ).fetchone()
            if waiting is not None and waiting[0]:
                break
            time.sleep(0.02)
        first.execute("COMMIT")
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert not failed, failed
        table = "events" if function == "ensure_partition" else "call_lines"
        made = first.execute(
            "SELECT count(*) FROM pg_class WHERE relname = %s", (f"{table}_2031_05",)
        ).fetchone()
        assert made == (1,)


def test_jobs_ship_a_pool_as_one_connection_does(pg_cluster: Cluster, tmp_path: Path) -> None:
    """``--jobs 3`` ships five journals three at a time: the store ends as one connection
    leaves it (every event, every call line), the report lists the journals in the paths'
    order, progress counts every event once, and a second ship finds nothing new."""
    paths = write_fleet(tmp_path / "pool", 5, 9)
    one, three = pg_cluster.create_database(), pg_cluster.create_database()
    told: list[int] = []
    alone = ship(paths, one, batch_size=16)
    together = ship(paths, three, batch_size=16, jobs=3, progress=lambda n, _t=None: told.append(n))
    assert alone.ok and together.ok
    assert [j.path for j in together.journals] == [str(p) for p in paths]
    assert [j.shipped for j in together.journals] == [j.shipped for j in alone.journals]
    assert told and told[-1] == together.shipped == alone.shipped
    assert told == sorted(told)
    for table, key in (("events", "journal_id, seq"), ("call_lines", "journal_id, call_id")):
        query = f"SELECT md5(string_agg(t::text, '|' ORDER BY {key})) FROM agentteam.{table} t"
        with psycopg.connect(one) as a, psycopg.connect(three) as b:
            assert a.execute(query).fetchone() == b.execute(query).fetchone(), table
    again = ship(paths, three, jobs=3)
    assert again.ok and again.shipped == 0


def test_a_payload_holding_nul_ships_and_keeps_its_text(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "nul.db"
    texts = ["a\x00b", "\\u0000 literal", "x\\\x00y\x00\x00"]
    with journal.open_sync_writer(path, key=KEY) as writer:
        for n, text in enumerate(texts):
            writer.append(
                journal.Event(
                    session_id="s",
                    call_id=f"c{n}",
                    payload=journal.CallReceived(arguments={"note": text}),
                )
            )
        jid = writer.journal_id
    assert ship([path], pg_url).ok
    assert store_rows(pg_url, jid) == local_rows(path)
    with connect(pg_url) as conn:  # the store's client reads the jsonb's strings exactly
        notes = [
            r[0]
            for r in conn.execute(
                "SELECT doc -> 'arguments' ->> 'note' FROM agentteam.event_docs ORDER BY seq"
            )
        ]
    assert notes == texts


def test_an_edited_row_is_refused_and_what_precedes_it_is_stored(
    pg_url: str, tmp_path: Path
) -> None:
    import sqlite3

    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 13, 6)
    edited = consolidated_copy(path, tmp_path / "edited.db")
    conn = sqlite3.connect(edited)
    conn.execute("DROP TRIGGER journal_events_no_update")
    conn.execute('UPDATE events SET payload = \'{"reason":"edited"}\' WHERE seq = 12')
    conn.commit()
    conn.close()
    report = ship([edited], pg_url, batch_size=5)
    refused = report.journals[0].refused
    assert refused is not None and (refused.rule, refused.seq) == ("hash_mismatch", 12)
    assert store_rows(pg_url, jid) == local_rows(path)[:11]
    assert [f.rule for f in store_findings(pg_url, jid)] == ["hash_mismatch"]
    assert ship([path], pg_url).ok, "the genuine journal goes on from there"
    assert store_rows(pg_url, jid) == local_rows(path)


def test_the_store_parses_payloads_when_they_are_read_not_at_ingest(
    pg_url: str, tmp_path: Path
) -> None:
    """Issue 25: the events keep the payload text only (no jsonb copy written per event), with
    three secondary indexes: a call's events, and (partial) the events outside a call and the
    deprecated uses."""
    path = tmp_path / "j.db"
    jid = write_fleet_journal(path, 0, calls=12)
    assert ship([path], pg_url, batch_size=7).ok
    with psycopg.connect(pg_url) as conn:
        jsonb_columns = conn.execute(
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'agentteam'"
            " AND c.relkind IN ('r', 'p') AND c.relname LIKE 'events%%' AND a.attnum > 0"
            " AND NOT a.attisdropped AND a.atttypid = 'jsonb'::regtype"
        ).fetchall()
        indexes = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes"
                " WHERE schemaname = 'agentteam' AND tablename = 'events'"
            ).fetchall()
        )
        docs = conn.execute(
            "SELECT kind, payload, doc FROM agentteam.event_docs WHERE journal_id = %s"
            " ORDER BY seq",
            (jid,),
        ).fetchall()
        sessions = conn.execute(
            "SELECT client_name FROM agentteam.sessions WHERE journal_id = %s", (jid,)
        ).fetchall()
    assert jsonb_columns == []
    assert sorted(indexes) == ["events_call", "events_deprecated", "events_pkey", "events_session"]
    assert "(journal_id, call_id, seq)" in indexes["events_call"]
    assert indexes["events_deprecated"].endswith("WHERE (kind = 'deprecated_usage'::text)")
    assert indexes["events_session"].endswith(
        "(journal_id, session_id, kind, seq) WHERE (call_id IS NULL)"
    )
    assert len({kind for kind, _, _ in docs}) > 3
    assert [doc for _, _, doc in docs] == [json.loads(payload) for _, payload, _ in docs]
    with journal.open_reader(path) as reader:
        started = [json.loads(r[14]) for r in reader.rows() if r[6] == "session_started"]
    assert [name for (name,) in sessions] == [s.get("client_name") for s in started]
