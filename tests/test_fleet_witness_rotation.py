"""The witness does not follow a journal's key rotation by itself (replay._fleet_cosign).

Nothing signs a ``key_rotated`` event: a writer opened with another key names it and signs on
with it. So a shipping login with the journal's directory could rotate a journal to a key of
its own and sign a history of its choosing; the witness cosigns under a rotated key only when
its operator approves that key (``--approve-key JOURNAL_ID=VKEY``), and from then on under the
key in force at its last cosignature. Against a real PostgreSQL.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Final

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_cosign import cosign_once, witness_follow

from .fleet_helpers import journal_events, write_fleet_journal
from .journal_helpers import KEY
from .replay_helpers import consolidated_copy, replay_main
from .test_fleet_cosign import WITNESS, logins  # noqa: F401  (the fixture: logins(role) -> URL)

ROTATED: Final = journal.SigningKey("agentteam-bridge/seed", bytes(range(50, 82)))
ATTACKER: Final = journal.SigningKey("agentteam-bridge/seed", bytes(range(200, 232)))


def _append(path: Path, journal_id: str, key: journal.SigningKey, start: int) -> None:
    """Two calls in a new session, written with ``key`` (a ``key_rotated`` event first when it
    is not the key the journal last named)."""
    with journal.open_sync_writer(path, key=key, journal_id=journal_id) as writer:
        writer.append_many(journal_events(start, 2))


def _outcomes(url: str, approved: dict[str, list[str]] | None = None) -> list[str]:
    return [j.outcome for j in cosign_once(url, WITNESS, approved=approved).journals]


def test_a_rotation_is_cosigned_only_once_its_operator_approves_the_key(
    logins: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    path = tmp_path / "a.db"
    jid = write_fleet_journal(path, 1, 3)
    assert replay.ship([path], shipper).ok
    assert _outcomes(witness) == ["cosigned"]

    _append(path, jid, ROTATED, 20)  # the owner rotates the journal's key
    assert replay.ship([path], shipper).ok
    refused = cosign_once(witness, WITNESS)
    assert not refused.ok and [j.outcome for j in refused.journals] == ["key_unapproved"]
    assert ROTATED.verifier.to_text() in refused.journals[0].detail

    key_file = tmp_path / "w" / "witness.key"
    cli = ("witness", "--from", witness, "--key", key_file)
    made = replay_main(*cli, "--json")  # a new witness (its own key): refuses the same way
    assert made.returncode == 1 and "refused" in made.stderr, made.stdout + made.stderr
    approve = f"{jid}={ROTATED.verifier.to_text()}"
    other = f"{jid}={ATTACKER.verifier.to_text()}"
    assert replay_main(*cli, "--approve-key", other).returncode == 1, "another key: still refused"
    approved = replay_main(*cli, "--approve-key", approve)
    assert approved.returncode == 0 and f"{jid}: cosigned" in approved.stdout, approved.stdout
    assert _outcomes(witness, {jid: [ROTATED.verifier.to_text()]}) == ["cosigned"]

    _append(path, jid, ROTATED, 40)  # more under the approved key: no approval needed again
    assert replay.ship([path], shipper).ok
    assert _outcomes(witness) == ["cosigned"]

    # Someone with the shipping login and the files rotates it again, to a key of their own.
    forged = consolidated_copy(path, tmp_path / "forged.db")
    _append(forged, jid, ATTACKER, 60)
    assert replay.ship([forged], shipper).ok
    assert _outcomes(witness) == ["key_unapproved"]
    assert _outcomes(witness, {jid: [ROTATED.verifier.to_text()]}) == ["key_unapproved"]


@pytest.mark.parametrize("given", ["no-equals-sign", "=agentteam-bridge/x+1+AA", "jid=not-a-key"])
def test_a_malformed_approval_is_a_usage_error(given: str, tmp_path: Path) -> None:
    done = replay_main(
        "witness", "--from", "postgresql://w@127.0.0.1:9/x", "--key", tmp_path / "k",
        "--approve-key", given,
    )  # fmt: skip
    assert done.returncode == 2 and "--approve-key" in done.stderr, done.stderr
    assert not (tmp_path / "k").exists()


class _OneRound(threading.Event):
    """A stop that is set once the first round waits: ``witness --follow`` runs one round."""

    def wait(self, timeout: float | None = None) -> bool:
        self.set()
        return True


def test_witness_follow_shows_a_refused_journal_s_id_not_obeying_it(
    logins: Any,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """attack9: ``witness --follow`` wrote a refused journal's id and detail raw to stderr (and
    ``witness`` the id of each journal it refused); a
    journal id may hold bidirectional controls (the store refuses only controls and spaces),
    which reordered the line. They are shown as stand-ins there, as on every other line."""
    shipper, witness = logins("agentteam_ship"), logins("agentteam_witness")
    jid = "j-\u202eli.txt\u2066-\u202c"
    path = tmp_path / "a.db"
    with journal.open_sync_writer(path, key=KEY, journal_id=jid) as writer:
        writer.append_many(journal_events(1, 2))
    assert replay.ship([path], shipper).ok
    assert _outcomes(witness) == ["cosigned"]
    _append(path, jid, ROTATED, 20)
    assert replay.ship([path], shipper).ok
    report = witness_follow(witness, WITNESS, interval=0.01, stop=_OneRound())
    assert [j.outcome for j in report.journals] == ["key_unapproved"]
    err = capsys.readouterr().err
    assert ": key_unapproved: " in err and err.count("\n") == 1, err
    assert not re.search("[\u202a-\u202e\u2066-\u2069]", err), err
    assert "j-\ufffdli.txt\ufffd-\ufffd" in err
    key_file = tmp_path / "w" / "witness.key"
    once = replay_main("witness", "--from", witness, "--key", key_file)
    assert once.returncode == 1 and "refused j-\ufffdli.txt\ufffd-\ufffd\n" in once.stderr
    assert not re.search("[\u202a-\u202e\u2066-\u2069]", once.stderr + once.stdout), once
