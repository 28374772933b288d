"""The ``calls`` table and its JSON, written as the calls stream in: any length in flat memory.

The table is what rich prints for one table of every row; rich sizes a column to its widest
cell, so the rows are measured and set aside as they are read (past ``_IN_MEMORY_BYTES``, in an
anonymous temporary file; where none can be written, a read-only or missing ``TMPDIR`` or a full
disk, in memory), then printed in tables of ``_CALL_CHUNK`` rows whose columns have those widths.
The JSON is what ``to_json`` prints for a :class:`CallList`, written call by call.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Final

import msgspec
from rich import box
from rich._emoji_replace import _emoji_replace
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.text import Text

from ._calls import CallList, CallStream
from ._render import _STATUS_STYLE, _encode, _ms, _table
from ._story import CallSummary
from ._terminal import json_shown

__all__ = ["SpilledCalls", "print_calls", "render_calls", "spill_calls", "write_calls_json"]

# The calls table's columns; the first is the agent instead when the calls are of several.
_CALL_COLUMNS: Final = ("time:8", "call:17", "tool:15", "status:10", "error:14", "ms:>6")
_CALL_CHUNK: Final = 1000  # rows printed per table
_IN_MEMORY_BYTES = 1 << 20  # rows kept in memory before they go to the temporary file


def render_calls(console: Console, result: CallList | CallStream) -> None:
    """The calls, one line each, as rich would print one table of them all, in flat memory."""
    with spill_calls(console, result.calls if isinstance(result, CallList) else result) as rows:
        print_calls(console, rows, result)


class SpilledCalls:
    """The calls table's rows in an anonymous temporary file, and the widths of its columns.

    Rich sizes a column to its widest cell, so every row is measured before the first is
    printed; a stream is read once, so its rows wait on disk rather than in memory. The first
    ``_IN_MEMORY_BYTES`` of them, and all that no temporary file could take (``spill_error``
    says why), wait in memory: the table is printed whatever the disk.
    """

    def __init__(self, console: Console) -> None:
        # The temporary file, unbuffered: what it holds is what it took.
        self._file: IO[bytes] | None = None
        self._pending = bytearray()  # the rows after those in the file
        self.spill_error: OSError | None = None
        self.agents: set[str | None] = set()  # two at most: enough to tell one from several
        headers = ["time:8", "agent:8", *_CALL_COLUMNS[1:]]
        self._bounds = [int(h.partition(":")[2].lstrip(">")) for h in headers]
        self._options = console.options
        self._console = console
        self.widths = [_cell_width(console, self._options, h.partition(":")[0]) for h in headers]

    def add(self, c: CallSummary) -> None:
        """Measure and store one call's cells: time, agent, call, tool, state, error, ms."""
        if len(self.agents) < 2:
            self.agents.add(c.agent_id)
        state = "in_doubt" if c.in_doubt else c.status
        cells = [
            c.started_at[11:19],
            c.agent_id or "-",
            c.call_id,
            c.tool or "-",
            state,
            c.error_code or "-",
            _ms(c.bridge_ms),
        ]
        widths, bounds = self.widths, self._bounds
        for i, cell in enumerate(cells):
            if widths[i] < bounds[i]:
                # The state is printed as a Text: no markup in it.
                width = _cell_width(self._console, self._options, Text(cell) if i == 4 else cell)
                widths[i] = min(bounds[i], max(widths[i], width))
        self._pending += _encode(cells) + b"\n"
        if len(self._pending) >= _IN_MEMORY_BYTES and self.spill_error is None:
            self._spill()

    def _spill(self) -> None:
        """Move the rows in memory to the temporary file, as far as it takes them."""
        written = 0
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(buffering=0)
            data = bytes(self._pending)
            while written < len(data):
                written += self._file.write(data[written:] if written else data)
        except OSError as exc:
            self.spill_error = exc  # from now on the rows stay in memory
        del self._pending[:written]

    def rows(self) -> Iterator[list[str]]:
        head = b""  # a row the file took only the start of (a short write)
        if self._file is not None:
            self._file.seek(0)
            with open(self._file.fileno(), "rb", closefd=False) as spilled:
                for line in spilled:
                    if not line.endswith(b"\n"):
                        head = line
                        break
                    yield msgspec.json.decode(line, type=list[str])
        for line in (head + self._pending).splitlines():
            yield msgspec.json.decode(line, type=list[str])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._pending.clear()

    def __enter__(self) -> SpilledCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spill_calls(console: Console, calls: Iterable[CallSummary]) -> SpilledCalls:
    """Read the calls into the table's rows (the reading half of :func:`render_calls`)."""
    spilled = SpilledCalls(console)
    try:
        for call in calls:
            spilled.add(call)
    except BaseException:
        spilled.close()
        raise
    return spilled


def print_calls(console: Console, spilled: SpilledCalls, result: CallList | CallStream) -> None:
    """Print the rows in tables of ``_CALL_CHUNK`` rows whose columns have the widths one table
    of them all would have, then the count (``result``'s, read to its end)."""
    fleet = len(spilled.agents) > 1  # who matters more than the exact time
    names = ["agent:8" if fleet else "time:8", *_CALL_COLUMNS[1:]]
    bounds = spilled.widths[1:] if fleet else spilled.widths[:1] + spilled.widths[2:]
    widths = [
        min(w, int(n.partition(":")[2].lstrip(">"))) for w, n in zip(bounds, names, strict=True)
    ]
    rows = spilled.rows()
    shown = 0
    header, chunk = True, list(itertools.islice(rows, _CALL_CHUNK))
    while header or chunk:
        cells = [[row[1] if fleet else row[0], *row[2:]] for row in chunk]
        plain = _plain_lines(console, names, widths, cells, header=header)
        if plain is not None:  # as it is: a Text's lines (a string's newlines would be shown)
            console.print(Text(plain), soft_wrap=True, no_wrap=True, overflow="ignore", crop=False)
            shown += len(chunk)
            header, chunk = False, list(itertools.islice(rows, _CALL_CHUNK))
            continue
        table = _table(*names)
        table.show_header = header
        for column, width in zip(table.columns, widths, strict=True):
            column.width = width
        for row in chunk:
            state = Text(row[4], style=_STATUS_STYLE.get(row[4], ""))
            table.add_row(row[1] if fleet else row[0], row[2], row[3], state, row[5], row[6])
        console.print(table)
        shown += len(chunk)
        header, chunk = False, list(itertools.islice(rows, _CALL_CHUNK))
    more = f" (showing {shown})" if shown < result.matched else ""
    console.print(f"{result.matched} of {result.scanned} calls matched{more}")


def _plain_lines(
    console: Console, names: list[str], widths: list[int], rows: list[list[str]], *, header: bool
) -> str | None:
    """The lines rich prints for this table (``names``' columns at ``widths``), made without
    rich's layout (about 300 us a row, nearly all of a long ``calls`` listing's time), without
    the last newline; or None where only rich knows them: a console with colours or that draws
    another box than ``SIMPLE_HEAD``'s (one whose encoding is not UTF: ASCII lines), a table wider
    than the console, a cell that is not printable ASCII or that rich would read as markup or
    an emoji code (``[b]``, ``:smile:``). A cell wider than its column is cut with an ellipsis,
    as rich cuts it. tests/test_replay_calls_stream.py holds these lines to rich's, byte for
    byte."""
    if console.color_system is not None:
        return None
    if box.SIMPLE_HEAD.substitute(console.options, safe=console.safe_box) is not box.SIMPLE_HEAD:
        return None
    right = [n.partition(":")[2].startswith(">") for n in names]
    titles = [n.partition(":")[0] for n in names]
    # Each column but the last is followed by its right padding and the separator's blank.
    total = sum(widths) + 2 * (len(widths) - 1)
    if total > console.options.max_width:
        return None
    last = len(widths) - 1
    out: list[str] = []
    for cells in ([titles] if header else []) + rows:
        line = []
        for i, cell in enumerate(cells):
            if not (cell.isascii() and cell.isprintable()) or "[" in cell:
                return None
            if ":" in cell and _emoji_replace(cell) != cell:
                return None
            width = widths[i]
            if len(cell) > width:
                cell = cell[: width - 1] + "\u2026" if width else ""
            text = cell.rjust(width) if right[i] else cell.ljust(width)
            line.append(text if i == last else text + "  ")
        out.append("".join(line))
        if header and len(out) == 1:
            out.append("\u2500" * total)
    return "\n".join(out)


def _cell_width(console: Console, options: ConsoleOptions, cell: str | Text) -> int:
    """The width rich measures for a cell (a string's markup and emoji codes rendered)."""
    text = cell.plain if isinstance(cell, Text) else cell
    if text.isascii() and text.isprintable() and "[" not in text and ":" not in text:
        return min(len(text), options.max_width)  # what rich measures, without its cost
    return Measurement.get(console, options, cell).maximum


def write_calls_json(file: IO[str], stream: CallStream) -> None:
    """The stream as ``to_json`` prints a :class:`CallList`, written call by call."""
    file.write('{"calls":[')
    separator = ""
    for call in stream:
        file.write(separator + json_shown(_encode(msgspec.to_builtins(call)).decode()))
        separator = ","
    file.write(f'],"scanned":{stream.scanned},"matched":{stream.matched}}}\n')
