"""The store's functions that run with its owner's rights cannot be made to run a login's code.

PostgreSQL searches a session's temporary schema ``pg_temp`` *first* for relation and type
names unless ``search_path`` lists it (then where listed). Any login may create a domain there
(``pg_temp.name``, ``pg_temp.text``, ...) whose CHECK calls a function of its own: a SECURITY
DEFINER function whose ``search_path`` leaves ``pg_temp`` out, and every function it calls that
sets its own, then resolve an unqualified type name in their bodies (``owner name``, ``held
text``, ``x::jsonb``) to the login's domain and run its check as the store's owner. So every
function of the store that sets ``search_path`` puts ``pg_temp`` last (PostgreSQL's advice for
SECURITY DEFINER functions), and a shipping login that plants such domains before calling each
function it may call runs nothing as the owner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._fleet_ship import send_batch

from .fleet_helpers import write_fleet_journal

# Type names the bodies use unqualified (keywords such as bigint or boolean are parsed as
# pg_catalog's types by the grammar and cannot be shadowed).
SHADOWED = ("name", "text", "bytea", "date", "jsonb", "timestamptz", "regclass", "regnamespace")

# Runs as whoever evaluates the domain's check: tries what only the owner may, and says so.
_EVIL = """
CREATE FUNCTION pg_temp.evil() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    INSERT INTO agentteam.findings (journal_id, rule, detail, reported_by)
    VALUES ('forged', 'forged', 'written as ' || current_user, 'someone_else');
  EXCEPTION WHEN insufficient_privilege THEN
    NULL;  -- the login's own rights: nothing gained
  END;
  RETURN true;
END $$
"""


def _plant(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_EVIL)
    for name in SHADOWED:
        conn.execute(f"CREATE DOMAIN pg_temp.{name} AS pg_catalog.{name} CHECK (pg_temp.evil())")


def _forged(pg_url: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT detail FROM agentteam.findings WHERE journal_id = 'forged'"
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_a_shipping_login_cannot_run_its_code_as_the_owner_through_pg_temp(
    pg_url: str, mallory: str, tmp_path: Path
) -> None:
    path = tmp_path / "m.db"
    jid = write_fleet_journal(path, 1, 4)
    with journal.open_reader(path) as reader:
        rows = [(*e, *(leaf or ())) for e, leaf in reader.stored_rows(leaves=True)]
        keys = reader.recorded_keys()
        [cp] = reader.tree_checkpoints(latest=True)
        created = reader.created_at
    with psycopg.connect(mallory, autocommit=True) as conn:
        _plant(conn)
        # Every function a shipping login may call, in this session, as the shipper calls them.
        conn.execute(
            "SELECT agentteam.register_journal(%s, %s, %s, %s)", (jid, created, "m", keys[0][1])
        )
        with conn.transaction():
            send_batch(conn, jid, rows)
            conn.execute(
                "SELECT agentteam.add_checkpoint(%s, %s, %s, %s, %s, %s, %s)",
                (jid, cp.seq, cp.head_hash, cp.ts_wall, cp.key_id, cp.signature, cp.root_hash),
            )
        conn.execute("SELECT agentteam.record_finding(%s, 1, 'fork', 'x', 'y')", (jid,))
    assert _forged(pg_url) == [], "the login's code ran with the owner's rights"
    # What it shipped went in as any journal's does.
    assert replay.ship([path], mallory).ok


def test_every_store_function_that_sets_search_path_puts_pg_temp_last(
    pg_url: str, mallory: str
) -> None:
    """The rule, for every function of the schema (a later one too): a SECURITY DEFINER function
    sets search_path, and whoever sets it puts pg_temp last (an inner SET overrides the
    caller's, so a helper the owner's functions call is in scope as much as they are)."""
    with psycopg.connect(pg_url) as conn:
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text, p.prosecdef, coalesce(("
            "   SELECT substr(c, length('search_path=') + 1) FROM unnest(p.proconfig) c"
            "   WHERE c LIKE 'search_path=%%'), '')"
            " FROM pg_proc p WHERE p.pronamespace = 'agentteam'::regnamespace"
        ).fetchall()
    assert len(functions) > 10
    wrong = {
        str(name): str(path)
        for name, definer, path in functions
        if (definer or path) and [s.strip() for s in str(path).split(",")][-1] != "pg_temp"
    }
    assert wrong == {}
