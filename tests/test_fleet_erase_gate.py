"""The shipping login cannot erase the fleet store: a shipped ``payload_erased`` event is pending
until a witness cosignature covers it, and only the journal's key can make one that does.

Against a real PostgreSQL, as the logins that would act (the shipping login, the witness login,
the owner). The attacker holds the shipping login and a copy of the journal, not its key: the
events it appends are chain-valid (hashes and leaves need no key), never signed by the journal's
key. The store's payloads are looked up with SQL after each step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._cosign import WitnessKey
from agentteam_task_bridge.replay._fleet_cosign import cosign_once

from .journal_helpers import KEY, SESSION, VKEY
from .replay_helpers import consolidated_copy, replay_main, tamper
from .test_fleet_cosign import logins  # noqa: F401  (the fixture: logins(role) -> URL)
from .test_fleet_erase import _erased_in_store, _jid, _journal

WITNESS: Final = WitnessKey("witness.example/gate", bytes(range(60, 92)))
SIGNER: Final = journal.SigningKey("agentteam-bridge/seed", KEY)
ATTACKER: Final = journal.SigningKey("agentteam-bridge/seed", bytes(range(200, 232)))
SECRET: Final = "Mary Jackson, 7 Wind Tunnel Lane, mj@example.org"


def _holding(url: str, jid: str, text: str = SECRET) -> list[int]:
    """The seqs of the journal's stored events whose payload holds ``text`` (grep through SQL)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT seq FROM agentteam.events WHERE journal_id = %s AND strpos(payload, %s) > 0"
            " ORDER BY seq",
            (jid, text),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _cosigned_sizes(url: str, jid: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tree_size FROM agentteam.cosignatures WHERE journal_id = %s ORDER BY 1",
            (jid,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _head(path: Path) -> tuple[int, str]:
    with journal.open_reader(path) as reader:
        return reader.head()


def _hash_at(path: Path, seq: int) -> str | None:
    with journal.open_reader(path) as reader:
        return reader.hash_at(seq)


def _forged_erasure(path: Path, target: Path, seqs: list[int], *, key: Any = None) -> Path:
    """A copy of the journal with a ``payload_erased`` event naming ``seqs`` at its head + 1.
    ``key`` None: chain-valid and unsigned (the copy's checkpoints past the old head dropped,
    as the attacker has no key to make them); a key: the writer first rotates to it."""
    head, _ = _head(path)
    copy = consolidated_copy(path, target)
    with journal.open_sync_writer(copy, key=key or KEY) as writer:
        writer.append(
            journal.Event(
                session_id=SESSION,
                payload=journal.PayloadErased(
                    seqs=seqs, selector="matching", reason="forged", actor="x@y"
                ),
            )
        )
    if key is None:
        tamper(copy, "DELETE FROM checkpoints WHERE seq > ?", params=(head,))
    return copy


def _witness_rules(url: str, path: Path) -> list[tuple[str, int | None]]:
    from agentteam_task_bridge.replay._fleet_witness import witness_findings

    found = witness_findings(url, [path], witness_keys=[WITNESS.verifier])
    return [(f.rule, f.seq) for f in found]


def _verify_json(url: str, path: Path) -> tuple[int, Any]:
    done = replay_main(
        "verify",
        path,
        "--trusted-key",
        VKEY.to_text(),
        "--witness",
        url,
        "--witness-key",
        WITNESS.verifier.to_text(),
        "--json",
    )
    return done.returncode, json.loads(done.stdout)


def test_an_unsigned_payload_erased_shipped_by_the_shipping_login_erases_nothing(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = _journal(tmp_path / "j", SECRET, (2, 5, 11))
    jid = _jid(path)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    head, _ = _head(path)
    held = _holding(pg_url, jid)
    assert len(held) == 12, held
    assert _witness_rules(pg_url, path) == []

    forged = _forged_erasure(path, tmp_path / "forged.db", held)
    shipped = replay.ship([forged], shipper)
    assert shipped.ok and shipped.shipped == 1, shipped  # chain-valid: the store takes the row
    assert _holding(pg_url, jid) == held, "the store's payloads are intact"
    assert _erased_in_store(pg_url, jid) == []
    with psycopg.connect(pg_url) as conn:
        pending = conn.execute(
            "SELECT event_seq, seqs FROM agentteam.erasures_pending WHERE journal_id = %s", (jid,)
        ).fetchall()
    assert pending == [(head + 1, held)]
    # Neither the shipping login nor the witness writes what the cosignature applies.
    for login in (shipper, witness):
        with psycopg.connect(login, autocommit=True) as conn:
            for statement in (
                "INSERT INTO agentteam.erasures_pending (journal_id, event_seq, selector, seqs)"
                " VALUES (%s, 1, 'call', ARRAY[2]::bigint[])",
                "INSERT INTO agentteam.erasures_settled (journal_id, event_seq, outcome,"
                " tree_size) VALUES (%s, %s, 'applied', 1)",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement, (jid, head + 1) if "settled" in statement else (jid,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "SELECT agentteam.erase_stored(%s, ARRAY[2], NULL, 'call', 'r')", (jid,)
                )

    # No checkpoint the journal's key signed covers it: nothing for the witness to cosign.
    (item,) = cosign_once(witness, WITNESS, every=True).journals
    assert item.outcome == "current" and _cosigned_sizes(pg_url, jid) == [head]
    # A checkpoint at that size the shipping login adds itself, naming the journal's key id
    # (the store cannot check Ed25519, the witness does): refused, not cosigned.
    with psycopg.connect(shipper, autocommit=True) as conn:
        root = conn.execute(
            "SELECT encode(agentteam.tree_root(%s, %s), 'hex')", (jid, head + 1)
        ).fetchone()
        assert root is not None and root[0] is not None
        bogus = ATTACKER.sign(b"anything")
        conn.execute(
            "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s, %s)",
            (
                jid,
                head + 1,
                _hash_at(forged, head + 1),
                "2026-12-04T00:00:00.000000Z",
                SIGNER.verifier.key_id,
                bogus,
                root[0],
            ),
        )
    report = cosign_once(witness, WITNESS)
    assert not report.ok
    (item,) = report.journals
    assert (item.outcome, item.tree_size) == ("checkpoint_unverified", head + 1)
    assert _cosigned_sizes(pg_url, jid) == [head]
    assert _holding(pg_url, jid) == held and _erased_in_store(pg_url, jid) == []

    # verify --witness names the forged event; the journal itself is clean.
    assert _witness_rules(pg_url, path) == [("witness_erasure_unsigned", head + 1)]
    code, result = _verify_json(pg_url, path)
    assert code == 1 and [f["rule"] for f in result["findings"]] == ["witness_erasure_unsigned"]
    assert "no cosignature covers" in result["findings"][0]["detail"]


def test_a_key_rotated_by_the_shipping_login_does_not_let_it_erase(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The attacker's copy rotates to its own key (a ``key_rotated`` event, which nothing signs)
    and signs a checkpoint over its ``payload_erased``: the witness does not follow the rotation
    (``key_unapproved``), so nothing covers the erasure and nothing is erased. Were an operator
    to approve the key, the store would still hold the erasure back (``key_rotated``)."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = _journal(tmp_path / "j", SECRET, (3, 7))
    jid = _jid(path)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    head, _ = _head(path)
    held = _holding(pg_url, jid)
    assert len(held) == 8

    forged = _forged_erasure(path, tmp_path / "forged.db", held, key=ATTACKER)
    assert replay.ship([forged], shipper).ok
    assert _holding(pg_url, jid) == held
    report = cosign_once(witness, WITNESS)
    assert not report.ok and [j.outcome for j in report.journals] == ["key_unapproved"]
    assert f"rotated to at seq {head + 1}" in report.journals[0].detail
    assert _holding(pg_url, jid) == held and _erased_in_store(pg_url, jid) == []
    approved = {jid: [ATTACKER.verifier.to_text()]}  # an operator fooled into approving it
    report = cosign_once(witness, WITNESS, approved=approved)
    assert report.ok and [j.outcome for j in report.journals] == ["cosigned"]
    assert _holding(pg_url, jid) == held and _erased_in_store(pg_url, jid) == []
    with psycopg.connect(pg_url) as conn:
        settled = conn.execute(
            "SELECT event_seq, outcome FROM agentteam.erasures_settled WHERE journal_id = %s",
            (jid,),
        ).fetchall()
    assert settled == [(head + 2, "key_rotated")]  # head + 1 is the key_rotated event
    # The honest journal ends before what was cosigned: named, as before.
    assert _witness_rules(pg_url, path) == [("witness_truncated", head + 1)]


def test_the_journals_own_erasure_is_pending_until_cosigned_then_applied(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = _journal(tmp_path / "j", SECRET, (4, 9))
    jid = _jid(path)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    held = _holding(pg_url, jid)
    erased = journal.erase_payloads(
        path, journal.EraseSelector(matching=SECRET), reason="subject request", key=SIGNER
    )
    assert erased.seqs == held and erased.event_seq is not None
    assert replay.ship([path], shipper).ok
    assert _holding(pg_url, jid) == held, "pending: the store still holds the payloads"
    code, result = _verify_json(pg_url, path)
    assert code == 0 and result["findings"] == [], result["findings"]
    assert result["journals"][0]["erasures_pending"] == [erased.event_seq]
    text = replay_main(
        "verify", path, "--trusted-key", VKEY.to_text(), "--witness", pg_url, "--witness-key",
        WITNESS.verifier.to_text(),
    )  # fmt: skip
    assert text.returncode == 0 and "erasures pending in the store" in text.stdout, text.stdout

    assert cosign_once(witness, WITNESS).ok
    assert _holding(pg_url, jid) == [] and _erased_in_store(pg_url, jid) == held
    code, result = _verify_json(pg_url, path)
    assert code == 0 and result["journals"][0]["erasures_pending"] == []
    assert _witness_rules(pg_url, path) == []
    maintained = replay_main("store-maintain", "--from", pg_url, "--json")
    assert maintained.returncode == 0, maintained.stdout + maintained.stderr
    assert json.loads(maintained.stdout)["rewritten"], "the store-maintain after cosign scrubs"


def _prune(path: Path, url: str) -> replay.JournalPruned:
    (pruned,) = replay.prune(
        [path], url, older_than_days=0, key=KEY, witness_keys=[WITNESS.verifier]
    ).journals
    return pruned


def test_prune_keeps_a_segment_whose_payload_only_it_still_holds(
    pg_url: str, tmp_path: Path
) -> None:
    """The store holds an event of a closed segment erased, the file still holds its payload:
    the file is the only copy, so it stays (the leaves agree: only the payload tells)."""
    from .journal_helpers.segmented import files_of, write_segmented

    # Erased in the store alone by its owner (erase --from); the journal never erased it.
    path = tmp_path / "pool" / "journal-1.db"
    path.parent.mkdir()
    write_segmented(path, 30)
    files = files_of(path)
    assert len(files) >= 3
    assert replay.ship([path], pg_url).ok
    assert cosign_once(pg_url, WITNESS).ok
    jid = _jid(files[-1])
    erase = ("erase", "--from", pg_url, "--journal", jid, "--call", "c0", "--reason", "DSR 9")
    done = replay_main(*erase, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (erased,) = json.loads(done.stdout)["journals"]
    first = min(erased["seqs"])
    pruned = _prune(path, pg_url)
    assert pruned.removed == [] and files_of(path) == files
    assert pruned.stopped.startswith(f"held: the store holds event {first} of {files[0].name}")
    cli = replay_main(
        "prune", path.parent, "--shipped-to", pg_url, "--older-than", "0", "--witness-key",
        WITNESS.verifier.to_text(), "--json", "--dry-run",
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    (shown,) = json.loads(cli.stdout)["journals"]
    assert shown["removed"] == [] and shown["stopped"] == pruned.stopped
    text = replay_main(
        "prune", path.parent, "--shipped-to", pg_url, "--older-than", "0", "--witness-key",
        WITNESS.verifier.to_text(), "--dry-run",
    )  # fmt: skip
    assert text.returncode == 0 and "held: the store holds event" in text.stdout, text.stdout
    # The journal erases it too: signed, shipped, cosigned; now nothing is only here.
    local = journal.erase_payloads(
        path, journal.EraseSelector(call_id="c0"), reason="DSR 9", key=SIGNER
    )
    assert local.seqs == erased["seqs"]
    assert replay.ship([path], pg_url).ok
    assert cosign_once(pg_url, WITNESS).ok
    assert len(_prune(path, pg_url).removed) >= 1

    # Shipped already erased by someone else (a stripped copy, honest hashes and digests).
    pool = tmp_path / "other" / "journal-1.db"
    pool.parent.mkdir()
    write_segmented(pool, 30, start=300)
    mine = files_of(pool)
    stripped_dir = tmp_path / "stripped"
    stripped_dir.mkdir()
    stripped = [consolidated_copy(f, stripped_dir / f.name) for f in mine]
    tamper(
        stripped[0],
        "UPDATE events SET payload = '{\"erased\":true}', salt = ''"
        " WHERE call_id = 'c300' AND kind = 'call_received'",
    )
    assert replay.ship([stripped_dir / pool.name], pg_url).ok
    assert cosign_once(pg_url, WITNESS).ok  # the checkpoints verify: the leaves are the same
    other = _jid(mine[-1])
    assert _erased_in_store(pg_url, other), "the store holds the stripped row erased"
    kept = _prune(pool, pg_url)
    assert kept.removed == [] and files_of(pool) == mine, kept.stopped
    assert "witness_store_rewritten" in kept.stopped or kept.stopped.startswith("held:")


def test_the_witness_refuses_a_size_whose_erasure_cannot_apply(
    pg_url: str,
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A row the erasure names no longer matches its hash (the owner changed it): the witness
    neither cosigns that size nor erases anything (one transaction), and exits 1."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = _journal(tmp_path / "j", SECRET, (6,))
    jid = _jid(path)
    assert replay.ship([path], shipper).ok
    assert cosign_once(witness, WITNESS).ok
    cosigned = _cosigned_sizes(pg_url, jid)
    held = _holding(pg_url, jid)
    erased = journal.erase_payloads(
        path, journal.EraseSelector(matching=SECRET), reason="r", key=SIGNER
    )
    assert erased.seqs == held
    assert replay.ship([path], shipper).ok
    with psycopg.connect(pg_url, autocommit=True) as owner:  # the owner lifts its triggers
        owner.execute("ALTER TABLE agentteam.events DISABLE TRIGGER USER")
        owner.execute(
            "UPDATE agentteam.events SET payload = replace(payload, 'Mary', 'Maria')"
            " WHERE journal_id = %s AND seq = %s",
            (jid, held[1]),
        )
        owner.execute("ALTER TABLE agentteam.events ENABLE TRIGGER USER")
    report = cosign_once(witness, WITNESS)
    assert not report.ok
    (item,) = report.journals
    assert (item.outcome, item.tree_size) == ("erase_mismatch", erased.checkpoint_seq)
    assert f"names event {held[1]}" in item.detail
    assert _cosigned_sizes(pg_url, jid) == cosigned
    assert _erased_in_store(pg_url, jid) == [] and _holding(pg_url, jid) == [
        s for s in held if s != held[1]
    ]
    done = replay_main("witness", "--from", witness, "--key", str(tmp_path / "w" / "w.key"))
    assert done.returncode == 1 and "erase_mismatch" in done.stdout, done.stdout + done.stderr
    assert "refused" in done.stderr
