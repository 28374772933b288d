"""The fleet store on PostgreSQL: connecting, creating the schema, and what it holds per journal.

``contiguous_seq`` and ``witnessed_checkpoint`` are the store's answers other commands build on
(``prune`` removes only what the store holds and has witnessed); their names are stable. Each
takes a URL or an open psycopg connection.

A report reads one instant of the store, however many statements and connections it uses:
``read_only`` gives a connection whose statements all see one snapshot (a ``REPEATABLE READ,
READ ONLY`` transaction), the snapshot an :class:`Instant` names when given one; ``one_instant``
exports that snapshot from a transaction that reads no table (so it holds no lock a ship
creating a partition would wait for while the report's readers wait for it) and keeps it open
until the report is done.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from agentteam_task_bridge import bridge

from ._fleet_schema import SCHEMA_VERSION, ddl
from ._source import ReplayInputError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MUTATION_FOLD",
    "OUTCOME_KINDS",
    "SESSION_STARTED_OF_CALL",
    "Instant",
    "StoreError",
    "StoreFinding",
    "StoreUnreachable",
    "connect",
    "contiguous_seq",
    "ensure_schema",
    "exact_text",
    "findings",
    "first_unheld",
    "is_store_url",
    "one_instant",
    "psycopg_module",
    "read_only",
    "record_finding",
    "redact_store_url",
    "refusal",
    "store_errors",
    "store_text",
    "stored_head",
    "witnessed_checkpoint",
]

_SCHEMES: Final = ("postgresql://", "postgres://")

# SQL the reports share: the kinds that close a call, whether a call is a mutation, and a call's
# session start (the latest `session_started` of its session before its first event, for a call
# row `f`: its seq, one index probe that reads no payload; SESSION_DOC then parses each start
# once, however many calls it has).
OUTCOME_KINDS: Final = "('call_result', 'call_error', 'call_rejected', 'call_cancelled')"
# Over a call's events: whether it sent a request that can change state (`_story.is_mutation`).
MUTATION_FOLD: Final = """coalesce(bool_or(kind = 'upstream_request'
    AND upper(doc ->> 'method') <> 'GET' AND right(doc ->> 'route', 4) <> '/get'), false)"""
# A session's start as one document: its `session_started`, with the client and protocol of
# its `session_handshake` (kind set 7: the session starts before the client says who it is).
SESSION_DOC: Final = """agentteam.payload_doc({s}.payload) || coalesce((
      SELECT jsonb_strip_nulls(agentteam.payload_doc(h.payload)) FROM agentteam.events h
      WHERE h.journal_id = {s}.journal_id AND h.session_id = {s}.session_id
        AND h.kind = 'session_handshake' AND h.call_id IS NULL AND h.seq > {s}.seq
      ORDER BY h.seq LIMIT 1
    ), '{{}}'::jsonb)"""
SESSION_STARTED_OF_CALL: Final = """(SELECT st.seq FROM agentteam.events st
    WHERE st.journal_id = f.journal_id AND st.session_id = f.session_id
      AND st.kind = 'session_started' AND st.call_id IS NULL AND st.seq < f.first_seq
    ORDER BY st.seq DESC LIMIT 1)"""
_APPLICATION: Final = "agentteam-replay"


class StoreError(ReplayInputError):
    """The fleet store cannot be used (unreachable, refused, not a store, psycopg missing)."""


class StoreUnreachable(StoreError):
    """The store cannot be reached (down, refusing connections): ``ship --follow`` waits."""


class StoreFinding(msgspec.Struct, frozen=True, kw_only=True):
    """Something the store refused or noticed about a journal: a fork, a bad signature..."""

    journal_id: str
    seq: int | None
    rule: str
    detail: str
    source: str | None = None


def is_store_url(text: str) -> bool:
    return text.startswith(_SCHEMES)


# The store URL's query keys shown as they are: where it connects, as whom, how (no secret).
STORE_QUERY_SHOWN: Final = frozenset(
    {"host", "port", "dbname", "user", "application_name", "sslmode"}
)


def redact_store_url(url: str) -> str:
    """The URL safe to print: the bridge's one rule (`bridge.redact_url`), the role and the
    connection keys of ``STORE_QUERY_SHOWN`` kept."""
    return bridge.redact_url(url, keep_user=True, keep_query=STORE_QUERY_SHOWN)


def psycopg_module() -> Any:
    """psycopg, or StoreError saying how to install it."""
    return _psycopg()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "the fleet store needs psycopg: pip install 'agentteam-task-bridge[fleet]'"
        ) from None
    return psycopg


# The store's escape of strings (payload_doc for its jsonb, store_text for the text columns a
# model or client fills): U+0000 as MARK "0", MARK as MARK "1". One to one, so "a\0b" and
# "a\ufffdb" stay two strings in SQL too.
_MARK: Final = "\uffff"
_MARK_BYTES: Final = _MARK.encode()


def exact_text(text: str) -> str:
    """A string read from the store's jsonb as the journal holds it (U+0000 included)."""
    if _MARK not in text:
        return text
    # MARK starts every escape, so the first replace cannot match across two of them.
    return text.replace(_MARK + "0", "\x00").replace(_MARK + "1", _MARK)


def store_text(text: str) -> str:
    """A string as the store keeps it in a text column (``exact_text`` reads it back)."""
    if _MARK not in text and "\x00" not in text:
        return text
    return text.replace(_MARK, _MARK + "1").replace("\x00", _MARK + "0")


def _exact(value: Any) -> Any:
    if isinstance(value, str):
        return exact_text(value)
    if isinstance(value, list):
        return [_exact(v) for v in value]
    if isinstance(value, dict):
        return {exact_text(k): _exact(v) for k, v in value.items()}
    return value


def _exact_json(data: bytes | str) -> Any:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    value = json.loads(raw)
    return _exact(value) if _MARK_BYTES in raw else value


def _read_exactly(conn: psycopg.Connection[Any]) -> None:
    """Text and JSON read on this connection come back decoded (``exact_text``)."""
    from psycopg.types.json import set_json_loads
    from psycopg.types.string import TextLoader

    class ExactText(TextLoader):
        def load(self, data: Any) -> Any:
            text = super().load(data)
            return exact_text(text) if isinstance(text, str) else text

    for name in ("text", "varchar", "bpchar"):
        conn.adapters.register_loader(name, ExactText)
    set_json_loads(_exact_json, conn)


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """Open a connection to the store (StoreError, with the URL redacted, when it cannot);
    strings read from it are exact (``exact_text``)."""
    driver = _psycopg()
    try:
        conn: psycopg.Connection[Any] = driver.connect(
            url, autocommit=autocommit, application_name=_APPLICATION, connect_timeout=30
        )
    except driver.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreUnreachable(
            f"cannot reach the store {redact_store_url(url)}: {reason}"
        ) from None
    _read_exactly(conn)
    return conn


class Instant(NamedTuple):
    """One instant of the store several connections read: the snapshot ``one_instant``
    exported (``pg_export_snapshot``), valid while it is kept open."""

    url: str
    snapshot: str


@contextmanager
def read_only(store: str | Instant) -> Iterator[psycopg.Connection[Any]]:
    """A connection in a ``REPEATABLE READ, READ ONLY`` transaction: every statement on it (the
    server's functions they call included) reads one snapshot of the store, ``store``'s when it
    is an :class:`Instant`, else the one its first statement takes. Its locks last until the
    block ends: a caller does not wait on another reader inside it."""
    from psycopg import sql

    url = store if isinstance(store, str) else store.url
    with connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        if isinstance(store, Instant):
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(store.snapshot)))
        yield conn


@contextmanager
def one_instant(url: str) -> Iterator[Instant]:
    """The store's present instant, for :func:`read_only` connections to import until the
    block ends. The exporting transaction reads no table: it holds no lock."""
    with read_only(url) as conn:
        row = conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        yield Instant(url, str(row[0]))


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


class Refusal:
    """What the store's checked ingest refused (``refusal``), as the shipper's finding."""

    __slots__ = ("finding",)

    def __init__(self) -> None:
        self.finding: StoreFinding | None = None


@contextmanager
def refusal() -> Iterator[Refusal]:
    """Turn a refusal of the store's ingest functions into ``Refusal.finding`` (no journal id,
    no source: the shipper names them): ``check_violation`` with DETAIL ``<rule> <seq>``, or
    ``insufficient_privilege`` for a journal registered to another login (``not_owner``)."""
    driver = _psycopg()
    holder = Refusal()
    try:
        yield holder
    except driver.errors.CheckViolation as exc:
        rule, _, seq = (exc.diag.message_detail or "refused ").partition(" ")
        holder.finding = StoreFinding(
            journal_id="",
            seq=int(seq) if seq.isdigit() else None,
            rule=rule,
            detail=f"the store refused it: {exc.diag.message_primary}",
        )
    except driver.errors.InsufficientPrivilege as exc:
        holder.finding = StoreFinding(
            journal_id="", seq=None, rule="not_owner", detail=str(exc.diag.message_primary)
        )


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
        if version is not None and int(version[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"the store's schema version {version[0]} is newer than this code's"
                f" ({SCHEMA_VERSION})"
            )
        if version is not None and int(version[0]) < SCHEMA_VERSION:
            # Version 1 let a shipping login write rows directly: what it holds cannot be
            # trusted as a witness, so it is not upgraded in place.
            raise StoreError(
                f"the store's schema version {version[0]} is older than this code's"
                f" ({SCHEMA_VERSION}, whose server checks every row): ship into a new database"
            )
        if version is not None:
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
    """(seq, hash) of the last event the store holds for the journal (its head, which only the
    checked ingest moves); (0, zeros) if none."""
    from agentteam_task_bridge.journal import GENESIS_HASH

    row = conn.execute(
        "SELECT seq, hash FROM agentteam.heads WHERE journal_id = %s", (journal_id,)
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS_HASH)


def contiguous_seq(store: str | psycopg.Connection[Any], journal_id: str) -> int:
    """The highest seq such that the store holds every event 1..seq of the journal (0: none):
    its head, since the checked ingest appends only at head + 1 from seq 1.

    Stable name: ``prune`` relies on it.
    """
    with _connection(store) as conn:
        if not _has_schema(conn):
            return 0
        return stored_head(conn, journal_id)[0]


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


def first_unheld(
    store: str | psycopg.Connection[Any], journal_id: str, events: Iterable[tuple[int, str]]
) -> int | None:
    """The first seq of ``events`` ((seq, hash) pairs, in order) that the store does not hold
    with the same hash; None when it holds them all. Stable name: ``prune`` relies on it."""
    with _connection(store) as conn:
        if not _has_schema(conn):
            return next((seq for seq, _ in events), None)
        pairs = iter(events)
        while chunk := list(itertools.islice(pairs, 5_000)):
            seqs, hashes = [s for s, _ in chunk], [h for _, h in chunk]
            row = conn.execute(
                "SELECT l.seq FROM unnest(%s::bigint[], %s::text[]) AS l(seq, hash)"
                " LEFT JOIN agentteam.events e ON e.journal_id = %s AND e.seq = l.seq"
                " WHERE e.hash IS DISTINCT FROM l.hash ORDER BY l.seq LIMIT 1",
                (seqs, hashes, journal_id),
            ).fetchone()
            if row is not None:
                return int(row[0])
    return None


def _has_schema(conn: psycopg.Connection[Any]) -> bool:
    """Whether the store's tables exist (a store nothing was shipped to holds nothing)."""
    row = conn.execute("SELECT to_regclass('agentteam.heads') IS NOT NULL").fetchone()
    return bool(row and row[0])


def record_finding(conn: psycopg.Connection[Any], finding: StoreFinding) -> bool:
    """Record a finding in its own transaction (it stays when the ship is refused), through
    the store's function (which names the login that reported it). False when the store keeps
    none (``finding_malformed``: a journal id past its bound; ``findings_capped``: this login
    reported its most): the caller still reports it, and goes on with the other journals."""
    try:
        with conn.transaction():
            conn.execute(
                "SELECT agentteam.record_finding(%s, %s, %s, %s, %s)",
                (finding.journal_id, finding.seq, finding.rule, finding.detail, finding.source),
            )
    except _psycopg().errors.CheckViolation:
        return False
    return True


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
