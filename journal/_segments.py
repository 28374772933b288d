"""Segments: one journal (one id, one seq and hash chain) kept in several files.

A journal rolls over by size or age into a new file chained to the last. Files are named from
the journal's path ``P`` (``journal-3.db``): segment 1 is ``P`` itself, segment ``k`` is
``<stem>.seg<k, 4 digits or more><suffix>`` beside it (``journal-3.seg0002.db``). Seq goes on
across files and the journal id stays the same, so a reader merging files by (journal id, seq)
reads a segmented journal as one, and a fleet store sees one stream.

``journal_meta`` of a segment after the first holds ``segment_index``, ``segment_first_seq``,
``segment_prev_hash`` (the previous segment's head) and ``segment_prev_file``; its first event is
``segment_started`` naming the same, with the previous segment's last signed checkpoint. A
segment that was rolled over from holds ``segment_next`` (its successor's file name) and takes
no more events (the append trigger refuses them). The live segment is the highest-numbered file.

A new segment is built under a hidden temporary name (``.<name>.tmp``), closed, and renamed into
place whole: a crash leaves either no successor (the old segment stays live) or a complete one.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Final
from urllib.parse import quote

import msgspec

__all__ = [
    "SegmentInfo",
    "base_path",
    "live_segment",
    "read_segment_info",
    "segment_files",
    "segment_index",
    "segment_path",
    "temporary_path",
]

_SEGMENT_NAME: Final = re.compile(r"(?P<stem>.+)\.seg(?P<index>\d{4,})(?P<suffix>\.[^.]*)?")


class SegmentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Where a file sits in its journal: its number, where it starts, what it follows and
    (once rolled over from) which file follows it."""

    index: int = 1
    first_seq: int = 1
    prev_hash: str | None = None  # None for segment 1 (it starts from genesis)
    prev_file: str | None = None
    next_file: str | None = None

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> SegmentInfo:
        try:
            index = int(meta.get("segment_index", 1))
            first = int(meta.get("segment_first_seq", 1))
        except ValueError:
            index, first = 1, 1
        return cls(
            index=index,
            first_seq=first,
            prev_hash=meta.get("segment_prev_hash"),
            prev_file=meta.get("segment_prev_file"),
            next_file=meta.get("segment_next"),
        )


def segment_path(base: Path, index: int) -> Path:
    """The file of segment ``index`` of the journal whose first segment is ``base``."""
    if index == 1:
        return base
    suffix = base.suffix if base.suffix else ""
    stem = base.name[: -len(suffix)] if suffix else base.name
    return base.with_name(f"{stem}.seg{index:04d}{suffix}")


def segment_index(path: Path) -> int:
    """The segment number a file name says (1 for a name that is not a later segment's)."""
    found = _SEGMENT_NAME.fullmatch(path.name)
    return int(found["index"]) if found else 1


def base_path(path: Path) -> Path:
    """The journal's own path (its first segment's) for any of its segment files."""
    found = _SEGMENT_NAME.fullmatch(path.name)
    if found is None:
        return path
    return path.with_name(found["stem"] + (found["suffix"] or ""))


def segment_files(base: Path) -> list[tuple[int, Path]]:
    """The journal's segment files that exist, (index, path) in index order (``base`` first)."""
    found: list[tuple[int, Path]] = [(1, base)] if base.is_file() else []
    directory = base.parent if str(base.parent) else Path(".")
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        candidate = base.parent / name
        if name.startswith(".") or segment_index(candidate) == 1:
            continue
        if base_path(candidate) == base and candidate.is_file():
            found.append((segment_index(candidate), candidate))
    return sorted(found)


def live_segment(base: Path) -> Path:
    """The file a writer of the journal at ``base`` appends to: its highest-numbered segment,
    or ``base`` itself when it has no segment yet (a new journal)."""
    files = segment_files(base)
    return files[-1][1] if files else base


def temporary_path(final: Path) -> Path:
    """The hidden name a new segment is built under before it is renamed to ``final``."""
    return final.with_name(f".{final.name}.tmp")


def remove_temporary(final: Path) -> None:
    """Remove what a crashed roll-over left under the temporary name (never journal data: the
    file was not published, its events went on in the previous segment)."""
    temp = temporary_path(final)
    for path in (temp, Path(f"{temp}-wal"), Path(f"{temp}-shm"), Path(f"{temp}-journal")):
        path.unlink(missing_ok=True)


def read_segment_info(path: Path) -> SegmentInfo:
    """The segment rows of a file's ``journal_meta`` (read-only; SegmentInfo() if it has none)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT key, value FROM journal_meta WHERE key LIKE 'segment%'")
        return SegmentInfo.from_meta({str(k): str(v) for k, v in rows})
    finally:
        conn.close()


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
