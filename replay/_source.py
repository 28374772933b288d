"""One or many journal files opened read-only, streamed as one stream ordered by (journal id, seq).

A fleet's journals are merged by journal id and sequence: the files are read in seq order each
and merged on ``(journal_id, seq)``, so two copies of one journal (a backup beside the live file)
yield each event once. Nothing is held in memory but one pending row per file.

A journal rolled over into several files (segments, see :mod:`journal._segments`) reads as one:
its files hold one seq range each and merge into one stream; a journal's first file name stands
for all its segments. A directory stands for the journals in it (the bridge's pool of
per-session files, and their segments): every ``*.db`` file directly in it, except SQLite files
that hold no journal (the embedded runtime's database, a pool file a starting session has not
initialised yet). A file that is not SQLite at all, or a damaged journal, is still an input
error: a directory never hides a journal it cannot read. Two files holding two histories of one
journal (a fork, :mod:`replay._forks`) are refused: a merge would pick one without saying so.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import Payload, Reader, Record, record_from_row

from ._forks import find_forks
from ._secrets import SecretScreen

__all__ = [
    "JournalInfo",
    "Journals",
    "Progress",
    "ReplayInputError",
    "journal_files",
    "open_journals",
]

Progress = Callable[[int, int | None], None]
"""Called with (events done, events expected or None) every few thousand events."""

PROGRESS_EVERY: Final = 20_000


class ReplayInputError(Exception):
    """An input a person gave cannot be used (no such file, not a journal, bad checkpoint)."""


class JournalInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One opened file: where, which journal, how long."""

    path: str
    journal_id: str | None
    head_seq: int


class Journals:
    """Readers over the given files; iterate records or raw rows merged by (journal id, seq)."""

    def __init__(self, readers: Sequence[Reader]) -> None:
        self.readers = list(readers)
        # The rows :meth:`records` read (every row of every file, a second copy's too) whose
        # payload does not decode: verify's payload_invalid; where it screened them, those
        # holding a secret's shape: verify's secret_in_payload (see replay.report).
        self.undecoded = 0
        self.secrets = 0
        # The last seq :meth:`records` read of each journal id (its files' last rows, read to
        # the end), to compare with what verify read of them.
        self.read_through: dict[str | None, int] = {}
        # The (journal id, seq) of every row :meth:`records` read erased, to compare with the
        # seqs verify found erased (a sealed segment erased between the two reads).
        self.erased: set[tuple[str | None, Any]] = set()
        self.infos = [
            JournalInfo(path=str(r.path), journal_id=r.journal_id, head_seq=r.head()[0])
            for r in self.readers
        ]

    @property
    def expected_events(self) -> int:
        """An upper bound of the events a merged pass yields (the sum of head seqs)."""
        return sum(info.head_seq for info in self.infos)

    def records(
        self, progress: Progress | None = None, *, checked: bool = True, screened: bool = False
    ) -> Iterator[Record]:
        """Every event once, typed, ordered by (journal id, seq); not ``checked``, a row's
        columns are taken as they are (see ``journal.record_from_row``); ``screened``, every
        row read is screened for secrets as verify screens it (``secrets`` counts them)."""
        streams = [self._keyed_records(r, checked, screened) for r in self._by_journal()]
        last: tuple[str, int] | None = None
        done = 0
        expected = self.expected_events
        for key, record in heapq.merge(*streams, key=_first):
            if key == last:
                continue  # the same event read from a second copy of the journal
            last = key
            yield record
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, expected)
        if progress is not None:
            progress(done, expected)

    def _keyed_records(
        self, reader: Reader, checked: bool, screened: bool
    ) -> Iterator[tuple[tuple[str, int], Record]]:
        screen = SecretScreen(self._found_secret).row if screened else None
        seq = 0
        for row in reader.rows():
            payload, problem = decode_payload(row[6], row[7], row[14])  # as to_record
            if problem:
                self.undecoded += 1
            elif type(payload) is dict and row[14] == journal.ERASED_PAYLOAD:
                self.erased.add((reader.journal_id, row[0]))
            if screen is not None and isinstance(row[14], str):  # the rows verify screens
                screen(row[0], row)
            record = record_from_row(row, payload, checked=checked)
            seq = record.seq
            yield (record.journal_id, seq), record
        if isinstance(seq, int) and seq > self.read_through.get(reader.journal_id, 0):
            self.read_through[reader.journal_id] = seq

    def _found_secret(self, seq: int, rule: str, detail: str, call_id: str | None) -> None:
        self.secrets += 1

    def events_of_call(self, call_id: str) -> list[Record]:
        """Every event of one call, across the files (indexed lookups, not a scan); a payload
        that does not decode is left as a dict, as :meth:`records` leaves it (verify reports
        it: payload_invalid)."""
        found: dict[tuple[str, int], Record] = {}
        for reader in self.readers:
            for record in reader.events(call_id=call_id, decode=to_record):
                found.setdefault((record.journal_id, record.seq), record)
        return [found[k] for k in sorted(found)]

    def session_started(
        self, journal_id: str, session_id: str, kind: str = "session_started"
    ) -> Record | None:
        """A session's start (or its first event of `kind`: its `session_handshake`); its
        payload left as a dict where it does not decode (see :meth:`events_of_call`)."""
        for reader in self.readers:
            if reader.journal_id != journal_id:
                continue
            for record in reader.events(session_id=session_id, kind=kind, decode=to_record):
                return record
        return None

    def _by_journal(self) -> list[Reader]:
        return sorted(self.readers, key=lambda r: (r.journal_id or "", str(r.path)))

    def close(self) -> None:
        for reader in self.readers:
            reader.close()

    def __enter__(self) -> Journals:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _first(item: tuple[tuple[str, int], Any]) -> tuple[str, int]:
    key: tuple[str, int] = item[0]
    return key


_DECODERS: Final[dict[tuple[str, int], msgspec.json.Decoder[Any]]] = {
    (kind, t.kind_version): msgspec.json.Decoder(t) for kind, t in journal.PAYLOAD_TYPES.items()
}
_ANY: Final = msgspec.json.Decoder()


def decode_payload(kind: str, kind_version: int, text: str) -> tuple[Payload | dict[str, Any], str]:
    """The typed payload (or the JSON object of an unknown kind) and "" when it decodes, else the
    decoded JSON object (or {}) and why it does not: analyses go on, verify reports it. An
    erased payload is ``{"erased": true}`` (no problem: see :mod:`journal._erase`)."""
    if text == journal.ERASED_PAYLOAD:
        return {"erased": True}, ""
    decoder = _DECODERS.get((kind, kind_version))
    try:
        if decoder is not None:
            payload: Payload = decoder.decode(text)
            return payload, ""
        value = _ANY.decode(text)
    except RecursionError:  # a hostile file's [[[[…: bad JSON like any other
        return {}, journal.TOO_DEEP
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
        try:
            value = _ANY.decode(text)
        except (msgspec.DecodeError, TypeError, RecursionError):
            return {}, str(exc)
        return (value if isinstance(value, dict) else {}), str(exc)
    if not isinstance(value, dict):
        return {}, "payload is not a JSON object"
    return value, ""


def to_record(row: tuple[Any, ...]) -> Record:
    """A raw row (COLUMNS order) as a Record; a payload that does not decode is left as a dict.
    A row whose columns no bridge wrote (a text ``ts_mono_ns``, a ``ts_wall`` that is no time:
    ``verify``'s row_malformed) is a JournalFormatError: the analyses compute with them."""
    payload, _ = decode_payload(row[6], row[7], row[14])
    return record_from_row(row, payload)


def open_reader(path: str | os.PathLike[str]) -> Reader:
    """A journal reader, or ReplayInputError with a message a person can act on."""
    if Path(path).is_dir():
        raise ReplayInputError(f"{path} is a directory, not a journal file")
    try:
        return journal.open_reader(path)
    except FileNotFoundError:
        raise ReplayInputError(f"no journal at {path}") from None
    except journal.JournalFormatError as exc:
        reason = str(exc).removeprefix(f"cannot read {path} as a journal: ")
        reason = reason.removeprefix(f"{path} ")
        raise ReplayInputError(f"{path} is not a journal ({reason})") from None


def journal_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The journal files the given files and directories stand for (see the module docstring)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            # A journal rolled over into segments: its first file's name stands for them all
            # (even once that file was pruned); a later segment's name stands for itself.
            segments = [] if journal.segment_index(path) > 1 else journal.segment_files(path)
            files.extend([p for _, p in segments] or [path])
            continue
        found = [
            candidate
            for candidate in sorted(path.glob("*.db"), key=_natural)
            if candidate.is_file() and not _holds_no_journal(candidate)
        ]
        if not found:
            raise ReplayInputError(f"no journal in the directory {path}")
        files.extend(found)
    # A file named twice (given, and again as a segment of a journal given) is read once.
    return list(dict.fromkeys(files))


def _natural(path: Path) -> tuple[str, int, str]:
    # journal-2.db before journal-10.db
    stem, _, number = path.stem.rpartition("-")
    return (stem, int(number), path.name) if number.isdigit() else (path.stem, -1, path.name)


def _holds_no_journal(path: Path) -> bool:
    """An SQLite file (or an empty file) without the journal's tables."""
    try:
        with path.open("rb") as file:
            head = file.read(16)
    except OSError:
        return False  # let open_reader report it
    if not head:
        return True
    if head != b"SQLite format 3\x00":
        return False
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()
    except sqlite3.Error:
        return False  # let open_reader report it
    return "events" not in tables


def open_journals(paths: Sequence[str | os.PathLike[str]]) -> Journals:
    """Open every file read-only (a directory: the journals in it); ReplayInputError names the
    first one that cannot be read."""
    if not paths:
        raise ReplayInputError("no journal given")
    with ExitStack() as stack:
        readers = []
        for path in journal_files(paths):
            reader = open_reader(path)
            stack.callback(reader.close)
            readers.append(reader)
        forks = find_forks(readers)
        if forks:
            raise ReplayInputError(
                f"{forks[0].detail}: a fork (`agentteam-replay verify` reports it); read each of"
                " the two files on its own"
            )
        stack.pop_all()
    return Journals(readers)
