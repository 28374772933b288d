"""A journal id is one line of a checkpoint's note: ``agentteam-journal/<journal id>``.

With a newline in the id, the note's body gains lines: the id ``victim\\n1000\\n<root>`` makes
a body whose origin, size and root (what tlog-checkpoint readers take, the rest being extension
lines they ignore) are ``agentteam-journal/victim``, 1000 and a root its shipper chose. A
shipping login could register such a journal, sign it with the key it registered, and have the
witness cosign it: a cosignature over another journal's origin, at a tree the witness never
checked. So no journal id holds a control character or a space: the note refuses to be made
(``journal.origin_line``), the store refuses to register one (``journal_id_malformed``), and the
witness refuses to cosign one a store already holds, going on with the others.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._cli import main
from agentteam_task_bridge.replay._cosign import WitnessKey, checkpoint_body
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from agentteam_task_bridge.replay._fleet_ship import send_batch

from .fleet_helpers import write_fleet_journal
from .replay_helpers import tamper

ROOT = base64.b64encode(b"R" * 32).decode()
BAD_IDS = [
    f"victim\n1000\n{ROOT}",
    "a\rb",
    "a b",
    "a\tb",
    "a\x0bb",
    "a\x1fb",
    "a\x7fb",
    "a\x85b",
    "a\xa0b",
    "a\u2028b",
    "a\u3000b",
    "",
]
GOOD_IDS = ["4e3c6c2e-5c1b-4b8e-9a57-6f1d1c9e0a11", "q'uote%_\\é漢😀+/", "x" * 500]
KEY = journal.SigningKey("agentteam-bridge/mallory", bytes(range(7, 39)))
WITNESS = WitnessKey("witness.example/w1", bytes(range(100, 132)))


@pytest.mark.parametrize("journal_id", BAD_IDS)
def test_no_note_is_made_for_a_journal_id_that_is_not_one_line(journal_id: str) -> None:
    with pytest.raises(ValueError, match="origin"):
        journal.sign_checkpoint(
            KEY, journal_id=journal_id, seq=1, head_hash="a" * 64, ts_wall="", root_hash="b" * 64
        )
    with pytest.raises(ValueError, match="origin"):
        checkpoint_body(journal_id, 1, b"r" * 32)
    forged = journal.Checkpoint(
        journal_id=journal_id, seq=1, head_hash="a" * 64, ts_wall="", key_id=KEY.key_id,
        signature=KEY.sign(f"{journal.ORIGIN_PREFIX}{journal_id}\n1\n{ROOT}\n".encode()),
    )  # fmt: skip
    assert not forged.check(KEY.verifier), "a note over such an id never verifies"


@pytest.mark.parametrize("journal_id", GOOD_IDS)
def test_other_journal_ids_make_notes(journal_id: str) -> None:
    cp = journal.sign_checkpoint(
        KEY, journal_id=journal_id, seq=1, head_hash="a" * 64, ts_wall="", root_hash="b" * 64
    )
    assert cp.check(KEY.verifier)
    assert cp.note_text().count("\n") == 3


def test_the_store_registers_no_journal_whose_id_is_not_one_line(mallory: str) -> None:
    register = "SELECT agentteam.register_journal(%s, NULL, 'x', %s)"
    with psycopg.connect(mallory, autocommit=True) as conn:
        for journal_id in BAD_IDS:
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                conn.execute(register, (journal_id, KEY.verifier.to_text()))
            assert caught.value.diag.message_detail == "journal_id_malformed", repr(journal_id)
        for journal_id in GOOD_IDS:
            assert conn.execute(register, (journal_id, KEY.verifier.to_text())).fetchone() == (0,)
        held = conn.execute("SELECT journal_id FROM agentteam.journals").fetchall()
    assert sorted(r[0] for r in held) == sorted(GOOD_IDS)


def _store_a_journal_as(pg_url: str, journal_id: str, tmp_path: Path) -> None:
    """A journal of that id in the store, with a checkpoint its registered key signed over the
    note its id makes: registered by the owner, as a store set up before the rule held it."""
    source = tmp_path / f"{uuid.uuid4().hex}.db"
    write_fleet_journal(source, 1, 2)
    with journal.open_reader(source) as reader:
        rows = [(*e, *(leaf[:2] if leaf else ())) for e, leaf in reader.stored_rows(leaves=True)]
    prev, renamed = journal.GENESIS_HASH, []
    for row in rows:
        event = [*row[:17]]
        event[1], event[15] = journal_id, prev
        event[16] = prev = journal.row_hash(tuple(event))
        renamed.append((*event, *row[17:19]))
    size, head = renamed[-1][0], renamed[-1][16]
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute("INSERT INTO agentteam.journals (journal_id) VALUES (%s)", (journal_id,))
        owner.execute(
            "INSERT INTO agentteam.heads (journal_id, seq, hash) VALUES (%s, 0, %s)",
            (journal_id, "0" * 64),
        )
        owner.execute(
            "INSERT INTO agentteam.journal_keys (journal_id, seq, vkey) VALUES (%s, 0, %s)",
            (journal_id, KEY.verifier.to_text()),
        )
        with owner.transaction():
            send_batch(owner, journal_id, renamed)
        [(root,)] = owner.execute(
            "SELECT encode(agentteam.tree_root(%s, %s), 'hex')", (journal_id, size)
        ).fetchall()
        body = f"{journal.ORIGIN_PREFIX}{journal_id}\n{size}\n"
        body += base64.b64encode(bytes.fromhex(root)).decode() + "\n"
        owner.execute(
            "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s, %s)",
            (journal_id, size, head, "2026-12-04T00:00:00.000000Z", KEY.key_id,
             KEY.sign(body.encode()), root),
        )  # fmt: skip


def test_the_witness_cosigns_no_journal_whose_id_is_not_one_line_and_goes_on(
    pg_url: str, tmp_path: Path
) -> None:
    replay.ship([], pg_url)
    honest = tmp_path / "honest.db"
    honest_id = write_fleet_journal(honest, 2, 2)
    assert replay.ship([honest], pg_url).ok
    bad = [f"victim\n1000\n{ROOT}", "a b", "a\u2028b"]
    for journal_id in [*bad, "ok-journal"]:
        _store_a_journal_as(pg_url, journal_id, tmp_path)
    outcomes: dict[str, Any] = {
        j.journal_id: j.outcome for j in cosign_once(pg_url, WITNESS).journals
    }
    assert outcomes == {
        honest_id: "cosigned",
        "ok-journal": "cosigned",
        **dict.fromkeys(bad, "checkpoint_unverified"),
    }
    with psycopg.connect(pg_url) as conn:
        cosigned = conn.execute("SELECT journal_id FROM agentteam.cosignatures").fetchall()
    assert sorted(r[0] for r in cosigned) == sorted([honest_id, "ok-journal"])


@pytest.mark.parametrize("journal_id", ["a\nb", "a b", "a\u2028b"])
def test_prove_says_it_cannot_prove_a_journal_whose_id_is_not_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], journal_id: str
) -> None:
    """Only a forged file holds such an id: prove refuses it (exit 2, said), never a traceback."""
    path = tmp_path / "journal.db"
    with journal.open_sync_writer(path, key=bytes(range(32))) as writer:
        writer.append_many(
            [journal.Event(session_id="s", payload=journal.CallReceived(arguments={}))] * 3
        )
    tamper(
        path,
        "UPDATE journal_meta SET value = ? WHERE key = 'journal_id'",
        "UPDATE events SET journal_id = ?",
        params=(journal_id,),
    )
    code = main(["prove", str(path), "--seq", "1", "--output", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be a checkpoint's origin" in err and "Traceback" not in err
