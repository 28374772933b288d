"""The store's witness cosigns (c2sp.org/tlog-cosignature) what the ingest accepted, own key.

Against a real PostgreSQL, as the logins that would act: the witness (a member of
``agentteam_witness``, its key file on its own machine) cosigns each journal's newest checkpoint
after checking it extends what it cosigned before; a shipping login cannot write a cosignature;
``verify --witness --witness-key`` trusts cosignatures under the named key only, and names a
store row the owner rewrote after cosigning.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._cosign import (
    Cosignature,
    CosignerKey,
    WitnessKey,
    cosigned_message,
    load_witness_key,
)
from agentteam_task_bridge.replay._fleet_cosign import cosign_once, cosignatures
from agentteam_task_bridge.replay._fleet_witness import witness_findings

from .fleet_helpers import append_calls, consolidated_copy, rewrite_payload, write_fleet_journal
from .journal_helpers import VKEY
from .test_journal_tlog import oracle  # noqa: F401  (the Go oracle fixture, built once)

WITNESS = WitnessKey("witness.example/w1", bytes(range(100, 132)))
OTHER = WitnessKey("witness.example/w1", bytes(range(1, 33)))  # same name, another key


def as_login(pg_url: str, name: str) -> str:
    return pg_url.replace("postgresql://postgres@", f"postgresql://{name}@")


@pytest.fixture
def logins(pg_url: str) -> Iterator[Any]:
    """``logins(role)``: the URL of a new login in ``role`` (agentteam_ship, agentteam_witness)."""
    made: list[str] = []

    def make(role: str) -> str:
        name = f"l_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            replay.ship([], pg_url)  # the store's schema and roles, as its owner
            admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE {role}")
        made.append(name)
        return as_login(pg_url, name)

    yield make
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


def rules(url: str, path: Path, *keys: CosignerKey) -> list[tuple[str, int | None]]:
    return [(f.rule, f.seq) for f in witness_findings(url, [path], witness_keys=list(keys))]


def head(path: Path) -> int:
    with journal.open_reader(path) as reader:
        return reader.head()[0]


def test_the_cosignature_is_the_specs_bytes() -> None:
    """cosignature/v1: the message, the key ID (type 0x04), the timestamped signature."""
    root = hashlib.sha256(b"root").digest()
    signed = WITNESS.cosign("j-1", 7, root, 1679315147)
    body = f"agentteam-journal/j-1\n7\n{base64.b64encode(root).decode()}\n"
    message = cosigned_message(body, 1679315147)
    assert message == b"cosignature/v1\ntime 1679315147\n" + body.encode()
    public = WITNESS.verifier.public_bytes
    key_hash = hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    raw = base64.b64decode(signed.signature)
    assert raw[:4] == key_hash and struct.unpack(">Q", raw[4:12]) == (1679315147,)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)  # raises if not
    assert signed.check(WITNESS.verifier) and not signed.check(OTHER.verifier)
    assert signed.line().startswith("— witness.example/w1 ")
    vkey = WITNESS.verifier.to_text()
    assert CosignerKey.parse(vkey) == WITNESS.verifier
    assert base64.b64decode(vkey.split("+", 2)[2])[:1] == b"\x04"
    for tampered in (
        Cosignature(**{**_fields(signed), "timestamp": 1679315148}),
        Cosignature(**{**_fields(signed), "tree_size": 8}),
        Cosignature(**{**_fields(signed), "root_hash": "00" * 32}),
    ):
        assert not tampered.check(WITNESS.verifier)


def test_the_specs_example_cosignature_line_parses() -> None:
    """The spec's example line: 4-byte key ID, 8-byte big-endian time, 64-byte signature."""
    line = (
        "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dl"
        "rDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
    )
    raw = base64.b64decode(line.split(" ")[2])
    assert len(raw) == 4 + 8 + 64
    assert struct.unpack(">Q", raw[4:12]) == (1679315147,)  # the example message's time


def _fields(c: Cosignature) -> dict[str, Any]:
    return {
        "journal_id": c.journal_id,
        "tree_size": c.tree_size,
        "root_hash": c.root_hash,
        "key_id": c.key_id,
        "timestamp": c.timestamp,
        "signature": c.signature,
    }


def test_the_witness_key_file_is_owner_only_and_never_in_the_store(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    os.umask(0o022)
    try:
        path = tmp_path / "w" / "witness.key"
        key = load_witness_key(path, name="witness.example/w2")
    finally:
        os.umask(0o077)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_witness_key(path).key_id == key.key_id
    with pytest.raises(ValueError, match="holds the key of witness"):
        load_witness_key(path, name="someone/else")
    path.chmod(0o644)
    with pytest.raises(PermissionError):
        load_witness_key(path)
    path.chmod(0o600)
    shipped = tmp_path / "a.db"
    write_fleet_journal(shipped, 1, 3)
    assert replay.ship([shipped], logins("agentteam_ship")).ok
    assert cosign_once(logins("agentteam_witness"), key).ok
    # PRIVATE+KEY+<name>+<key hash>+<base64 key data>: the data may hold "+" itself.
    private = path.read_text().split("\n")[0].split("+", 4)[4]
    assert len(private) >= 40, private
    with psycopg.connect(pg_url) as conn:
        dump = " ".join(str(r) for r in conn.execute("SELECT * FROM agentteam.cosignatures"))
    assert private not in dump and "PRIVATE" not in dump


def test_the_witness_cosigns_each_journal_once_it_extends_what_it_cosigned(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 2, 4)
    assert replay.ship([path], shipper).ok
    first = cosign_once(witness, WITNESS, now=1_800_000_000)
    ((item),) = first.journals
    assert (item.outcome, item.tree_size, item.previous_size) == ("cosigned", head(path), None)
    assert cosign_once(witness, WITNESS, now=1_800_000_001).journals == [], "nothing new"
    again = cosign_once(witness, WITNESS, now=1_800_000_001, every=True)
    assert [j.outcome for j in again.journals] == ["current"]
    append_calls(path, jid, 9, 3)
    assert replay.ship([path], shipper).ok
    grown = cosign_once(witness, WITNESS, now=1_800_000_002)
    assert [(j.outcome, j.previous_size) for j in grown.journals] == [("cosigned", item.tree_size)]
    with psycopg.connect(pg_url) as conn:
        rows = cosignatures(conn, jid)
        writers = {str(r[0]) for r in conn.execute("SELECT written_by FROM agentteam.cosignatures")}
    assert [r.tree_size for r in rows] == [head(path), item.tree_size]
    assert all(r.check(WITNESS.verifier) for r in rows)
    assert writers == {witness.split("//")[1].split("@")[0]}
    assert rules(pg_url, path, WITNESS.verifier) == []


def test_the_shipping_login_cannot_write_or_change_a_cosignature(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 3, 3)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    forged = OTHER.cosign(jid, head(path), b"\x01" * 32, 1_800_000_000)
    with psycopg.connect(shipper, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO agentteam.cosignatures"
                " (journal_id, tree_size, root_hash, key_id, cosigned_at, signature)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (jid, 10**6, forged.root_hash, WITNESS.key_id, 1, forged.signature),
            )
        for statement in (
            "UPDATE agentteam.cosignatures SET tree_size = tree_size + 1",
            "DELETE FROM agentteam.cosignatures",
            "TRUNCATE agentteam.cosignatures",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(witness, autocommit=True) as conn:  # the witness appends, no more
        for statement in (
            "UPDATE agentteam.cosignatures SET tree_size = tree_size + 1",
            "DELETE FROM agentteam.cosignatures",
            "TRUNCATE agentteam.cosignatures",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(pg_url, autocommit=True) as owner:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            owner.execute("UPDATE agentteam.cosignatures SET cosigned_at = 0")
    assert rules(pg_url, path, WITNESS.verifier) == []


def test_a_cosignature_by_another_key_is_not_trusted(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    write_fleet_journal(path, 4, 3)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, OTHER).ok  # a witness, but not the one this verifier names
    assert rules(pg_url, path, WITNESS.verifier) == [("witness_uncosigned", None)]
    assert rules(pg_url, path, OTHER.verifier) == []
    # A row naming the trusted key whose signature is another key's: a forgery, named.
    with psycopg.connect(pg_url, autocommit=True) as owner:
        row = owner.execute(
            "SELECT journal_id, tree_size, root_hash, cosigned_at, signature"
            " FROM agentteam.cosignatures"
        ).fetchone()
        assert row is not None
        owner.execute(
            "INSERT INTO agentteam.cosignatures"
            " (journal_id, tree_size, root_hash, key_id, cosigned_at, signature)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (row[0], row[1], row[2], WITNESS.key_id, row[3], row[4]),
        )
    assert rules(pg_url, path, WITNESS.verifier) == [
        ("witness_cosignature_invalid", head(path)),
        ("witness_uncosigned", None),
    ]


def test_a_store_row_the_owner_rewrote_after_cosigning_is_named(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 5, 5)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    with psycopg.connect(pg_url, autocommit=True) as owner:  # the owner can lift its triggers
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        owner.execute(
            "UPDATE agentteam.events SET payload = replace(payload, '\"eng\"', '\"ops\"')"
            " WHERE journal_id = %s AND seq = 7",
            (jid,),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    assert rules(pg_url, path, WITNESS.verifier) == [("witness_store_rewritten", 7)]
    # Its hash too (the row consistent in itself): still named, at the same seq.
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        owner.execute(
            "UPDATE agentteam.events SET hash = repeat('a', 64) WHERE journal_id = %s AND seq = 7",
            (jid,),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    assert ("witness_store_rewritten", 7) in rules(pg_url, path, WITNESS.verifier)


def test_a_journal_rewritten_or_cut_after_cosigning_is_caught(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    write_fleet_journal(path, 6, 6)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    last = head(path)
    rewritten = consolidated_copy(path, tmp_path / "rewritten.db")
    rewrite_payload(rewritten, 7, '{"arguments":{"channel":"elsewhere"},"meta_keys":[]}')
    assert rules(pg_url, rewritten, WITNESS.verifier) == [("witness_root_mismatch", 7)]
    cut = consolidated_copy(path, tmp_path / "cut.db")
    from .fleet_helpers import truncate_to

    truncate_to(cut, last - 4)
    assert rules(pg_url, cut, WITNESS.verifier) == [("witness_truncated", last - 3)]
    never = tmp_path / "never.db"
    write_fleet_journal(never, 7, 1)
    assert rules(pg_url, never, WITNESS.verifier) == [("witness_unknown", None)]


def test_verify_witness_key_on_the_command_line(pg_url: str, logins: Any, tmp_path: Path) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    write_fleet_journal(path, 8, 3)
    assert replay.ship([path], shipper).ok
    key_file = tmp_path / "witness" / "witness.key"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    cli = [sys.executable, "-m", "agentteam_task_bridge.replay._cli"]
    made = subprocess.run(
        [*cli, "witness", "--from", witness, "--key", str(key_file), "--name", "w.example/1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert "witness key w.example/1+" in made.stderr and "PRIVATE" not in made.stderr
    assert "cosigned" in made.stdout
    vkey = CosignerKey.find(key_file.read_text()).to_text()
    again = subprocess.run(
        [*cli, "witness", "--from", witness, "--key", str(key_file), "--json", "--all"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    schema = json.loads(
        (Path(__file__).parents[1] / "docs/replay-json/witness.schema.json").read_text()
    )
    from jsonschema import Draft202012Validator

    assert not list(Draft202012Validator(schema).iter_errors(report))
    assert [j["outcome"] for j in report["journals"]] == ["current"]
    assert report["witness_key"] == vkey and "PRIVATE" not in again.stdout
    verify = [*cli, "verify", str(path), "--json", "--witness", pg_url, "--witness-key"]
    good = subprocess.run(
        [*verify, vkey], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert good.returncode in (0, 3), good.stdout + good.stderr
    other = subprocess.run(
        [*verify, OTHER.verifier.to_text()],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert other.returncode == 1
    found = [f["rule"] for f in json.loads(other.stdout)["findings"]]
    assert "witness_uncosigned" in found
    bad = subprocess.run(
        [*verify, "not-a-key"], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert bad.returncode == 2 and "witness key" in bad.stderr


def test_go_checks_the_cosigned_note(
    pg_url: str,
    logins: Any,
    tmp_path: Path,
    oracle: Path,  # noqa: F811
) -> None:
    """An implementation this project did not write: Go's sumdb/note checks the journal's
    signature, crypto/ed25519 the cosignature/v1 line on the spec's bytes."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 9, 4)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS, now=1_790_000_123).ok
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash"
            " FROM agentteam.checkpoints WHERE journal_id = %s ORDER BY seq DESC LIMIT 1",
            (jid,),
        ).fetchone()
        (cosigned,) = cosignatures(conn, jid)
    assert row is not None
    checkpoint = journal.Checkpoint(
        journal_id=row[0],
        seq=row[1],
        head_hash=row[2],
        ts_wall=row[3],
        key_id=row[4],
        signature=row[5],
        root_hash=row[6],
    )
    assert cosigned.body() == checkpoint.note_text()
    note = tmp_path / "cosigned.note"
    note.write_text(checkpoint.note() + cosigned.line() + "\n")
    wkey = WITNESS.verifier.to_text()
    checked = subprocess.run(
        [str(oracle), "cosigned", VKEY.to_text(), wkey, str(note)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.split() == ["ok", str(checkpoint.seq), "1790000123"]
    raw = bytearray(base64.b64decode(cosigned.signature))
    raw[11] ^= 1  # another time than the one signed
    forged = Cosignature(**{**_fields(cosigned), "signature": base64.b64encode(raw).decode()})
    note.write_text(checkpoint.note() + forged.line() + "\n")
    refused = subprocess.run(
        [str(oracle), "cosigned", VKEY.to_text(), wkey, str(note)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1 and "does not verify" in refused.stderr
    other = subprocess.run(
        [str(oracle), "cosigned", VKEY.to_text(), OTHER.verifier.to_text(), str(note)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert other.returncode == 1


def test_the_witness_refuses_a_history_that_contradicts_what_it_cosigned(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    """A split view (the witness was shown another tree at a smaller size) and stored hashes
    the owner changed: never cosigned, said, exit status 1 on the command line."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 10, 4)
    assert replay.ship([path], shipper).ok
    seen = WITNESS.cosign(jid, 3, hashlib.sha256(b"another tree").digest(), 1_700_000_000)
    with psycopg.connect(witness, autocommit=True) as conn:  # what it cosigned earlier
        conn.execute(
            "INSERT INTO agentteam.cosignatures"
            " (journal_id, tree_size, root_hash, key_id, cosigned_at, signature)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (jid, 3, seen.root_hash, seen.key_id, seen.timestamp, seen.signature),
        )
    (refused,) = cosign_once(witness, WITNESS).journals
    assert (refused.outcome, refused.previous_size) == ("inconsistent", 3)
    assert cosign_once(witness, WITNESS).journals == [], "said once, not again every tick"
    assert not cosign_once(witness, WITNESS, every=True).ok
    fresh = WitnessKey("witness.example/w3", bytes(range(60, 92)))
    assert [j.outcome for j in cosign_once(witness, fresh).journals] == ["cosigned"]
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        # the event whose append stored the hash of the largest complete subtree
        owner.execute(
            "UPDATE agentteam.events SET tree_hashes = overlay(tree_hashes PLACING"
            " sha256(tree_hashes) FROM length(tree_hashes) - 31)"
            " WHERE journal_id = %s AND seq = %s",
            (jid, 1 << (head(path).bit_length() - 1)),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    other = WitnessKey("witness.example/w4", bytes(range(90, 122)))
    (changed,) = cosign_once(witness, other).journals
    assert changed.outcome == "root_mismatch"
    key_file = tmp_path / "w4.key"
    key_file.write_text(other.to_file_text())
    key_file.chmod(0o600)
    cli = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "witness"]
    done = subprocess.run(
        [*cli, "--from", witness, "--key", str(key_file), "--all"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and f"refused {jid}" in done.stderr


def test_witness_follow_cosigns_what_arrives_and_stops_on_sigterm(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    import signal
    import time

    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 11, 2)
    key_file = tmp_path / "w.key"
    key_file.write_text(WITNESS.to_file_text())
    key_file.chmod(0o600)
    cli = [sys.executable, "-m", "agentteam_task_bridge.replay._cli", "witness"]
    process = subprocess.Popen(
        [*cli, "--from", witness, "--key", str(key_file), "--follow", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert replay.ship([path], shipper).ok
        sizes: list[int] = []
        for _ in range(600):  # bounded: up to ~60 s on a loaded machine
            with psycopg.connect(pg_url) as conn:
                sizes = [c.tree_size for c in cosignatures(conn, jid)]
            if sizes and sizes[0] == head(path):
                break
            time.sleep(0.1)
        assert sizes and sizes[0] == head(path)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "cosigned" in out or "current" in out


def test_an_erasure_after_cosigning_is_not_a_rewrite(
    pg_url: str, logins: Any, tmp_path: Path
) -> None:
    """A recorded erasure changes payloads the witness cosigned, and only those: the erased rows'
    hashes are taken as stored (as verify takes them), and any other change is still named."""
    from .journal_helpers import KEY
    from .replay_helpers import replay_main

    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 8, 6)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    selector = journal.EraseSelector(matching='"eng"')
    signer = journal.SigningKey("agentteam-bridge/seed", KEY)
    erased = journal.erase_payloads(path, selector, reason="subject request", key=signer)
    assert erased.seqs
    assert replay.ship([path], shipper).ok  # the payload_erased event: pending
    assert cosign_once(witness, WITNESS).ok  # its cosignature erases the store's rows
    assert rules(pg_url, path, WITNESS.verifier) == []
    # Erased in the store alone (its owner's erase --from): the journal still holds the text,
    # the store's rows are recorded erasures, not a rewrite.
    done = replay_main(
        "erase", "--from", pg_url, "--journal", jid, "--matching", "task", "--reason", "r", "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [store_erasure] = json.loads(done.stdout)["journals"]
    assert set(store_erasure["seqs"]) - set(erased.seqs), "erased nothing new"
    assert rules(pg_url, path, WITNESS.verifier) == []
    # An erasure recorded for a payload_erased event past the cosigned history (what a store
    # that applied one shipped unsigned would hold, e.g. written by its owner): not evidence.
    with psycopg.connect(pg_url, autocommit=True) as owner:
        cosigned = max(c.tree_size for c in cosignatures(owner, jid))
        victim = owner.execute(
            "SELECT max(seq) FROM agentteam.events WHERE journal_id = %s AND call_id IS NOT NULL"
            " AND payload <> '{\"erased\":true}' AND seq <= %s",
            (jid, cosigned),
        ).fetchone()
        assert victim is not None and victim[0] is not None
        (erasure,) = owner.execute(
            "INSERT INTO agentteam.erasures (journal_id, event_seq, selector, reason, seqs)"
            " VALUES (%s, %s, 'call', 'forged', ARRAY[%s]::bigint[]) RETURNING id",
            (jid, cosigned + 1, victim[0]),
        ).fetchone() or (None,)
        owner.execute(
            "INSERT INTO agentteam.erased_seqs (journal_id, seq, erasure) VALUES (%s, %s, %s)",
            (jid, victim[0], erasure),
        )
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        owner.execute(
            "UPDATE agentteam.events SET payload = '{\"erased\":true}', salt = ''"
            " WHERE journal_id = %s AND seq = %s",
            (jid, victim[0]),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    assert rules(pg_url, path, WITNESS.verifier) == [("witness_store_rewritten", victim[0])]
    # An erasure nobody recorded is a rewrite.
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        seq = owner.execute(
            "SELECT max(seq) FROM agentteam.events WHERE journal_id = %s AND call_id IS NOT NULL"
            " AND payload <> '{\"erased\":true}'",
            (jid,),
        ).fetchone()
        assert seq is not None and seq[0] is not None
        owner.execute(
            "UPDATE agentteam.events SET payload = '{\"erased\":true}', salt = ''"
            " WHERE journal_id = %s AND seq = %s",
            (jid, seq[0]),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    assert rules(pg_url, path, WITNESS.verifier) == [
        ("witness_store_rewritten", min(seq[0], victim[0]))
    ]
