"""Erasure of payloads (journal._erase): the bytes leave every file, the proofs stay."""

from __future__ import annotations

import fcntl
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import msgspec
import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal._erase import Selector, erase
from tests.journal_helpers import KEY, SESSION, VKEY, event_leaves_file, write_journal
from tests.journal_helpers.segmented import (
    SEGMENT,
    TEXT,
    call_events,
    files_of,
    session_event,
)
from tests.replay_helpers import replay_main

SIGNER = journal.SigningKey("agentteam-bridge/seed", KEY)
SECRET = "Ada Lovelace, 12 Marylebone Road, ada@example.org"


def _events(n_calls: int, text_of: dict[int, str]) -> list[journal.Event]:
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
        title = text_of.get(i, f"task title number {i}")
        call = f"call-{i}"
        common = {
            "session_id": SESSION,
            "call_id": call,
            "mcp_method_name": "tools/call",
            "gen_ai_tool_name": "task_create",
            "jsonrpc_request_id": i,
        }
        events += [
            journal.Event(
                **common,  # type: ignore[arg-type]
                payload=journal.CallReceived(arguments={"channel": "eng", "title": title}),
            ),
            journal.Event(
                **common,  # type: ignore[arg-type]
                payload=journal.CallResult(result={"title": title, "pad": "x" * 3000 * (i % 3)}),
            ),
        ]
    return events


def _journal(
    tmp_path: Path,
    n_calls: int = 30,
    secret_calls: tuple[int, ...] = (3, 17),
    *,
    layout: str = "events",
) -> Path:
    """A written journal; its leaf columns in the events row (a file made since 0010) or, with
    ``layout="event_leaves"``, in the side table (a file made before)."""
    path = tmp_path / "journal.db"
    if layout == "event_leaves":
        event_leaves_file(path)
    write_journal(path, _events(n_calls, {i: f"{SECRET} #{i}" for i in secret_calls}))
    return path


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if p.is_file())


def _leaks(directory: Path, text: str, run: int = 12) -> list[str]:
    """Every file of ``directory`` holding a ``run``-byte piece of ``text`` (raw bytes)."""
    data = text.encode()
    pieces = {data[i : i + run] for i in range(len(data) - run + 1)}
    found = []
    for file in sorted(directory.iterdir()):
        if file.is_file():
            raw = file.read_bytes()
            found += [f"{file.name}: {p!r}" for p in pieces if p in raw][:1]
    return found


@pytest.mark.parametrize("layout", ["events", "event_leaves"])
def test_erase_removes_every_byte_run_and_proofs_still_verify(tmp_path: Path, layout: str) -> None:
    path = _journal(tmp_path, layout=layout)
    assert _leaks(tmp_path, SECRET)  # the test can see the text before
    before = journal.verify(path, trusted=[VKEY])
    assert before.ok, before.findings
    with journal.open_reader(path) as reader:
        root_before = journal.tree_hash(
            before.head_seq, journal.files_reader([(1, reader.stored_hash)])
        )

    result = erase(path, Selector(matching=SECRET), reason="subject request", key=SIGNER)

    assert result.seqs and result.event_seq is not None and result.scrubbed
    assert _leaks(tmp_path, SECRET) == []
    report = journal.verify(path, trusted=[VKEY])
    assert report.ok, report.findings
    assert report.erased_seqs == result.seqs
    with journal.open_reader(path) as reader:
        erased = [r for r in reader.events() if r.seq in result.seqs]
        assert all(r.payload == {"erased": True} for r in erased)
        (event,) = list(reader.events(kind="payload_erased"))
        assert isinstance(event.payload, journal.PayloadErased)
        assert event.payload.seqs == result.seqs
        assert event.payload.reason == "subject request" and event.payload.selector == "matching"
        assert SECRET not in str(event.payload)
    with journal.open_reader(path) as reader:
        read = journal.files_reader([(1, reader.stored_hash)])
        # The tree at the old size is the one signed before: every leaf is unchanged, and an
        # inclusion proof of each erased event still checks against the old root.
        assert journal.tree_hash(before.head_seq, read) == root_before
        for seq in result.seqs:
            leaf = reader.leaf(seq)
            assert leaf is not None and b"payload_sha256" in leaf
            proof = journal.inclusion_proof(seq - 1, before.head_seq, read)
            assert journal.verify_inclusion(
                seq - 1, before.head_seq, journal.leaf_hash(leaf), proof, root_before
            )


def test_erasing_twice_is_a_no_op_and_dry_run_changes_no_byte(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    snapshot = {p.name: p.read_bytes() for p in _files(path)}
    dry = erase(path, Selector(call_id="call-3"), reason="r", key=SIGNER, dry_run=True)
    assert dry.dry_run and dry.seqs == [8, 9] and dry.event_seq is None
    assert {p.name: p.read_bytes() for p in _files(path)} == snapshot

    first = erase(path, Selector(call_id="call-3"), reason="r", key=SIGNER)
    assert first.seqs == [8, 9]
    with journal.open_reader(path) as reader:
        head = reader.head()
    again = erase(path, Selector(call_id="call-3"), reason="r", key=SIGNER)
    assert again.seqs == [] and again.event_seq is None
    with journal.open_reader(path) as reader:
        assert reader.head() == head


def test_asking_whether_a_writer_holds_the_journal_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`erase` and `verify` ask one question, `journal.held_by_a_writer`, and on Linux answer it
    from /proc/locks: the probe never takes the lock, so a writer opening at that moment (a
    non-blocking exclusive lock) is never refused because of it."""
    path = _journal(tmp_path)
    taken: list[int] = []
    flock = fcntl.flock

    def recording(fd: int, operation: int) -> None:
        taken.append(operation)
        flock(fd, operation)

    with journal.open_sync_writer(path, key=KEY) as writer:
        live = writer.path
        monkeypatch.setattr(fcntl, "flock", recording)
        assert journal.held_by_a_writer(live)
        dry = erase(path, Selector(call_id="call-3"), reason="r", key=SIGNER, dry_run=True)
        assert dry.live and taken == []
        monkeypatch.undo()
    monkeypatch.setattr(fcntl, "flock", recording)
    assert not journal.held_by_a_writer(live)
    dry = erase(path, Selector(call_id="call-3"), reason="r", key=SIGNER, dry_run=True)
    assert not dry.live and taken == []


def test_selectors_choose_the_calls_they_name(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    by_task = erase(path, Selector(task=("eng", 7)), reason="r", key=SIGNER, dry_run=True)
    assert by_task.seqs == []  # no call names task 7 in its arguments
    session = erase(path, Selector(session_id=SESSION), reason="r", key=SIGNER, dry_run=True)
    assert len(session.seqs) == 61  # every event but the protected kinds (none yet)
    old = erase(path, Selector(older_than_days=1.0), reason="r", key=SIGNER, dry_run=True)
    assert old.seqs == []
    now = erase(path, Selector(older_than_days=0.0), reason="r", key=SIGNER, dry_run=True)
    with journal.open_reader(path) as reader:  # retention keeps the sessions' own events
        calls = [e.seq for e in reader.events() if e.call_id is not None]
    assert now.seqs == calls and 0 < len(calls) < 61


@pytest.mark.parametrize("layout", ["events", "event_leaves"])
def test_the_triggers_allow_exactly_an_erasure(tmp_path: Path, layout: str) -> None:
    path = _journal(tmp_path, layout=layout)
    leaves = "events" if layout == "events" else "event_leaves"  # the table with the salt
    conn = sqlite3.connect(path)
    try:
        refused = [
            "UPDATE events SET payload = '{\"erased\":true}' WHERE seq = 2",  # not named
            "INSERT INTO erased_seqs (seq, erased_by) VALUES (2, 99)",
            "UPDATE events SET payload = '{\"erased\":true}', error_type = 'x' WHERE seq = 2",
            "UPDATE events SET payload = '{\"other\":1}' WHERE seq = 2",
            f"UPDATE {leaves} SET salt = '', payload_sha256 = 'ab' WHERE seq = 2",
            f"UPDATE {leaves} SET salt = 'ab' WHERE seq = 2",
            f"UPDATE {leaves} SET salt = '', tree_hashes = x'00' WHERE seq = 2",
            "DELETE FROM events WHERE seq = 2",
            "DELETE FROM erased_seqs",
            "UPDATE erased_seqs SET erased_by = 1",
            "UPDATE events SET ts_wall = 'x' WHERE seq = 2",
        ]
        if layout == "events":  # the erasure must empty the row's salt, and only that
            refused += [
                "UPDATE events SET payload = '{\"erased\":true}' WHERE seq = 2",
                "UPDATE events SET payload = '{\"erased\":true}', salt = 'ab' WHERE seq = 2",
                "UPDATE events SET payload = '{\"erased\":true}', salt = '',"
                " payload_sha256 = 'ab' WHERE seq = 2",
            ]
        else:  # a file keeping its leaves aside has none in the events row, and gets none
            refused += [
                "UPDATE events SET payload = '{\"erased\":true}', salt = '' WHERE seq = 2",
            ]
        messages = []
        for statement in refused:
            try:
                conn.execute(statement)
            except sqlite3.IntegrityError as exc:
                messages.append(str(exc))
            else:
                # the INSERT is allowed (append-only table); the updates after it still refuse
                # anything but the erasure itself
                assert statement.startswith("INSERT"), statement
        assert len(messages) == len(refused) - 1
        # With the seq listed, the erasure itself passes; nothing else does.
        if layout == "events":
            conn.execute("UPDATE events SET payload = '{\"erased\":true}', salt = '' WHERE seq = 2")
        else:
            conn.execute("UPDATE events SET payload = '{\"erased\":true}' WHERE seq = 2")
            conn.execute("UPDATE event_leaves SET salt = '' WHERE seq = 2")
        conn.commit()
    finally:
        conn.close()
    # Written by hand, without a payload_erased event: verify names it.
    report = journal.verify(path, trusted=[VKEY])
    assert [f.rule for f in report.findings] == ["erasure_unrecorded"]


def test_a_v1_journal_is_refused(tmp_path: Path) -> None:
    from agentteam_task_bridge.journal import _schema

    path = tmp_path / "v1.db"
    conn = _schema.connect_writer(path)
    _schema.ensure_identity(conn, None, merkle=False)
    conn.close()
    with journal.open_sync_writer(path, key=KEY) as writer:
        writer.append_many(_events(2, {0: SECRET}))
    with pytest.raises(journal.JournalFormatError, match="v1 journal"):
        erase(path, Selector(matching=SECRET), reason="r", key=SIGNER)


# --- segmented pools and crashes ---------------------------------------------------------------

SEGMENT_SECRET_CALLS: Final = (1, 25, 58)


def _segmented(tmp_path: Path) -> Path:
    path = tmp_path / "journal.db"
    with journal.open_sync_writer(path, key=KEY, segment_bytes=SEGMENT) as writer:
        writer.append(session_event("s1"))
        for i in range(60):
            events = call_events(i)
            if i in SEGMENT_SECRET_CALLS:
                received = journal.CallReceived(arguments={"title": f"{SECRET} {i}", "d": TEXT})
                events[0] = msgspec.structs.replace(events[0], payload=received)
            writer.append_many(events)
    assert len(files_of(path)) >= 3
    return path


def test_erase_reaches_every_segment_of_a_pool(tmp_path: Path) -> None:
    path = _segmented(tmp_path)
    holding = set(_leaks_by_file(tmp_path, SECRET))
    assert len(holding) >= 2  # the text is in more than one segment

    result = erase(path, Selector(matching=SECRET), reason="r", key=SIGNER)

    assert len(result.seqs) == len(SEGMENT_SECRET_CALLS) and len(result.files) >= 2
    assert _leaks(tmp_path, SECRET) == []
    done = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["journals"][0]["erased_seqs"] == result.seqs
    # The event is in the live segment; the earlier files list their seqs in erased_seqs.
    with journal.open_reader(files_of(path)[-1]) as reader:
        assert [r.kind for r in reader.events(kind="payload_erased")] == ["payload_erased"]


_ERASE_SCRIPT: Final = """
import sys
from pathlib import Path
from agentteam_task_bridge import journal
from agentteam_task_bridge.journal._erase import Selector, erase
print("start", flush=True)
erase(Path(sys.argv[1]), Selector(matching=sys.argv[2]), reason="r",
      key=journal.SigningKey("agentteam-bridge/seed", bytes(range(32))))
print("done", flush=True)
"""


def test_sigkill_during_erase_leaves_the_old_or_the_new_state(tmp_path: Path) -> None:
    rng = random.Random(26)
    for round_ in range(5):
        directory = tmp_path / f"r{round_}"
        directory.mkdir()
        path = _segmented(directory)
        live = files_of(path)[-1]
        proc = subprocess.Popen(
            [sys.executable, "-c", _ERASE_SCRIPT, str(path), SECRET],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"start\n"  # imports done: the erasure begins now
        time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        # Each file is in its old state or its new one, and the journal verifies either way.
        report = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
        assert report.returncode == 0, report.stdout
        with journal.open_reader(live) as reader:
            events = list(reader.events(kind="payload_erased"))
        for file in files_of(path):
            with journal.open_reader(file) as reader:
                erased = [r.seq for r in reader.events() if r.payload == {"erased": True}]
            if not events:
                assert erased == [], file  # nothing erased before the event is journaled
        # A second run finishes whatever the first left: no byte of the text is left.
        erase(path, Selector(matching=SECRET), reason="r", key=SIGNER)
        assert _leaks(directory, SECRET) == []
        final = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
        assert final.returncode == 0, final.stdout


@pytest.mark.parametrize("looks", [1, 2, 3, 4, 6, 9])
def test_a_stopped_erasure_ends_as_a_crash_would_and_the_next_run_finishes_it(
    tmp_path: Path, looks: int
) -> None:
    """`stop` (a retention run at its session's end) says True from its `looks`-th look on:
    before the live segment (nothing changed), before a sealed one (the event journaled, that
    file as it was), or before a scrub; every file stays in its old or its new state."""
    path = _segmented(tmp_path)
    seen: list[bool] = []

    def stop() -> bool:
        seen.append(len(seen) + 1 >= looks)
        return seen[-1]

    try:
        erase(path, Selector(matching=SECRET), reason="r", key=SIGNER, stop=stop)
    except journal.JournalUnavailable:
        pass
    assert True in seen  # it was asked, and stopped
    report = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    assert report.returncode == 0, report.stdout
    with journal.open_reader(files_of(path)[-1]) as reader:
        journaled = list(reader.events(kind="payload_erased"))
    if looks == 1:  # stopped before the live segment's transaction: nothing erased
        assert journaled == []
    for file in files_of(path):
        with journal.open_reader(file) as reader:
            erased = [r.seq for r in reader.events() if r.payload == {"erased": True}]
        assert erased == [] or journaled, file  # nothing erased that no event names
    erase(path, Selector(matching=SECRET), reason="r", key=SIGNER)
    assert _leaks(tmp_path, SECRET) == []
    final = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    assert final.returncode == 0, final.stdout


def _leaks_by_file(directory: Path, text: str) -> list[str]:
    return [hit.split(":")[0] for hit in _leaks(directory, text)]


def test_an_erasure_signed_with_another_key_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    other = journal.SigningKey("agentteam-bridge/seed", bytes(32))
    snapshot = {p.name: p.read_bytes() for p in _files(path)}
    with pytest.raises(journal.JournalFormatError, match="not the one the journal names"):
        erase(path, Selector(matching=SECRET), reason="r", key=other)
    with journal.open_reader(path) as reader:
        assert not list(reader.events(kind="payload_erased"))
    assert _leaks(tmp_path, SECRET)
    assert snapshot["journal.db"] == (tmp_path / "journal.db").read_bytes()
