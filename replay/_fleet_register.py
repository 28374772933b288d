"""The fleet store's ``register_journal``: what a shipping login may register, checked in SQL.

The first ship of a journal registers it to the calling login (``session_user``) with its head
at seq 0 and its creation key (trust on first use); a later call by another login is refused
(``insufficient_privilege``, ``agentteam.owned_head``). A journal id stands in its checkpoints'
origin line (``journal.origin_line``): 1-MAX_JOURNAL_ID bytes, no control character nor space,
else ``journal_id_malformed``, for every call. A new id must also be NFC, so one name is one
journal (``journal_id_malformed``, the NFC form said: the store normalizes nothing, an id is
what the journal says; an id a store already holds keeps shipping), and its login under its
cap (``journals_capped``): the store's ``store_meta`` setting ``journals_per_login:<login>``,
else ``journals_per_login`` (a non-negative integer; DEFAULT_JOURNALS_PER_LOGIN when absent or
not one), which only the owner may change, counted under the login's advisory lock in a
READ COMMITTED transaction (a snapshot taken before the lock would miss the journals registered
while it waited: another isolation level registers no new journal, ``journals_capped``).
"""

from __future__ import annotations

from typing import Final

from agentteam_task_bridge import journal

__all__ = [
    "DEFAULT_JOURNALS_PER_LOGIN",
    "JOURNALS_PER_LOGIN",
    "MAX_JOURNAL_ID",
    "REGISTER",
    "read_committed_only",
]

# Bytes of a journal id: every table's key holds it (a btree entry holds 2,704).
MAX_JOURNAL_ID: Final = 1024

# The journals a login may register (journals_capped past it): the store's setting in
# store_meta, ``journals_per_login:<login>`` before ``journals_per_login``; its owner changes it.
# Every registered journal is one more the witness and the reports may visit.
JOURNALS_PER_LOGIN: Final = "journals_per_login"
DEFAULT_JOURNALS_PER_LOGIN: Final = 10_000


def read_committed_only(refused: str, detail: str) -> str:
    """PL/pgSQL refusing (``check_violation``, DETAIL ``detail``; ``refused``: the message's
    start, an SQL text expression) a call in a transaction that is not READ COMMITTED. A
    function that counts a login's rows under the login's lock must count every row committed
    before the lock: under READ COMMITTED each statement takes its snapshot then; a REPEATABLE
    READ or SERIALIZABLE transaction (SERIALIZABLE beside a READ COMMITTED one too) reads the
    snapshot of its first statement, taken before it waited, and counts none of the rows the
    login's other sessions added meanwhile."""
    return f"""IF current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE EXCEPTION '%: only in a READ COMMITTED transaction, so what it counts under the'
        ' login''s lock is counted after the lock (this transaction is %)', {refused},
        upper(current_setting('transaction_isolation'))
        USING ERRCODE = 'check_violation', DETAIL = '{detail}';
    END IF;"""


_REFUSED_UNLESS_READ_COMMITTED: Final = read_committed_only(
    "'the store refuses journal ' || left(quote_literal(a_journal), 200)", "journals_capped"
)
# A journal id stands in its checkpoints' origin line (journal.origin_line): one line, no space;
# a new one is NFC, so one name is one journal (the store normalizes nothing: an id is what the
# journal says). The cap is counted under the login's lock, so two sessions cannot both pass it.
REGISTER: Final = f"""
CREATE OR REPLACE FUNCTION agentteam.register_journal(
  a_journal text, a_created_at text, a_from text, a_vkey text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, agentteam, pg_temp AS $$
DECLARE
  cap bigint;
BEGIN
  IF coalesce(a_journal, '') = '' OR a_journal ~ '{journal.ORIGIN_FORBIDDEN}'
     OR octet_length(a_journal) > {MAX_JOURNAL_ID} THEN
    RAISE EXCEPTION 'a journal id is 1-{MAX_JOURNAL_ID} bytes, no control character nor space: %',
      left(quote_literal(a_journal), 200)
      USING ERRCODE = 'check_violation', DETAIL = 'journal_id_malformed';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM agentteam.journals j WHERE j.journal_id = a_journal) THEN
    IF a_journal IS NOT NFC NORMALIZED THEN
      RAISE EXCEPTION 'a journal id is Unicode NFC (composed characters), so one name is one'
        ' journal: % is not (as NFC: %); the store normalizes nothing, name the journal in NFC',
        left(quote_literal(a_journal), 200), left(quote_literal(normalize(a_journal, NFC)), 200)
        USING ERRCODE = 'check_violation', DETAIL = 'journal_id_malformed';
    END IF;
    {_REFUSED_UNLESS_READ_COMMITTED}
    PERFORM pg_advisory_xact_lock(
      hashtextextended('agentteam.register_journal ' || session_user, 0));
    SELECT CASE WHEN m.value ~ '^[0-9]{{1,15}}$' THEN m.value::bigint
           ELSE {DEFAULT_JOURNALS_PER_LOGIN} END INTO cap
    FROM agentteam.store_meta m
    WHERE m.key IN ('{JOURNALS_PER_LOGIN}', '{JOURNALS_PER_LOGIN}:' || session_user)
    ORDER BY m.key DESC LIMIT 1;
    cap := coalesce(cap, {DEFAULT_JOURNALS_PER_LOGIN});
    IF (SELECT count(*) FROM (SELECT 1 FROM agentteam.journals j
                              WHERE j.owner = session_user LIMIT cap) x) >= cap THEN
      RAISE EXCEPTION 'the store refuses journal %: login % has registered its % journals'
        ' (the store''s {JOURNALS_PER_LOGIN}; its owner may raise it)',
        left(quote_literal(a_journal), 200), session_user, cap
        USING ERRCODE = 'check_violation', DETAIL = 'journals_capped';
    END IF;
  END IF;
  INSERT INTO agentteam.journals (journal_id, created_at, registered_from, owner)
  VALUES (a_journal, a_created_at, a_from, session_user) ON CONFLICT (journal_id) DO NOTHING;
  IF FOUND THEN
    INSERT INTO agentteam.heads (journal_id, seq, hash) VALUES (a_journal, 0, repeat('0', 64));
    IF a_vkey IS NOT NULL THEN
      INSERT INTO agentteam.journal_keys (journal_id, seq, vkey) VALUES (a_journal, 0, a_vkey);
    END IF;
  END IF;
  RETURN (agentteam.owned_head(a_journal, false)).seq;
END $$;
"""
