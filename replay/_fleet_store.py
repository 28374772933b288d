"""The fleet store on PostgreSQL: connecting, creating the schema, and what it holds per journal.

``contiguous_seq`` and ``witnessed_checkpoint`` are the store's answers other commands build on
(``prune`` removes only what the store holds and has witnessed); their names are stable. Each
takes a URL or an open psycopg connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from ._fleet_schema import SCHEMA_VERSION, ddl
from ._source import ReplayInputError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MUTATION_FOLD",
    "OUTCOME_KINDS",
    "SESSION_STARTED_OF_CALL",
    "StoreError",
    "StoreFinding",
    "connect",
    "contiguous_seq",
    "ensure_schema",
    "findings",
    "is_store_url",
    "record_finding",
    "redact_store_url",
    "store_errors",
    "stored_head",
    "witnessed_checkpoint",
]

_SCHEMES: Final = ("postgresql://", "postgres://")

# SQL the reports share: the kinds that close a call, whether a call is a mutation, and a call's
# session start (the latest `session_started` of its session before its first event) joined to
# the calls `folded f` as `s`.
OUTCOME_KINDS: Final = "('call_result', 'call_error', 'call_rejected', 'call_cancelled')"
# Over a call's events: whether it sent a request that can change state (`_story.is_mutation`).
MUTATION_FOLD: Final = """coalesce(bool_or(kind = 'upstream_request'
    AND upper(doc ->> 'method') <> 'GET' AND right(doc ->> 'route', 4) <> '/get'), false)"""
SESSION_STARTED_OF_CALL: Final = """LEFT JOIN LATERAL (
    SELECT st.doc FROM agentteam.events st
    WHERE st.journal_id = f.journal_id AND st.session_id = f.session_id
      AND st.kind = 'session_started' AND st.call_id IS NULL AND st.seq < f.first_seq
    ORDER BY st.seq DESC LIMIT 1
  ) s ON true"""
_APPLICATION: Final = "agentteam-replay"


class StoreError(ReplayInputError):
    """The fleet store cannot be used (unreachable, refused, not a store, psycopg missing)."""


class StoreFinding(msgspec.Struct, frozen=True, kw_only=True):
    """Something the store refused or noticed about a journal: a fork, a bad signature..."""

    journal_id: str
    seq: int | None
    rule: str
    detail: str
    source: str | None = None


def is_store_url(text: str) -> bool:
    return text.startswith(_SCHEMES)


def redact_store_url(url: str) -> str:
    """The URL safe to print: password and query values other than host/port/dbname hidden."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    if parts.username:
        netloc = f"{parts.username}{':REDACTED' if parts.password else ''}@{netloc}"
    keep = {"host", "port", "dbname", "user", "application_name", "sslmode"}
    query = urlencode(
        [(k, v if k in keep else "REDACTED") for k, v in parse_qsl(parts.query)], safe="/"
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "the fleet store needs psycopg: pip install 'agentteam-task-bridge[fleet]'"
        ) from None
    return psycopg


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """Open a connection to the store (StoreError, with the URL redacted, when it cannot)."""
    driver = _psycopg()
    try:
        conn: psycopg.Connection[Any] = driver.connect(
            url, autocommit=autocommit, application_name=_APPLICATION, connect_timeout=30
        )
    except driver.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(f"cannot reach the store {redact_store_url(url)}: {reason}") from None
    return conn


@contextmanager
def _connection(store: str | psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(store, str):
        conn = connect(store, autocommit=True)
        try:
            yield conn
        finally:
            conn.close()
    else:
        yield store


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn a failure of the store (a psycopg error) into a one-line StoreError."""
    driver = _psycopg()
    try:
        yield
    except driver.Error as exc:
        text = str(exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
        raise StoreError(f"the store {redact_store_url(url)} failed: {reason}") from None


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    """Create the store's schema, roles and views when missing (idempotent; autocommit conn).

    A role that may not create them (the shipping role on a store set up by its owner) finds
    them present and goes on; on a store that is absent and cannot be created, StoreError.
    """
    psycopg = _psycopg()
    row = conn.execute(
        "SELECT to_regclass('agentteam.store_meta') IS NOT NULL"
        " AND to_regprocedure('agentteam.ensure_partition(date)') IS NOT NULL"
    ).fetchone()
    if row is not None and row[0]:
        version = conn.execute(
            "SELECT value FROM agentteam.store_meta WHERE key = 'schema_version'"
        ).fetchone()
        if version is not None and int(version[0]) >= SCHEMA_VERSION:
            if int(version[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"the store's schema version {version[0]} is newer than this code's"
                    f" ({SCHEMA_VERSION})"
                )
            return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentteam.ensure_schema'))")
            for statement in ddl():
                conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(
            f"the store has no agentteam schema and this role cannot create it: {exc}"
        ) from None


def stored_head(conn: psycopg.Connection[Any], journal_id: str) -> tuple[int, str]:
    """(seq, hash) of the last event the store holds for the journal; (0, zeros) if none."""
    from agentteam_task_bridge.journal import GENESIS_HASH

    row = conn.execute(
        "SELECT seq, hash FROM agentteam.events WHERE journal_id = %s ORDER BY seq DESC LIMIT 1",
        (journal_id,),
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)


def contiguous_seq(store: str | psycopg.Connection[Any], journal_id: str) -> int:
    """The highest seq such that the store holds every event 1..seq of the journal (0: none).

    Stable name: ``prune`` relies on it.
    """
    with _connection(store) as conn:
        if not _has_schema(conn):
            return 0
        row = conn.execute(
            "SELECT COALESCE(MAX(seq), 0), COUNT(DISTINCT seq), COALESCE(MIN(seq), 0)"
            " FROM agentteam.events WHERE journal_id = %s",
            (journal_id,),
        ).fetchone()
        assert row is not None
        high, count, low = int(row[0]), int(row[1]), int(row[2])
        if high == count:
            return high
        if low != 1:
            return 0
        gap = conn.execute(
            "SELECT seq FROM (SELECT seq, lead(seq) OVER (ORDER BY seq) AS next"
            " FROM (SELECT DISTINCT seq FROM agentteam.events WHERE journal_id = %s) s) g"
            " WHERE next IS DISTINCT FROM seq + 1 ORDER BY seq LIMIT 1",
            (journal_id,),
        ).fetchone()
        return int(gap[0]) if gap else high


def witnessed_checkpoint(
    store: str | psycopg.Connection[Any], journal_id: str
) -> tuple[int, str] | None:
    """(seq, head hash) of the latest checkpoint of the journal the store verified and keeps
    (the witness), or None when it holds none. Stable name: ``prune`` relies on it."""
    with _connection(store) as conn:
        if not _has_schema(conn):
            return None
        row = conn.execute(
            "SELECT seq, head_hash FROM agentteam.checkpoints WHERE journal_id = %s"
            " ORDER BY seq DESC LIMIT 1",
            (journal_id,),
        ).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def _has_schema(conn: psycopg.Connection[Any]) -> bool:
    """Whether the store's tables exist (a store nothing was shipped to holds nothing)."""
    row = conn.execute("SELECT to_regclass('agentteam.checkpoints') IS NOT NULL").fetchone()
    return bool(row and row[0])


def record_finding(conn: psycopg.Connection[Any], finding: StoreFinding) -> None:
    """Record a finding in its own transaction (it stays when the ship is refused)."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO agentteam.findings (journal_id, seq, rule, detail, source)"
            " VALUES (%s, %s, %s, %s, %s)",
            (finding.journal_id, finding.seq, finding.rule, finding.detail, finding.source),
        )


def findings(
    store: str | psycopg.Connection[Any], journal_id: str | None = None
) -> list[StoreFinding]:
    """The findings the store recorded (for one journal, or all), oldest first."""
    sql = "SELECT journal_id, seq, rule, detail, source FROM agentteam.findings"
    params: tuple[Any, ...] = ()
    if journal_id is not None:
        sql += " WHERE journal_id = %s"
        params = (journal_id,)
    with _connection(store) as conn:
        rows = conn.execute(sql + " ORDER BY found_at, id", params).fetchall()
    return [
        StoreFinding(journal_id=r[0], seq=r[1], rule=r[2], detail=r[3], source=r[4]) for r in rows
    ]
