"""What a shipping login may register: a capped number of journals, each named in NFC.

attack6 (session 21): one shipping login registered journals without limit (each one more for
every witness tick and report to visit), and two ids that differ only in Unicode normalization
(NFC and NFD of one name) registered as two journals, so an auditor's ``--journal`` found one of
them. The store refuses a login's journal past its cap (``journals_capped``, the store's setting
``journals_per_login`` in ``agentteam.store_meta``, per login as ``journals_per_login:LOGIN``)
and a new id that is not NFC (``journal_id_malformed``), through ship's refusal path (the run
goes on with the other journals). The shipper normalizes nothing: an id is what the journal
says. Against a real PostgreSQL, as the logins that would act.
"""

from __future__ import annotations

import threading
import unicodedata
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from agentteam_task_bridge.replay._fleet_witness import witness_findings

from .fleet_helpers import journal_events, write_fleet_journal
from .journal_helpers import KEY, VKEY
from .replay_helpers import replay_main
from .test_fleet_cosign import WITNESS

REGISTER = "SELECT agentteam.register_journal(%s, NULL, 'x', %s)"
# Not NFC: a decomposed accent, a decomposed Hangul syllable, a singleton (the Angstrom sign),
# a combining mark reordered, in a longer id.
NOT_NFC = ["e\u0301", "\u1100\u1161", "\u212b", "run-a\u0323\u0302-7"]
# NFC: composed forms, a compatibility character NFC keeps (the ligature), a lone mark.
NFC = ["\u00e9", "\uac00", "\u00c5", "\ufb01le", "\u0301x", "run-\u1ead-7"]
Logins = Callable[[], tuple[str, str]]


def _write(path: Path, journal_id: str) -> Path:
    with journal.open_sync_writer(path, key=KEY, journal_id=journal_id) as writer:
        writer.append_many(journal_events(1, 2))
    return path


def _set(pg_url: str, key: str, value: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(
            "INSERT INTO agentteam.store_meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (key, value),
        )


def test_the_cases_are_what_they_say() -> None:
    assert all(unicodedata.normalize("NFC", i) != i for i in NOT_NFC)
    assert all(unicodedata.normalize("NFC", i) == i for i in NFC)


def test_a_new_journal_id_that_is_not_nfc_is_refused_saying_why(mallory: str) -> None:
    vkey = VKEY.to_text()
    with psycopg.connect(mallory, autocommit=True) as conn:
        for journal_id in NOT_NFC:
            with pytest.raises(psycopg.errors.CheckViolation) as caught:
                conn.execute(REGISTER, (journal_id, vkey))
            assert caught.value.diag.message_detail == "journal_id_malformed", repr(journal_id)
            said = caught.value.diag.message_primary or ""
            assert "not" in said and "NFC" in said
            assert unicodedata.normalize("NFC", journal_id) in said, said
        for journal_id in NFC:
            assert conn.execute(REGISTER, (journal_id, vkey)).fetchone() == (0,)
        held = [r[0] for r in conn.execute("SELECT journal_id FROM agentteam.journals")]
    assert sorted(held) == sorted(NFC)


def test_ship_refuses_an_nfd_journal_and_goes_on_normalizing_nothing(
    pg_url: str, mallory: str, tmp_path: Path
) -> None:
    nfd, nfc = "caf" + "e\u0301-1", "caf\u00e9-2"
    paths = [_write(tmp_path / "nfd.db", nfd), _write(tmp_path / "nfc.db", nfc)]
    shipped = replay.ship(paths, mallory)
    by_id = {j.journal_id: j for j in shipped.journals}
    assert shipped.refused == 1 and by_id[nfc].refused is None and by_id[nfc].shipped > 0
    refused = by_id[nfd].refused
    assert refused is not None and refused.rule == "journal_id_malformed"
    assert "NFC" in refused.detail and by_id[nfd].shipped == 0
    with psycopg.connect(pg_url) as conn:
        held = [r[0] for r in conn.execute("SELECT journal_id FROM agentteam.journals")]
        found = conn.execute(
            "SELECT journal_id, rule FROM agentteam.findings WHERE rule = 'journal_id_malformed'"
        ).fetchall()
    assert held == [nfc], "nothing registered under the NFD id nor its NFC form"
    assert found == [(nfd, "journal_id_malformed")]
    with journal.open_reader(paths[0]) as reader:
        assert reader.journal_id == nfd, "the file is what it was"


def test_a_journal_stored_with_an_nfd_id_before_the_rule_still_ships_and_reads(
    pg_url: str, tmp_path: Path
) -> None:
    """A store set up before the rule may hold one: it keeps shipping (the rule is for new ids),
    the witness cosigns it, and verify --witness and report --from read it as before."""
    nfd = "journal-e\u0301"
    path = _write(tmp_path / "nfd.db", nfd)
    replay.ship([], pg_url)
    with psycopg.connect(pg_url, autocommit=True) as owner:  # registered as before the rule
        owner.execute("INSERT INTO agentteam.journals (journal_id) VALUES (%s)", (nfd,))
        owner.execute(
            "INSERT INTO agentteam.heads (journal_id, seq, hash) VALUES (%s, 0, %s)",
            (nfd, "0" * 64),
        )
        owner.execute(
            "INSERT INTO agentteam.journal_keys (journal_id, seq, vkey) VALUES (%s, 0, %s)",
            (nfd, VKEY.to_text()),
        )
    shipped = replay.ship([path], pg_url)
    assert shipped.ok and shipped.shipped > 0, shipped
    assert [(j.journal_id, j.outcome) for j in cosign_once(pg_url, WITNESS).journals] == [
        (nfd, "cosigned")
    ]
    assert witness_findings(pg_url, [path], witness_keys=[WITNESS.verifier]) == []
    page = tmp_path / "report.html"
    report = replay_main("report", "--from", pg_url, "--journal", nfd, "--html", page)
    assert report.returncode == 0, report.stderr
    assert nfd in page.read_text(encoding="utf-8")


def test_a_login_registers_journals_up_to_its_cap_and_the_run_goes_on(
    pg_url: str, shipping_login: Logins, tmp_path: Path
) -> None:
    (name, url), (_, other) = shipping_login(), shipping_login()
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT value FROM agentteam.store_meta WHERE key = 'journals_per_login'"
        ).fetchone()
    assert row == ("10000",), "the default"
    _set(pg_url, "journals_per_login", "3")
    paths = [tmp_path / f"j{i}.db" for i in range(5)]
    ids = [write_fleet_journal(path, i, 1) for i, path in enumerate(paths)]
    first = replay.ship(paths, url)
    outcome = {
        j.journal_id: (j.refused.rule if j.refused else j.shipped > 0) for j in first.journals
    }
    assert sorted(outcome.values(), key=str) == [
        True,
        True,
        True,
        "journals_capped",
        "journals_capped",
    ]
    capped = next(j for j in first.journals if j.refused is not None)
    assert capped.refused is not None and "3 journals" in capped.refused.detail
    # Registered journals go on shipping at the cap; another login has its own count.
    assert replay.ship([p for p, i in zip(paths, ids, strict=True) if outcome[i] is True], url).ok
    assert replay.ship(paths[:1], other).refused == 1  # registered to the first login
    other_paths = [tmp_path / f"o{i}.db" for i in range(3)]
    for i, path in enumerate(other_paths):
        write_fleet_journal(path, 20 + i, 1)
    assert replay.ship(other_paths, other).ok
    # The owner raises one login's cap (journals_per_login:LOGIN before the store's).
    _set(pg_url, f"journals_per_login:{name}", "5")
    assert replay.ship(paths, url).ok


def test_a_shipping_login_cannot_raise_or_bypass_its_cap(
    pg_url: str, shipping_login: Logins
) -> None:
    (name, url) = shipping_login()
    _set(pg_url, "journals_per_login", "2")
    vkey = VKEY.to_text()
    with psycopg.connect(url, autocommit=True) as conn:
        for statement, args in (
            ("UPDATE agentteam.store_meta SET value = '999' WHERE key = 'journals_per_login'", ()),
            (
                "INSERT INTO agentteam.store_meta (key, value) VALUES (%s, '999')",
                (f"journals_per_login:{name}",),
            ),
            ("INSERT INTO agentteam.journals (journal_id) VALUES ('direct')", ()),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement, args)
        conn.execute(REGISTER, ("a", vkey))
        conn.execute(REGISTER, ("b", vkey))
        conn.execute(REGISTER, ("a", vkey))  # already its own: not one more
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(REGISTER, ("c", vkey))
        assert caught.value.diag.message_detail == "journals_capped"
        # No other function registers one.
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(
                "SELECT agentteam.add_checkpoint('c', 1, repeat('a', 64), '', 'k+1', 's', NULL)"
            )
        assert caught.value.diag.message_detail == "not_registered"
        conn.execute("SELECT agentteam.stage_batch()")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("SELECT agentteam.ingest('c')")
        conn.execute("SELECT agentteam.record_finding('c', NULL, 'x', 'd', NULL)")
    # Sessions of the login racing for the last places: the cap holds.
    _set(pg_url, "journals_per_login", "4")
    go = threading.Barrier(6)
    errors: list[str] = []

    def race(journal_id: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            go.wait()
            try:
                conn.execute(REGISTER, (journal_id, vkey))
            except psycopg.errors.CheckViolation as exc:
                errors.append(str(exc.diag.message_detail))

    threads = [threading.Thread(target=race, args=(uuid.uuid4().hex,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == ["journals_capped"] * 4
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agentteam.journals WHERE owner = %s", (name,)
        ).fetchone()
    assert row == (4,)


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_sessions_whose_snapshot_predates_the_lock_cannot_pass_the_cap(
    pg_url: str, shipping_login: Logins, isolation: str
) -> None:
    """attack9: a transaction's snapshot taken before the login's lock (REPEATABLE READ, or
    SERIALIZABLE beside a READ COMMITTED one) counted none of the journals registered while it
    waited: four sessions at a cap of one registered four. A new journal is registered only in
    a READ COMMITTED transaction (its count then sees every one committed before the lock);
    a journal the login already holds ships on in any."""
    (name, url) = shipping_login()
    _set(pg_url, "journals_per_login", "1")
    vkey = VKEY.to_text()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(REGISTER, ("held", vkey))
    _set(pg_url, "journals_per_login", "2")
    go = threading.Barrier(4)
    errors: list[str] = []

    def race(journal_id: str, level: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
            conn.execute("SELECT 1")  # the snapshot, before any other session registers
            go.wait()
            try:
                conn.execute(REGISTER, (journal_id, vkey))
                conn.commit()
            except psycopg.errors.CheckViolation as exc:
                errors.append(str(exc.diag.message_detail))
            except psycopg.errors.SerializationFailure:
                errors.append("serialization_failure")

    levels = [isolation, isolation, isolation, "READ COMMITTED"]
    threads = [threading.Thread(target=race, args=(uuid.uuid4().hex, lv)) for lv in levels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agentteam.journals WHERE owner = %s", (name,)
        ).fetchone()
    assert row is not None and row[0] <= 2, f"{row[0]} journals at a cap of 2 ({errors})"
    # Refused with a reason, whatever the other sessions do; a held journal ships on.
    with psycopg.connect(url) as conn:
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        assert conn.execute(REGISTER, ("held", vkey)).fetchone() is not None
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(REGISTER, (uuid.uuid4().hex, vkey))
    assert caught.value.diag.message_detail == "journals_capped"
    assert "READ COMMITTED" in str(caught.value.diag.message_primary)


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_ship_registers_new_journals_whatever_the_login_s_default_isolation(
    pg_url: str, shipping_login: Logins, tmp_path: Path, level: str
) -> None:
    """A new journal is registered only in a READ COMMITTED transaction: ship sets its own
    sessions so, where the login's (or the server's) default is another level."""
    (name, url) = shipping_login()
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(f"ALTER ROLE {name} SET default_transaction_isolation TO '{level}'")
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW transaction_isolation").fetchone()
    assert row == (level,)
    paths = [tmp_path / f"j{i}.db" for i in range(3)]
    for i, path in enumerate(paths):
        write_fleet_journal(path, 40 + i, 2)
    shipped = replay.ship(paths, url, jobs=2)
    assert shipped.ok and shipped.refused == 0, [j.refused for j in shipped.journals]
