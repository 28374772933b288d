"""Checkpoints verify with the public key alone, on another machine; each forgery fails by seq.

"Another machine" is a fresh XDG_CONFIG_HOME without the private key: only the public key
(`agentteam-replay key` prints it) given with --trusted-key makes the signatures count.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._cli import main

from .replay_helpers import Built, consolidated_copy, everyday_journal, replay_cli, tamper

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers

N = 12  # events; checkpoints every 5 and on close: 5, 10, 12


@dataclass
class Origin:
    """A journal as the bridge leaves it on the machine that wrote it."""

    config: Path
    path: Path
    vkey: str

    @property
    def exported(self) -> Path:
        return Path(f"{self.path}.checkpoint.json")


def _call(i: int) -> journal.Event:
    return journal.Event(
        session_id="s1",
        call_id=f"c{i}",
        gen_ai_tool_name="task_list",
        payload=journal.CallReceived(arguments={"i": i}),
    )


def _append(path: Path, key: journal.SigningKey | journal.HmacKey, first: int, n: int) -> None:
    exported = Path(f"{path}.checkpoint.json")
    with journal.open_sync_writer(
        path, key=key, checkpoint_every=5, checkpoint_path=exported
    ) as writer:
        for i in range(first, first + n):
            writer.append(_call(i))


@pytest.fixture
def origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Origin:
    config = tmp_path / "origin-config"
    key = journal.load_key(config / "agentteam-bridge" / "journal-signing.key")
    path = tmp_path / "origin" / "journal.db"
    path.parent.mkdir()
    _append(path, key, 0, N)
    return Origin(config, path, key.verifier.to_text())


@pytest.fixture
def auditor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Another machine: its own empty config dir; the journal copied into it."""
    config = tmp_path / "auditor-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return tmp_path / "auditor"


def _copy(origin: Origin, auditor: Path) -> Path:
    """What reaches the auditor: the journal and the checkpoint exported beside it."""
    auditor.mkdir(exist_ok=True)
    target = auditor / "journal.db"
    consolidated_copy(origin.path, target)
    if origin.exported.exists():
        shutil.copy(origin.exported, f"{target}.checkpoint.json")
    return target


def _verify(*args: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(["verify", *map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _rules(out: Any) -> list[tuple[int, str]]:
    return [(f["seq"], f["rule"]) for f in out["findings"]]


def test_a_copied_journal_verifies_only_with_the_public_key(
    origin: Origin, auditor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = _copy(origin, auditor)
    code, out = _verify(copy, capsys=capsys)
    assert code == 1 and _rules(out) == [
        (1, "checkpoint_unverified"),  # the first commit's
        (5, "checkpoint_unverified"),
        (10, "checkpoint_unverified"),
        (12, "checkpoint_unverified"),
        (12, "checkpoint_unverified"),  # the exported one and the stored one
    ]
    assert "no trusted key" in out["findings"][0]["detail"] and out["trusted_keys"] == []
    code, out = _verify(copy, "--trusted-key", origin.vkey, capsys=capsys)
    assert code == 0 and out["ok"], out["findings"]
    assert out["journals"][0]["signatures_checked"] == 5
    assert out["journals"][0]["recorded_keys"] == [origin.vkey]
    key_file = auditor / "laptop.vkey"
    key_file.write_text(origin.vkey + "\n")
    assert _verify(copy, "--trusted-key", key_file, capsys=capsys)[0] == 0
    # Accepting unverified signatures is a choice made explicitly, and reported as such.
    code, out = _verify(copy, "--accept-unverified", capsys=capsys)
    assert code == 0 and out["journals"][0]["signatures_unchecked"] == 5


def _resign_rewritten_history(path: Path) -> None:
    """Rewrite seq 3, re-chain everything after it, and sign it all with the attacker's key,
    naming that key in the journal as if it had always been the one."""
    attacker = journal.SigningKey("agentteam-bridge/attacker", bytes(range(7, 39)))
    conn = sqlite3.connect(path)
    rows = [list(r) for r in conn.execute(f"SELECT {', '.join(journal.COLUMNS)} FROM events")]
    journal_id = conn.execute("SELECT value FROM journal_meta WHERE key = 'journal_id'").fetchone()
    conn.close()
    rows[2][14] = '{"arguments":{"i":-1}}'
    for i in range(2, len(rows)):
        rows[i][15] = rows[i - 1][16]
        rows[i][16] = journal.row_hash(tuple(rows[i]))
    forged = journal.sign_checkpoint(
        attacker, journal_id=journal_id[0], seq=N, head_hash=rows[-1][16], ts_wall="now"
    )
    tamper(
        path,
        *(
            f"UPDATE events SET payload = '{r[14]}', prev_hash = '{r[15]}', hash = '{r[16]}'"
            f" WHERE seq = {r[0]}"
            for r in rows[2:]
        ),
        "DELETE FROM checkpoints",
        f"UPDATE journal_meta SET value = '{attacker.verifier.to_text()}'"
        " WHERE key = 'signing_key'",
        "INSERT INTO checkpoints (journal_id, seq, head_hash, ts_wall, key_id, signature)"
        f" VALUES ('{journal_id[0]}', {N}, '{forged.head_hash}', 'now', '{forged.key_id}',"
        f" '{forged.signature}')",
    )
    journal.export_checkpoint(forged, Path(f"{path}.checkpoint.json"))


def _forge_a_checkpoint(path: Path) -> None:
    """Move the checkpoint of seq 5 to seq 4, keeping its signature."""
    tamper(
        path,
        "UPDATE checkpoints SET seq = 4,"
        " head_hash = (SELECT hash FROM events WHERE seq = 4) WHERE seq = 5",
    )


@dataclass(frozen=True)
class Case:
    name: str
    attack: Callable[[Path], None]
    expected: list[tuple[int, str]]


CASES = [
    Case(
        "re-signed rewritten history",
        _resign_rewritten_history,
        # The payload no longer matches its leaf's salted digest (v2), whatever is re-signed.
        [
            (3, "payload_digest_mismatch"),
            (N, "checkpoint_unverified"),
            (N, "checkpoint_unverified"),
        ],
    ),
    Case(
        "forged checkpoint",
        _forge_a_checkpoint,
        [(4, "checkpoint_root_mismatch"), (4, "checkpoint_signature_invalid")],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_forgery_fails_with_its_seq_under_the_trusted_key(
    origin: Origin, auditor: Path, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    case.attack(origin.path)
    code, out = _verify(_copy(origin, auditor), "--trusted-key", origin.vkey, capsys=capsys)
    assert code == 1 and _rules(out) == case.expected


def test_an_old_checkpoint_exported_over_a_truncated_tail_is_caught_by_a_held_checkpoint(
    origin: Origin, auditor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = auditor.parent / "witness" / "held.json"
    held.parent.mkdir()
    shutil.copy(origin.exported, held)  # the auditor's copy of the latest checkpoint (seq 12)
    with journal.open_reader(origin.path) as reader:
        older = next(cp for cp in reader.checkpoints() if cp.seq == 5)
    # The attacker cuts the journal back to seq 7, drops the checkpoints beyond it, and puts
    # the older signed checkpoint in the exported file: a consistent, correctly signed prefix.
    tamper(origin.path, "DELETE FROM events WHERE seq > 7", "DELETE FROM checkpoints WHERE seq > 7")
    journal.export_checkpoint(older, origin.exported)
    copy = _copy(origin, auditor)
    code, out = _verify(copy, "--trusted-key", origin.vkey, capsys=capsys)
    [report] = out["journals"]
    # From the file alone it cannot be told; the report says the checkpoint is no witness.
    assert code == 0 and report["held_checkpoint_beside"] and report["held_checkpoint_seq"] == 5
    code, out = _verify(copy, "--trusted-key", origin.vkey, "--checkpoint", held, capsys=capsys)
    assert code == 1 and _rules(out) == [(8, "truncated_before_checkpoint")]
    assert "journal ends at seq 7" in out["findings"][0]["detail"]
    # Cut without removing the stored checkpoints, the table itself tells (it is append-only).
    tamper(copy, "DELETE FROM events WHERE seq > 3")
    code, out = _verify(copy, "--trusted-key", origin.vkey, "--no-auto-checkpoint", capsys=capsys)
    # (the first commit's checkpoint still covers seq 1; the one at 5 names events now gone)
    assert code == 1 and _rules(out) == [(4, "truncated_before_checkpoint")]


def test_a_replaced_key_file_shows_as_a_rotation_and_fails_the_default_check(
    origin: Origin,
    auditor: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key_file = origin.config / "agentteam-bridge" / "journal-signing.key"
    intruder = journal.SigningKey("agentteam-bridge/intruder", bytes(range(3, 35)))
    key_file.write_text(intruder.to_text() + "\n")
    _append(origin.path, journal.load_key(key_file, create=False), N, 3)
    with journal.open_reader(origin.path) as reader:
        [rotated] = reader.events(kind="key_rotated")
    assert rotated.seq == N + 1 and rotated.payload.previous == origin.vkey  # type: ignore[union-attr]
    code, out = _verify(_copy(origin, auditor), "--trusted-key", origin.vkey, capsys=capsys)
    # signed at N + 3 (a multiple of 5) and at close, N + 4 (stored and exported)
    assert code == 1 and _rules(out) == [
        (N + 3, "checkpoint_unverified"),
        *[(N + 4, "checkpoint_unverified")] * 2,
    ]
    assert "agentteam-bridge/intruder" in out["findings"][0]["detail"]
    # On the origin machine the local (replaced) key is trusted, and the journal names the key
    # it replaced: the default check fails there, saying which key it trusted.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(origin.config))
    code = main(["verify", str(origin.path), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 1 and _rules(out) == [(N + 1, "key_file_replaced")]
    assert out["trusted_local_key_file"] and f"trusted this machine's key file {key_file}" in (
        captured.err
    )


def test_an_hmac_era_journal_verifies_with_its_old_key_file(
    tmp_path: Path, auditor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = b"an old hmac key, 32 bytes long!!"
    path = tmp_path / "old" / "journal.db"
    path.parent.mkdir()
    _append(path, journal.HmacKey(secret), 0, N)
    old_key = tmp_path / "journal.key"
    old_key.write_text(secret.hex() + "\n")
    code, out = _verify(path, "--key", old_key, capsys=capsys)
    assert code == 0 and out["journals"][0]["signatures_checked"] == 5  # at 1, 5, 10, 12 + file
    code, out = _verify(path, capsys=capsys)
    assert code == 1 and {rule for _, rule in _rules(out)} == {"checkpoint_unverified"}
    # On the machine that has it, the old key file is found by itself.
    legacy = journal.legacy_key_path()
    legacy.parent.mkdir(parents=True)
    shutil.copy(old_key, legacy)
    assert _verify(path, capsys=capsys)[0] == 0


def test_the_key_command_prints_the_public_key_and_fingerprint(
    auditor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["key"]) == 2
    assert "no signing key at" in capsys.readouterr().err
    assert main(["key", "--create", "--json"]) == 0
    captured = capsys.readouterr()
    info = json.loads(captured.out)
    key = journal.load_key(create=False)
    assert info == {
        "path": str(journal.default_key_path()),
        "name": key.verifier.name,
        "vkey": key.verifier.to_text(),
        "fingerprint": key.verifier.fingerprint,
    }
    assert info["vkey"] in captured.err  # announced at creation too
    assert stat.S_IMODE(journal.default_key_path().stat().st_mode) == 0o600
    assert main(["key"]) == 0
    assert info["vkey"] in capsys.readouterr().out


def test_a_real_bridge_journal_copied_elsewhere_verifies_only_with_its_public_key(
    everyday_journal: Built, tmp_path: Path
) -> None:
    elsewhere = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    shown = replay_cli("key", env={"XDG_CONFIG_HOME": str(everyday_journal.key_path.parents[1])})
    assert shown.returncode == 0 and everyday_journal.vkey in shown.stdout
    copy = tmp_path / "journal.db"
    consolidated_copy(everyday_journal.path, copy)
    done = replay_cli("verify", copy, env=elsewhere)
    assert done.returncode == 1 and "checkpoint_unverified" in done.stdout
    assert "no trusted key" in done.stdout and "--trusted-key" in done.stdout  # what to do
    done = replay_cli("verify", copy, "--trusted-key", everyday_journal.vkey, env=elsewhere)
    assert done.returncode == 0, done.stdout
    assert "signatures verified" in done.stdout


def test_trusted_key_takes_what_agentteam_replay_key_prints_in_every_form(
    origin: Origin, auditor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = _copy(origin, auditor)
    printed = replay_cli("key", env={"XDG_CONFIG_HOME": str(origin.config)})
    assert printed.returncode == 0, printed.stderr
    (line,) = [line for line in printed.stdout.splitlines() if line.startswith("public key:")]
    redirected = auditor / "laptop.vkey"  # `agentteam-replay key > laptop.vkey`
    redirected.write_text(printed.stdout)
    bare = auditor / "bare.vkey"
    bare.write_text(origin.vkey)
    started = f"agentteam: created the signing key K; public key {origin.vkey} (fingerprint F)"
    for given in (origin.vkey, line, printed.stdout, started, str(redirected), str(bare)):
        code, out = _verify(copy, "--trusted-key", given, capsys=capsys)
        assert code == 0 and out["journals"][0]["signatures_checked"] == 5, (given, out)
    other = journal.SigningKey("agentteam-bridge/other", bytes(range(32))).verifier.to_text()
    for refused in (f"{origin.vkey} {other}", "public key: none", origin.vkey[:-4]):
        code = main(["verify", str(copy), "--trusted-key", refused, "--json"])
        assert code == 2, refused
        assert "--trusted-key" in capsys.readouterr().err
