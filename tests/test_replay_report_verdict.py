"""``report``'s verdict is ``verify``'s, whatever the files hold or do between its two reads.

The report verifies in a second process that neither screens rows for secrets nor decodes the
payloads no check reads, while its own pass over the calls decodes and screens every row of
every file (replay._report). These tests change the files between the two reads, as an insider
or a retention job can, and generate tampered journals, comparing ``report(...).verify`` with
``verify(...)`` run on the same files afterwards.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import CallReceived, CallResult, Event

from .journal_helpers import KEY
from .journal_helpers.segmented import SEGMENT, call_events, files_of, session_event
from .replay_helpers import call_event, injected, route, session_started, tamper, write_events


def _segmented_with_a_secret(path: Path) -> None:
    """Two segments; the first holds a token's shape in a call's result (no check reads it)."""
    leak = "leak"
    with journal.open_sync_writer(path, key=KEY, segment_bytes=SEGMENT) as writer:
        writer.append(session_event("s0"))
        writer.append_many(
            [
                Event(
                    session_id="s0",
                    call_id=leak,
                    gen_ai_tool_name="task_get",
                    payload=CallReceived(arguments={"number": 1}),
                ),
                Event(
                    session_id="s0",
                    call_id=leak,
                    gen_ai_tool_name="task_get",
                    payload=CallResult(result={"note": "ATK_0123456789abcdef"}),
                ),
            ]
        )
        for i in range(12):
            writer.append_many(call_events(i, "s0"))


def _between_the_reads(
    monkeypatch: pytest.MonkeyPatch, signal: Path, change: Callable[[], None]
) -> None:
    """``change`` the files after the verifying process read them and before the pass opens
    them."""
    here = os.getpid()
    real_verify, real_open = replay._verify.verify, replay._report.open_journals

    def verify_then_say(*args: Any, **kwargs: Any) -> Any:
        result = real_verify(*args, **kwargs)
        if os.getpid() != here:
            signal.touch()
        return result

    def change_then_open(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 60
        while not signal.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert signal.exists()
        change()
        return real_open(*args, **kwargs)

    monkeypatch.setattr("agentteam_task_bridge.replay._report.verify", verify_then_say)
    monkeypatch.setattr("agentteam_task_bridge.replay._report.open_journals", change_then_open)


def test_a_file_gone_between_the_two_reads_is_verified_whole_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first segment, holding a secret's shape, is removed (pruned by hand) after the
    verifying process read it and before the pass screened it: the journal's head is the same,
    yet the process's verdict (neither the secret nor the missing segment) is no verify's."""
    path = tmp_path / "journal.db"
    _segmented_with_a_secret(path)
    first = files_of(path)[0]
    before = replay.verify([path], accept_unverified=True)
    assert "secret_in_payload" in {f.rule for f in before.findings}
    _between_the_reads(monkeypatch, tmp_path / "verified", first.unlink)
    reported = replay.report([path], accept_unverified=True)
    now = replay.verify([path], accept_unverified=True)
    assert "segment_missing" in {f.rule for f in now.findings}
    assert reported.verify == now


def test_a_sealed_segment_erased_between_the_two_reads_is_verified_whole_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erasure journals its ``payload_erased`` event in the live segment first, then erases
    the sealed segments (journal._erase): where the verifying process read in between, it saw
    the secret unerased (and, screening nothing, did not report it) while the pass saw it
    erased; the heads and the files are the same, the erased seqs are not."""
    path = tmp_path / "journal.db"
    _segmented_with_a_secret(path)
    first = files_of(path)[0]
    unerased = first.read_bytes()
    signer = journal.SigningKey("agentteam-bridge/seed", KEY)
    done = journal.erase_payloads(
        path, journal.EraseSelector(call_id="leak"), reason="r", key=signer
    )
    assert done.seqs and str(first) in done.files
    erased = first.read_bytes()
    first.write_bytes(unerased)  # as it was between the live segment's event and its erasure
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm"))]
    half = replay.verify([path], accept_unverified=True)
    assert "secret_in_payload" in {f.rule for f in half.findings}
    _between_the_reads(monkeypatch, tmp_path / "verified", lambda: first.write_bytes(erased))
    reported = replay.report([path], accept_unverified=True)
    now = replay.verify([path], accept_unverified=True)
    assert now.journals[0].erased_seqs == done.seqs
    assert "secret_in_payload" not in {f.rule for f in now.findings}
    assert reported.verify == now


def _calls_journal(path: Path) -> None:
    """Two sessions' calls of every outcome the checks read, a gap and a session's end."""
    events = [session_started("s1"), session_started("s2", agent_id="agt_2")]
    for i in range(4):
        session, agent = ("s1", "agt_1") if i % 2 else ("s2", "agt_2")
        call = f"c{i}"

        def event(payload: journal.Payload, call: str = call, s: str = session) -> Event:
            return call_event(call, payload, tool="task_create", session=s)

        request = journal.UpstreamRequest(method="POST", route=route("", agent=agent), body={})
        outcome: journal.Payload = (
            CallResult(result={"data": {"number": i}})
            if i % 3
            else journal.CallError(error_code="outcome_unknown", retryable=False, message="m")
        )
        events += [
            event(CallReceived(arguments={"channel": "general", "number": i})),
            event(injected(agent=agent)),
            event(request),
            event(journal.UpstreamResponse(status=200, body={}, duration_ms=1.5)),
            event(outcome),
        ]
    events.append(
        Event(
            session_id="s1",
            payload=journal.JournalGap(
                reason="disk_full", since="2026-12-05T00:00:00Z", seconds=1.0, calls=["c3"]
            ),
        )
    )
    events.append(Event(session_id="s1", payload=journal.SessionEnded(reason="eof")))
    write_events(path, events)


@pytest.fixture(scope="module")
def calls_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("calls") / "journal.db"
    _calls_journal(path)
    return path


_COLUMNS = journal.COLUMNS
_NOT_UTF8 = object()  # a text column holding bytes that are not UTF-8
_VALUES = st.sampled_from(
    [
        "not json",
        "[]",
        "{}",
        '{"erased": true}',
        journal.ERASED_PAYLOAD,
        '{"status": true, "result": 3, "error_code": 5, "calls": 1, "workspace_id": 2}',
        '{"x": "ATK_0123456789ab"}',
        "Bearer abcdefghijkl",
        "eyJhbGciOi.eyJzdWIiOi.",
        "task_atk_0123456789",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        None,
        7,
        2.5,
        b"\x00bytes",
        "s1",
        "call_result",
        "upstream_request",
        _NOT_UTF8,
    ]
)
_EDITS = st.lists(
    st.tuples(st.integers(1, 24), st.sampled_from(_COLUMNS), _VALUES), min_size=0, max_size=3
)
_FILTERS = st.sampled_from(
    [
        None,
        replay.ReportFilter(session="s1"),
        replay.ReportFilter(journal="0"),
        replay.ReportFilter(journal="zz"),
        replay.ReportFilter(since=datetime(2000, 1, 1, tzinfo=UTC)),
        replay.ReportFilter(until=datetime(2000, 1, 1, tzinfo=UTC), session="s2"),
    ]
)


def _edit(path: Path, edits: list[tuple[int, str, object]]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        for seq, column, value in edits:
            if column == "seq":
                continue  # rows moved or merged: a sequence_gap, tried elsewhere
            try:
                if value is _NOT_UTF8:
                    conn.execute(
                        f"UPDATE events SET {column} = CAST(X'ff41' AS TEXT) WHERE seq = ?", (seq,)
                    )
                else:
                    conn.execute(f"UPDATE events SET {column} = ? WHERE seq = ?", (value, seq))
            except sqlite3.Error:
                continue  # a constraint the file keeps
    finally:
        conn.close()


def _outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", run())
    except replay.ReplayInputError as exc:
        return ("input", str(exc))
    except journal.JournalFormatError as exc:
        return ("format", str(exc))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    edits=_EDITS,
    copy=st.sampled_from(["none", "same", "edited copy", "older copy"]),
    no_id=st.booleans(),
    where=_FILTERS,
    stories=st.sampled_from([0, 3, 50]),
)
def test_the_reports_verdict_is_verifys_over_any_tampered_journal(
    calls_journal: Path,
    edits: list[tuple[int, str, object]],
    copy: str,
    no_id: bool,
    where: replay.ReportFilter | None,
    stories: int,
) -> None:
    """Whatever an insider writes in any column of any row (a payload that does not decode, in
    a kind the checks read or not; a secret's shape in the payload or the envelope; a value of
    another type; a text that is not UTF-8), in one copy of a journal or both, with or without
    its id, under any filter: the report's verdict is verify's, and where the report fails on
    a row, it fails as the audit does."""
    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp)
        path = directory / "journal.db"
        shutil.copyfile(calls_journal, path)
        if no_id:
            _edit_meta(path)
        other = directory / "backup.db"
        if copy == "older copy":
            shutil.copyfile(path, other)
            _edit(other, [])
            conn = sqlite3.connect(other, isolation_level=None)
            conn.execute("DELETE FROM events WHERE seq > 20")
            conn.close()
        elif copy != "none":
            shutil.copyfile(path, other)
        _edit(other if copy == "edited copy" else path, edits)
        paths = [directory] if copy != "none" else [path]
        options: dict[str, Any] = {"accept_unverified": True}
        verified = _outcome(lambda: replay.verify(paths, **options))
        reported = _outcome(lambda: replay.report(paths, where, stories=stories, **options).verify)
        audited = _outcome(lambda: replay.audit(paths))
        if reported[0] == "format":
            assert reported == audited
            assert verified[0] == "ok"
            assert "row_malformed" in {f.rule for f in verified[1].findings}
        elif reported[0] == "input" and verified[0] == "ok":  # a fork: every reader refuses it
            assert "fork" in {f.rule for f in verified[1].findings}
            assert audited == reported
        else:
            assert reported == verified
            if verified[0] == "ok" and audited[0] == "format":
                pytest.fail(f"the report did not fail as the audit did: {audited[1]}")


def _edit_meta(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM journal_meta WHERE key = 'journal_id'")
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["session_started", "call_received", "upstream_response"])
@pytest.mark.parametrize("text", ["not json", "[]"])
def test_a_named_calls_payload_that_does_not_decode_is_shown_as_the_pass_shows_it(
    calls_journal: Path, tmp_path: Path, kind: str, text: str
) -> None:
    """The page reads back by id the calls it names (an in-doubt call, an error's example),
    with their session's start: a payload there that does not decode is verify's
    payload_invalid, which the audit goes on past; so does the report, whatever ``stories``."""
    path = tmp_path / "journal.db"
    shutil.copyfile(calls_journal, path)
    tamper(
        path,
        "UPDATE events SET payload = ? WHERE seq = (SELECT min(seq) FROM events WHERE kind = ?)",
        params=(text, kind),
    )
    verified = replay.verify([path], accept_unverified=True)
    assert "payload_invalid" in {f.rule for f in verified.findings}
    replay.audit([path])
    for stories in (0, 50):
        reported = replay.report([path], stories=stories, accept_unverified=True)
        assert reported.verify == verified
        assert reported.stories  # the calls it names, read back: c0 and c3 are in doubt


@pytest.mark.parametrize("secret_at", ["none", "first", "last"])
def test_more_findings_than_verify_keeps_give_verifys_verdict(
    tmp_path: Path, secret_at: str
) -> None:
    """More findings than MAX_FINDINGS (calls without an outcome at a session's end), a
    secret's shape before them, after them or nowhere: the verdict, its omitted count
    included, is verify's; the report runs the pass again checked and does not fail."""
    path = tmp_path / "journal.db"
    calls = replay._verify.MAX_FINDINGS + 20
    events = [session_started("s1")]
    events += [call_event(f"c{i}", CallReceived(arguments={"n": i})) for i in range(calls)]
    events.append(Event(session_id="s1", payload=journal.SessionEnded(reason="eof")))
    write_events(path, events)
    if secret_at != "none":
        where = "min" if secret_at == "first" else "max"
        tamper(
            path,
            "UPDATE events SET gen_ai_tool_name = 'Bearer abcdefghijkl'"
            f" WHERE seq = (SELECT {where}(seq) FROM events WHERE call_id IS NOT NULL)",
        )
    verified = replay.verify([path], accept_unverified=True)
    assert verified.findings_omitted > 0
    reported = replay.report([path], stories=0, accept_unverified=True)
    assert reported.verify == verified


@pytest.mark.parametrize("layout", ["whole", "first missing", "copy of the live", "a later alone"])
def test_a_rolled_over_journal_gives_verifys_verdict(tmp_path: Path, layout: str) -> None:
    """A journal's segments (the first holding a secret's shape): whole, without its first
    segment, beside a copy of its live segment, or its later segment given alone."""
    path = tmp_path / "journal.db"
    _segmented_with_a_secret(path)
    first, live = files_of(path)
    paths: list[Path] = [path]
    if layout == "first missing":
        first.unlink()
    elif layout == "copy of the live":
        shutil.copyfile(live, tmp_path / "backup.db")
        paths = [tmp_path]
    elif layout == "a later alone":
        paths = [live]
    verified = replay.verify(paths, accept_unverified=True)
    reported = replay.report(paths, stories=0, accept_unverified=True)
    assert reported.verify == verified
    assert ("secret_in_payload" in {f.rule for f in verified.findings}) == (
        layout in ("whole", "copy of the live")
    )


@pytest.mark.parametrize("payload", [b"{}", "not utf-8"])  # NOT NULL; 7 reads as "7"
@pytest.mark.parametrize("column", ["session_id", "gen_ai_tool_name", "jsonrpc_request_id"])
def test_a_secret_beside_a_payload_that_is_not_a_text_gives_verifys_verdict(
    calls_journal: Path, tmp_path: Path, payload: object, column: str
) -> None:
    """A secret's shape in an envelope column of a row whose payload is no text: verify
    screens no such row (it reports the row: row_malformed); neither does the pass, and the
    report fails on the row as the audit does."""
    path = tmp_path / "journal.db"
    shutil.copyfile(calls_journal, path)
    value = _NOT_UTF8 if payload == "not utf-8" else payload
    _edit(path, [(6, "payload", value), (6, column, "Bearer abcdefghijkl")])
    verified = replay.verify([path], accept_unverified=True)
    assert "row_malformed" in {f.rule for f in verified.findings}
    audited = _outcome(lambda: replay.audit([path]))
    assert audited[0] == "format"
    assert _outcome(lambda: replay.report([path], accept_unverified=True).verify) == audited
