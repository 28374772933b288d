"""Erasure: the payloads of chosen events removed from a journal's files, every proof intact.

Rules (stable; ``verify`` and any script recompute them):

* An erased event keeps every column but ``payload``, which becomes :data:`ERASED_PAYLOAD`, and
  its leaf keeps its payload digest and stored hashes but loses its salt (``''``). Its leaf
  (:mod:`journal._tlog`) commits to the envelope and to ``sha256(salt || payload)``, not to the
  payload's bytes, so the Merkle tree, every signed root and every inclusion proof are unchanged;
  without the salt the digest says nothing of the text.
* The hash chain of :mod:`journal._canonical` covers the payload bytes, so an erased event's
  ``hash`` cannot be recomputed: a verifier takes it as stored (it still links the next event's
  ``prev_hash``) and checks the event through its leaf instead. Only a v2 (Merkle) journal can
  be erased; a v1 file is refused.
* Erasure is journaled first: one ``payload_erased`` event in the live segment names every seq
  (a checkpoint signed with the journal's key covers it, in the same transaction); each file
  lists its erased seqs in ``erased_seqs`` (append-only), the only rows the update triggers of
  migration 0009 let change, and only this way. Kinds the verifier needs
  (:data:`PROTECTED_KINDS`) are never erased.
* One transaction per file (the live segment's holds the event), so a crash leaves a file in its
  old state or its new one; the bytes go too: ``secure_delete`` zeroes what the update frees,
  and a WAL checkpoint (``TRUNCATE``) removes the old page images from the ``-wal`` file. A run
  that finds nothing left to erase appends nothing and only repeats the scrub.
* A live journal (a bridge holds its lock) is erased under SQLite's own write lock, taken with
  the busy timeout: the writer's transactions are short. The writer notices the appended event
  at its next commit and sequences its rows after it (:func:`rebase_rows`).
* ``stop`` (a session that erases by retention is ending) ends an erasure where it is, as a
  crash would: SQLite asks it every few thousand steps (a progress handler) and rolls back the
  transaction under way; the files not reached yet are left as they are. A payload_erased event
  already committed names seqs of a sealed segment that still holds them: the next run erases
  them (``verify`` only asks that every erased event be named).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import msgspec

from ._canonical import Row, encode_payload, format_wall, row_hash, wall_now
from ._checkpoint import SigningKey, export_checkpoint, sign_checkpoint
from ._errors import JournalFormatError, JournalUnavailable, classify_sqlite_error
from ._events import ERASED_PAYLOAD, WRITER_SESSION, PayloadErased
from ._merkle import Frontier
from ._rollover import held_by_a_writer
from ._schema import INSERT_CHECKPOINT, connect_reader, connect_writer
from ._segments import base_path, segment_files
from ._tlog import (
    MERKLE_LOG,
    Stored,
    checkpoint_row,
    insert_stored,
    leaf_extras,
    leaf_store,
    load_border,
)

__all__ = [
    "ERASE_TIMEOUT_S",
    "PROTECTED_KINDS",
    "EraseResult",
    "Selector",
    "default_actor",
    "erase",
    "is_erased",
    "moved_on",
    "rebase_rows",
]

ERASE_TIMEOUT_S: Final = 30.0
PROTECTED_KINDS: Final = ("payload_erased", "key_rotated", "segment_started", "segments_pruned")
_SCRUB_TRIES: Final = 50
_STOP_EVERY: Final = 10_000  # SQLite virtual machine steps between two looks at `stop`


class Selector(msgspec.Struct, frozen=True, kw_only=True):
    """Which events to erase: exactly one of the fields is set."""

    call_id: str | None = None
    session_id: str | None = None
    task: tuple[str, int] | None = None  # (channel, number): the calls that name it
    matching: str | None = None  # a payload holding this text
    older_than_days: float | None = None

    @property
    def name(self) -> str:
        """What selected the events, as the ``payload_erased`` event says (never the text)."""
        for field, name in (
            ("call_id", "call"),
            ("session_id", "session"),
            ("task", "task"),
            ("matching", "matching"),
            ("older_than_days", "older_than"),
        ):
            if getattr(self, field) is not None:
                return name
        raise ValueError("a selector names one of call, session, task, matching, older_than")

    def where(self, calls: Sequence[str]) -> tuple[str, list[Any]]:
        """The SQL condition on ``events`` (``calls``: the call ids of a task selector)."""
        name = self.name
        if name == "call":
            return "call_id = ?", [self.call_id]
        if name == "session":
            return "session_id = ?", [self.session_id]
        if name == "task":
            return f"call_id IN ({','.join('?' * len(calls))})", list(calls)
        if name == "matching":
            text = self.matching or ""
            escaped = encode_payload(text)[1:-1]  # as it is stored inside a JSON string
            return "(instr(payload, ?) > 0 OR instr(payload, ?) > 0)", [text, escaped]
        # Retention erases what the calls carried; the sessions' own events (who the agent
        # and the client were, when and why a session ended) are the envelope and stay.
        cutoff = datetime.now(UTC) - timedelta(days=self.older_than_days or 0.0)
        return "call_id IS NOT NULL AND ts_wall < ?", [format_wall(cutoff)]


_TASK_CALLS: Final = """
SELECT DISTINCT call_id FROM events
WHERE kind = 'call_received' AND call_id IS NOT NULL
  AND json_valid(payload) AND json_extract(payload, '$.arguments.channel') = ?
  AND (json_extract(payload, '$.arguments.number') = ?
       OR json_extract(payload, '$.arguments.parent') = ?
       OR EXISTS (SELECT 1 FROM json_each(payload, '$.arguments.numbers') WHERE value = ?))
"""


class EraseResult(msgspec.Struct, frozen=True, kw_only=True):
    """What an erasure did (or, ``dry_run``, would do) to one journal."""

    journal: str
    journal_id: str | None
    selector: str
    seqs: list[int]
    files: list[str]
    dry_run: bool
    event_seq: int | None = None  # the payload_erased event (None: nothing erased)
    checkpoint_seq: int | None = None
    scrubbed: bool = False  # every file's WAL was checkpointed and truncated
    live: bool = False  # a writer held the journal


def default_actor() -> str:
    """Who runs this: ``user@host`` (the uid when the user has no name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def is_erased(payload: str, salt: str | None) -> bool:
    """Whether a stored row was erased (its payload the marker and, in a v2 journal, its leaf's
    salt empty)."""
    return payload == ERASED_PAYLOAD and salt == ""


def moved_on(exc: sqlite3.Error) -> bool:
    """Whether a refused insert says the head moved under the writer (another connection
    appended: an erasure's event), so its rows can be sequenced again (:func:`rebase_rows`)."""
    text = str(exc)
    return isinstance(exc, sqlite3.IntegrityError) and (
        "seq must continue the stream" in text or "prev_hash must equal" in text
    )


def rebase_rows(
    rows: Sequence[Stored], seq: int, prev_hash: str, tree: Frontier | None
) -> tuple[list[Stored], str, Frontier | None]:
    """Rows built on a head another connection has moved (an erasure appended its event),
    sequenced again after ``(seq, prev_hash)`` (the committed head; ``tree`` its border, which
    is advanced): new seq, ``prev_hash``, hash and leaf, the same envelope and payload.
    Returns the rows, the new head hash and the advanced border."""
    out: list[Stored] = []
    for built, _ in rows:
        seq += 1
        base = built._replace(seq=seq, prev_hash=prev_hash, hash="")
        row = base._replace(hash=row_hash(base))
        out.append(Stored(row, None if tree is None else leaf_extras(row, tree)))
        prev_hash = row.hash
    return out, prev_hash, tree


def erase(
    path: Path,
    selector: Selector,
    *,
    reason: str,
    key: SigningKey | None,
    actor: str | None = None,
    dry_run: bool = False,
    checkpoint_path: Path | None = None,
    busy_timeout: float = ERASE_TIMEOUT_S,
    stop: Callable[[], bool] | None = None,
) -> EraseResult:
    """Erase the payloads ``selector`` chooses in the journal at ``path`` (any of its segment
    files stands for all). ``key`` signs the checkpoint over the ``payload_erased`` event and
    must be the key the journal names; ``checkpoint_path`` (default
    ``<journal>.checkpoint.json`` when it exists) receives that checkpoint. Once ``stop`` says
    True the erasure ends where it is (its transaction rolled back: `JournalUnavailable`)."""
    base = base_path(path)
    files = [p for _, p in segment_files(base)] or [path]
    if not files[-1].is_file():
        raise FileNotFoundError(f"no journal at {path}")
    name = selector.name
    calls: list[str] = []
    if name == "task":
        calls = _task_calls(files, selector)
    where = selector.where(calls)
    plan = [(f, _select(f, where, name, calls, stop)) for f in files]
    chosen = sorted(s for _, seqs in plan for s in seqs)
    journal_id = _journal_id(files[-1])
    live = held_by_a_writer(files[-1])
    if dry_run:
        return EraseResult(
            journal=str(base),
            journal_id=journal_id,
            selector=name,
            seqs=chosen,
            files=[str(f) for f, seqs in plan if seqs],
            dry_run=True,
            live=live,
        )
    if key is None:
        raise JournalFormatError("erasing needs the journal's signing key")
    live_file = files[-1]
    event_seq = checkpoint = None
    with _exclusive(live_file):
        event_seq, checkpoint, erased = _erase_live(
            live_file,
            [s for f, seqs in plan[:-1] for s in seqs],
            where,
            name,
            calls,
            selector=selector,
            reason=reason,
            actor=actor or default_actor(),
            key=key,
            busy_timeout=busy_timeout,
            stop=stop,
        )
    done = sorted(erased + [s for _, seqs in plan[:-1] for s in seqs]) if event_seq else []
    if event_seq is not None:
        for file, seqs in plan[:-1]:
            if seqs:
                _erase_sealed(file, seqs, event_seq, busy_timeout, stop)
    scrubbed = all([_scrub(f, busy_timeout, stop) for f in files])
    if checkpoint is not None:
        target = checkpoint_path or Path(f"{base}.checkpoint.json")
        if checkpoint_path is not None or target.exists():
            export_checkpoint(checkpoint, target)
    return EraseResult(
        journal=str(base),
        journal_id=journal_id,
        selector=name,
        seqs=done,
        files=[str(f) for f, seqs in plan if seqs] if done else [],
        dry_run=False,
        event_seq=event_seq,
        checkpoint_seq=None if checkpoint is None else checkpoint.seq,
        scrubbed=scrubbed,
        live=live,
    )


def _condition(where: tuple[str, list[Any]], name: str) -> tuple[str, list[Any]]:
    sql, params = where
    protected = ",".join("?" * len(PROTECTED_KINDS))
    return (
        f"payload IS NOT ? AND kind NOT IN ({protected}) AND ({sql})",
        [ERASED_PAYLOAD, *PROTECTED_KINDS, *params],
    )


def _select(
    file: Path,
    where: tuple[str, list[Any]],
    name: str,
    calls: Sequence[str],
    stop: Callable[[], bool] | None,
) -> list[int]:
    if name == "task" and not calls:
        return []
    sql, params = _condition(where, name)
    conn = _read(file)
    if stop is not None:
        conn.set_progress_handler(stop, _STOP_EVERY)
    try:
        rows = conn.execute(f"SELECT seq FROM events WHERE {sql} ORDER BY seq", params)
        return [int(r[0]) for r in rows]
    except sqlite3.Error as exc:
        raise classify_sqlite_error(exc) from exc
    finally:
        conn.close()


def _task_calls(files: Sequence[Path], selector: Selector) -> list[str]:
    channel, number = selector.task or ("", 0)
    found: list[str] = []
    for file in files:
        conn = _read(file)
        try:
            rows = conn.execute(_TASK_CALLS, (channel, number, number, number)).fetchall()
        finally:
            conn.close()
        found += [str(r[0]) for r in rows]
    return sorted(set(found))


def _read(file: Path) -> sqlite3.Connection:
    """A read-only connection that changes no byte of a journal at rest: a file without a WAL
    that no writer holds is opened ``immutable`` (SQLite creates no ``-wal`` or ``-shm``)."""
    if Path(f"{file}-wal").exists() or held_by_a_writer(file):
        return connect_reader(file)
    uri = f"file:{quote(str(file.resolve()))}?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise JournalFormatError(f"cannot read {file} as a journal: {exc}") from exc


def _journal_id(file: Path) -> str | None:
    conn = _read(file)
    try:
        found = conn.execute("SELECT value FROM journal_meta WHERE key = 'journal_id'").fetchone()
        if found is None:
            return None
        (journal_id,) = found
        return str(journal_id)
    finally:
        conn.close()


@contextlib.contextmanager
def _exclusive(file: Path) -> Iterator[None]:
    """The writer's lock while no writer holds it (a bridge starting now waits for nothing: it
    finds the journal locked and says so); nothing when a live writer holds it (SQLite's write
    lock serialises the two)."""
    fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        yield
    finally:
        os.close(fd)


def _connect(
    file: Path, busy_timeout: float, stop: Callable[[], bool] | None
) -> sqlite3.Connection:
    if stop is not None and stop():
        raise JournalUnavailable("io_error", f"{file.name}: the erasure was stopped")
    conn = connect_writer(file, busy_timeout=busy_timeout)
    conn.execute("PRAGMA secure_delete=ON")
    if stop is not None:  # a statement under way is interrupted (SQLITE_INTERRUPT), rolled back
        conn.set_progress_handler(stop, _STOP_EVERY)
    return conn


def _apply(conn: sqlite3.Connection, seqs: Sequence[int], erased_by: int) -> None:
    conn.executemany(
        "INSERT INTO erased_seqs (seq, erased_by) VALUES (?, ?)", [(s, erased_by) for s in seqs]
    )
    if leaf_store(conn) == "events":  # the leaf columns in the events row: one update
        conn.executemany(
            "UPDATE events SET payload = ?, salt = '' WHERE seq = ?",
            [(ERASED_PAYLOAD, s) for s in seqs],
        )
        return
    conn.executemany(
        "UPDATE events SET payload = ? WHERE seq = ?", [(ERASED_PAYLOAD, s) for s in seqs]
    )
    conn.executemany("UPDATE event_leaves SET salt = '' WHERE seq = ?", [(s,) for s in seqs])


def _erase_live(
    file: Path,
    sealed: list[int],
    where: tuple[str, list[Any]],
    name: str,
    calls: Sequence[str],
    *,
    selector: Selector,
    reason: str,
    actor: str,
    key: SigningKey,
    busy_timeout: float,
    stop: Callable[[], bool] | None,
) -> tuple[int | None, Any, list[int]]:
    """In one transaction of the live segment: the event naming every seq, its signed
    checkpoint, and this file's erasures. (None, None, []) when nothing is left to erase."""
    conn = _connect(file, busy_timeout, stop)
    try:
        meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
        if meta.get("merkle_log") != MERKLE_LOG:
            raise JournalFormatError(
                f"{file} is a v1 journal (a hash chain over the payload bytes, no Merkle log): "
                "its payloads cannot be erased without breaking the chain"
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            mine: list[int] = []
            if name != "task" or calls:
                sql, params = _condition(where, name)
                rows = conn.execute(f"SELECT seq FROM events WHERE {sql} ORDER BY seq", params)
                mine = [int(r[0]) for r in rows]
            seqs = sorted(sealed + mine)
            if not seqs:
                conn.execute("ROLLBACK")
                return None, None, []
            _check_key(conn, key)
            head = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
            if head is None:
                raise JournalFormatError(f"{file} holds no event")
            last_seq, last_hash = head
            head_seq, head_hash = int(last_seq), str(last_hash)
            tree = load_border(conn, head_seq)
            payload = PayloadErased(
                seqs=seqs,
                selector=selector.name,
                reason=reason,
                actor=actor,
                older_than_days=selector.older_than_days,
            )
            base = Row(
                head_seq + 1,
                meta["journal_id"],
                WRITER_SESSION,
                None,
                time.monotonic_ns(),
                wall_now(),
                payload.kind,
                payload.kind_version,
                None,
                None,
                None,
                None,
                None,
                None,
                encode_payload(payload),
                head_hash,
                "",
            )
            row = base._replace(hash=row_hash(base))
            full = Stored(row, leaf_extras(row, tree))
            checkpoint = sign_checkpoint(
                key,
                journal_id=meta["journal_id"],
                seq=row.seq,
                head_hash=row.hash,
                ts_wall=format_wall(datetime.now(UTC)),
                root_hash=tree.root().hex(),
            )
            insert_stored(conn, [full], leaf_store(conn))
            conn.execute(INSERT_CHECKPOINT, checkpoint_row(checkpoint))
            _apply(conn, mine, row.seq)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return row.seq, checkpoint, mine
    except sqlite3.Error as exc:
        raise classify_sqlite_error(exc) from exc
    finally:
        conn.close()


def _check_key(conn: sqlite3.Connection, key: SigningKey) -> None:
    from ._core import recorded_key  # the writer's own rule for the key the journal names

    named = recorded_key(conn)
    if named is not None and named != key.verifier.to_text():
        raise JournalFormatError(
            "the signing key is not the one the journal names (sign with the bridge's key)"
        )


def _erase_sealed(
    file: Path,
    seqs: Sequence[int],
    erased_by: int,
    busy_timeout: float,
    stop: Callable[[], bool] | None,
) -> None:
    conn = _connect(file, busy_timeout, stop)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            left = [
                s
                for s in seqs
                if conn.execute(
                    "SELECT 1 FROM events WHERE seq = ? AND payload IS NOT ?", (s, ERASED_PAYLOAD)
                ).fetchone()
            ]
            _apply(conn, left, erased_by)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise classify_sqlite_error(exc) from exc
    finally:
        conn.close()


def _scrub(file: Path, busy_timeout: float, stop: Callable[[], bool] | None) -> bool:
    """Checkpoint the file's WAL into it and truncate the WAL (the old page images go); a live
    writer's reads may hold it off for a while: retried, bounded. True when done."""
    try:
        conn = _connect(file, busy_timeout, stop)
    except JournalUnavailable:
        return False
    try:
        for _ in range(_SCRUB_TRIES):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return True
            time.sleep(0.02)
        return False
    except sqlite3.Error:
        return False
    finally:
        conn.close()
