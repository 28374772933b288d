"""Ed25519 checkpoints: the C2SP signed-note format, key rotation, and HMAC-era journals."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentteam_task_bridge import journal

from .journal_helpers import KEY, SESSION, VKEY

# The reference example of golang.org/x/mod/sumdb/note (the signed-note spec's implementation).
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_SIGNATURE = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)


def _call(i: int) -> journal.Event:
    return journal.Event(
        session_id=SESSION,
        call_id=f"c{i}",
        gen_ai_tool_name="task_list",
        payload=journal.CallReceived(arguments={"i": i}),
    )


def _write(path: Path, key: object, n: int, start: int = 0) -> None:
    with journal.open_sync_writer(path, key=key, checkpoint_every=5) as writer:  # type: ignore[arg-type]
        for i in range(start, start + n):
            writer.append(_call(i))


def _rules(report: journal.VerifyReport) -> list[tuple[int | None, str]]:
    return [(f.seq, f.rule) for f in report.findings]


def test_keys_and_signatures_match_the_signed_note_reference_byte_for_byte() -> None:
    signer = journal.SigningKey.parse(GO_SKEY)
    assert signer.to_text() == GO_SKEY
    assert signer.verifier.to_text() == GO_VKEY
    assert signer.sign(GO_TEXT.encode()) == GO_SIGNATURE
    verifier = journal.VerifierKey.parse(GO_VKEY)
    assert verifier.verify(GO_TEXT.encode(), base64.b64decode(GO_SIGNATURE)[4:])
    for bad in (GO_VKEY.replace("c74f20a3", "c74f20a4"), "PeterNeumann+c74f20a3", "a b+00+AA=="):
        with pytest.raises(ValueError):
            journal.VerifierKey.parse(bad)


def test_a_checkpoint_is_a_tlog_checkpoint_note_any_reader_can_verify(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    _write(path, KEY, 3)
    with journal.open_reader(path) as reader:
        checkpoint = max(reader.checkpoints(), key=lambda cp: cp.seq)  # the first commit's at 1
        head = reader.head()
    text, _, signature_line = checkpoint.note().rpartition("\n\n")
    origin, size, root = text.split("\n")
    assert origin == f"agentteam-journal/{checkpoint.journal_id}"
    # The root line is the RFC 6962 Merkle tree hash at that size (c2sp.org/tlog-checkpoint),
    # recomputed here from the leaves alone.
    assert int(size) == head[0] == 3
    with journal.open_reader(path) as reader:
        leaves = [journal.leaf_hash(reader.leaf(seq) or b"") for seq in (1, 2, 3)]
    expected = journal.node_hash(journal.node_hash(leaves[0], leaves[1]), leaves[2])
    assert base64.b64decode(root) == expected
    # Verified here without this project's code: the spec's key ID rule and plain Ed25519.
    dash, name, encoded = signature_line.rstrip("\n").split(" ")
    raw = base64.b64decode(encoded)
    public = base64.b64decode(VKEY.to_text().split("+", 2)[2])[1:]
    assert (dash, name) == ("—", "agentteam-bridge/seed")
    assert raw[:4] == hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], (text + "\n").encode())


def test_a_new_journal_names_its_key_and_a_changed_key_is_a_rotation_event(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    old, new = journal.SigningKey("example/old", KEY), journal.SigningKey("example/new", bytes(32))
    _write(path, old, 7)
    _write(path, new, 7, start=7)
    with journal.open_reader(path) as reader:
        assert reader.recorded_keys() == [(0, old.verifier.to_text()), (8, new.verifier.to_text())]
        [rotated] = reader.events(kind="key_rotated")
        assert rotated.payload == journal.KeyRotated(
            vkey=new.verifier.to_text(),
            fingerprint=new.verifier.fingerprint,
            previous=old.verifier.to_text(),
        )
        signers = {cp.seq: cp.key_id for cp in reader.checkpoints()}
    assert signers == {  # the first commit, each multiple of 5, each close
        1: old.key_id,
        5: old.key_id,
        7: old.key_id,
        10: new.key_id,
        15: new.key_id,
    }
    both = journal.verify(path, trusted=[old.verifier, new.verifier])
    assert both.ok and both.signatures_checked == 5
    # Trusting the old key alone: what the new key signed fails, named at its seq.
    assert _rules(journal.verify(path, trusted=[old.verifier])) == [
        (10, "checkpoint_unverified"),
        (15, "checkpoint_unverified"),
    ]
    _write(path, new, 1, start=14)  # the same key again: nothing more is recorded
    with journal.open_reader(path) as reader:
        assert len(reader.recorded_keys()) == 2


def test_a_checkpoint_signed_by_another_key_than_the_journal_names_is_reported(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    _write(path, KEY, 3)
    with journal.open_reader(path) as reader:
        head_seq, head_hash = reader.head()
        journal_id = reader.journal_id
    assert journal_id is not None
    stranger = journal.SigningKey("example/stranger", bytes(32))
    planted = journal.sign_checkpoint(
        stranger, journal_id=journal_id, seq=head_seq, head_hash=head_hash, ts_wall="x"
    )
    report = journal.verify(path, checkpoint=planted, trusted=[VKEY, stranger.verifier])
    assert _rules(report) == [(head_seq, "checkpoint_key_unexpected")]
    assert "example/stranger" in report.findings[0].detail


def test_an_hmac_era_journal_verifies_with_its_old_key_and_migrates_by_rotation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    legacy = journal.HmacKey(b"an old hmac key, 32 bytes long!!")
    _write(path, legacy, 6)  # what the code before Ed25519 wrote
    with journal.open_reader(path) as reader:
        assert [cp.scheme for cp in reader.checkpoints()] == ["hmac", "hmac", "hmac"]
        assert reader.recorded_keys() == []
    report = journal.verify(path, trusted=[legacy])
    assert report.ok and report.signatures_checked == 3
    forged = journal.verify(path, trusted=[journal.HmacKey(b"another key of 32 bytes long!!!!")])
    assert {rule for _, rule in _rules(forged)} == {"checkpoint_unverified"}
    # The first Ed25519 writer records the migration in the chain.
    _write(path, KEY, 3, start=6)
    with journal.open_reader(path) as reader:
        [rotated] = reader.events(kind="key_rotated")
        assert rotated.seq == 7 and rotated.payload.previous == f"hmac:{legacy.key_id}"  # type: ignore[union-attr]
        assert [cp.scheme for cp in reader.checkpoints()] == ["hmac", "hmac", "hmac", "ed25519"]
    assert journal.verify(path, trusted=[legacy, VKEY]).ok
    assert _rules(journal.verify(path, trusted=[VKEY])) == [
        (1, "checkpoint_unverified"),
        (5, "checkpoint_unverified"),
        (6, "checkpoint_unverified"),
    ]


def test_the_signing_key_is_created_private_and_announced_with_its_public_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    old = os.umask(0)
    try:
        key = journal.load_key()
    finally:
        os.umask(old)
    path = journal.default_key_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    announced = capsys.readouterr()
    assert announced.out == ""  # stdout belongs to MCP
    assert key.verifier.to_text() in announced.err and key.verifier.fingerprint in announced.err
    assert key.to_text().split("+", 4)[4] not in announced.err  # never the private half
    assert journal.load_key().to_text() == key.to_text()  # reused, announced once
    assert capsys.readouterr().err == ""
    assert key.verifier.name.startswith("agentteam-bridge/")


def test_the_key_file_carries_its_public_half_so_a_writer_opens_without_ed25519(
    tmp_path: Path,
) -> None:
    key = journal.SigningKey("example/k", KEY)
    signer_line, verifier_line = key.to_file_text().splitlines()
    assert journal.SigningKey.parse(signer_line).to_file_text() == key.to_file_text()
    assert verifier_line == key.verifier.to_text()
    # A second line that is not the first line's public key is refused when it would sign.
    other = journal.SigningKey("example/k", bytes(32)).verifier.to_text()
    with pytest.raises(ValueError):
        journal.SigningKey.parse(f"{signer_line}\n{other}\n").sign(b"x")
    with pytest.raises(ValueError, match="different keys"):
        journal.SigningKey.parse(f"{signer_line}\n{VKEY.to_text()}\n")
