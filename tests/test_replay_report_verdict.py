"""``report``'s verdict is ``verify``'s, whatever the files hold or do between its two reads.

The report verifies in a second process that neither screens rows for secrets nor decodes the
payloads no check reads, while its own pass over the calls decodes and screens every row of
every file (replay._report). These tests change the files between the two reads, as an insider
or a retention job can, and generate tampered journals, comparing ``report(...).verify`` with
``verify(...)`` run on the same files afterwards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import CallReceived, CallResult, Event

from .journal_helpers import KEY
from .journal_helpers.segmented import SEGMENT, call_events, files_of, session_event


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
