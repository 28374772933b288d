"""`calls` streams: the same calls, table and JSON as a list held in memory, at any length."""

from __future__ import annotations

import io
import random
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _calls_table as calls_table
from agentteam_task_bridge.replay import _render as render
from agentteam_task_bridge.replay._story import CallSummary
from agentteam_task_bridge.replay._terminal import SafeConsole

from .journal_helpers import KEY, SAMPLE_PAYLOADS
from .replay_helpers import Built, everyday_journal

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers

# Tool names a model may send: wide characters, rich markup and emoji codes, a tab, too long.
TOOLS = (
    "task_get",
    "task_create",
    "tâsk_ünï😀",
    "任务_获取",
    "[bold]x[/]",
    ":smile:",
    "a\tb",
    "t" * 40,
)
OUTCOMES = ("call_result", "call_error", "call_rejected", "call_cancelled")


def interleaved(path: Path, seed: int) -> None:
    """Sessions of calls that overlap, close in any order, and (in the last session, which
    never ends) stay open at the journal's end."""
    rng = random.Random(seed)
    with journal.open_sync_writer(path, key=KEY, synchronous_full=False) as writer:
        for s in range(3):
            session = f"s{seed}-{s}"
            started = SAMPLE_PAYLOADS["session_started"]
            agent = rng.choice(("agt_a", "agt_" + "b" * 20, "é"))
            payload = msgspec.structs.replace(started, agent_id=agent)
            events = [journal.Event(session_id=session, payload=payload)]
            open_calls: list[tuple[str, str]] = []
            for i in range(60):
                if open_calls and rng.random() < 0.5:
                    call_id, tool = open_calls.pop(rng.randrange(len(open_calls)))
                    kind = rng.choice(OUTCOMES)
                    events.append(
                        journal.Event(
                            session_id=session,
                            call_id=call_id,
                            gen_ai_tool_name=tool,
                            payload=SAMPLE_PAYLOADS[kind],
                        )
                    )
                else:
                    call_id, tool = f"{session}.{i}", rng.choice(TOOLS)
                    open_calls.append((call_id, tool))
                    events.append(
                        journal.Event(
                            session_id=session,
                            call_id=call_id,
                            gen_ai_tool_name=tool,
                            payload=SAMPLE_PAYLOADS["call_received"],
                        )
                    )
            if s < 2:
                events.append(
                    journal.Event(session_id=session, payload=SAMPLE_PAYLOADS["session_ended"])
                )
            writer.append_many(events, durable=False)


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("interleaved")
    paths = [directory / "a.db", directory / "b.db"]
    for seed, path in enumerate(paths):
        interleaved(path, seed)
    return paths


@pytest.mark.parametrize("max_open", [3, 10_000])
def test_stories_in_order_are_the_stories_as_they_close_sorted(
    journals: list[Path], max_open: int
) -> None:
    def summaries(in_order: bool) -> list[CallSummary]:
        with replay.open_journals(journals) as opened:
            stories = replay.iter_stories(opened.records(), max_open=max_open, in_order=in_order)
            return [story.summary() for story in stories]

    closing, ordered = summaries(in_order=False), summaries(in_order=True)
    assert ordered == sorted(closing, key=lambda c: (c.journal_id, c.first_seq))
    assert len({c.journal_id for c in ordered}) == 2 and len(ordered) > 100


@pytest.mark.parametrize("limit", [None, 1, 25])
def test_the_stream_is_the_list(journals: list[Path], limit: int | None) -> None:
    listed = replay.list_calls(journals, limit=limit)
    with replay.stream_calls(journals, limit=limit) as stream:
        assert list(stream) == listed.calls
    assert (stream.scanned, stream.matched) == (listed.scanned, listed.matched)
    if limit is not None:
        assert len(listed.calls) == limit < listed.matched


def test_the_json_written_as_read_is_the_lists(journals: list[Path]) -> None:
    where = replay.CallFilter(status="error")
    file = io.StringIO()
    with replay.stream_calls(journals, where) as stream:
        calls_table.write_calls_json(file, stream)
    assert file.getvalue() == render.to_json(replay.list_calls(journals, where)) + "\n"


def one_table(console: Console, result: replay.CallList) -> None:
    """The calls table as one rich Table of every row (how it was printed before it streamed)."""
    agents = {c.agent_id for c in result.calls}
    columns = ["time:8", "call:17", "tool:15", "status:10", "error:14", "ms:>6"]
    if len(agents) > 1:
        columns[0] = "agent:8"
    table = render._table(*columns)
    for c in result.calls:
        state = "in_doubt" if c.in_doubt else c.status
        table.add_row(
            c.started_at[11:19] if len(agents) <= 1 else (c.agent_id or "-"),
            c.call_id,
            c.tool or "-",
            Text(state, style=render._STATUS_STYLE.get(state, "")),
            c.error_code or "-",
            render._ms(c.bridge_ms),
        )
    console.print(table)
    console.print(f"{result.matched} of {result.scanned} calls matched")


@pytest.mark.parametrize("width", [200, 80, 41, 24])
@pytest.mark.parametrize("agents", ["one", "several"])
def test_the_table_printed_in_chunks_is_one_table(
    journals: list[Path], monkeypatch: pytest.MonkeyPatch, width: int, agents: str
) -> None:
    monkeypatch.setattr(calls_table, "_CALL_CHUNK", 7)  # many chunks, one of them short
    listed = replay.list_calls(journals if agents == "several" else journals[:1])
    if agents == "one":
        listed = msgspec.structs.replace(
            listed, calls=[msgspec.structs.replace(c, agent_id="agt_a") for c in listed.calls]
        )
    printed = []
    for draw in (one_table, calls_table.render_calls):
        out = io.StringIO()
        draw(Console(file=out, width=width, force_terminal=True, color_system="truecolor"), listed)
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert printed[0].count("\n") > 3 * 7


def test_an_empty_list_prints_its_header(everyday_journal: Built) -> None:
    listed = replay.list_calls([everyday_journal.path], replay.CallFilter(session="nope"))
    printed = []
    for draw in (one_table, calls_table.render_calls):
        out = io.StringIO()
        draw(Console(file=out, width=80), listed)
        printed.append(out.getvalue())
    assert printed[0] == printed[1] and printed[0].startswith("time")


@pytest.mark.parametrize("tmpdir", ["missing", "full"])
def test_the_table_is_printed_when_no_temporary_file_can_be_written(
    journals: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmpdir: str
) -> None:
    """A read-only or missing TMPDIR, or a full disk, costs memory, never the table."""
    import tempfile

    monkeypatch.setattr(calls_table, "_IN_MEMORY_BYTES", 512, raising=False)  # a few rows
    if tmpdir == "missing":
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    else:
        real = tempfile.TemporaryFile

        def full_disk(*args: object, **kwargs: object) -> object:
            file = real(*args, **kwargs)  # type: ignore[call-overload]

            class Full:
                written = 0

                def write(self, data: bytes) -> int:
                    if self.written:  # the first chunk goes to disk, then it is full
                        raise OSError(28, "No space left on device")
                    self.written = file.write(data[:100])  # a short write first
                    return self.written

                def __getattr__(self, name: str) -> object:
                    return getattr(file, name)

            return Full()

        monkeypatch.setattr(tempfile, "TemporaryFile", full_disk)
    listed = replay.list_calls(journals)
    printed = []
    for draw in (one_table, calls_table.render_calls):
        out = io.StringIO()
        draw(Console(file=out, width=120), listed)
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    with calls_table.spill_calls(Console(file=io.StringIO()), listed.calls) as spilled:
        assert spilled.spill_error is not None
        assert sum(1 for _row in spilled.rows()) == len(listed.calls) > 100


def test_the_cli_says_when_the_table_was_held_in_memory(
    journals: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import tempfile

    from agentteam_task_bridge.replay._cli import main

    monkeypatch.setattr(calls_table, "_IN_MEMORY_BYTES", 512)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    assert main(["calls", *map(str, journals)]) == 0
    printed = capsys.readouterr()
    assert printed.out.count("\n") > 100 and "calls matched" in printed.out
    assert "held in memory" in printed.err


_CELL = st.one_of(
    st.text(alphabet="abc_-.:0123456789", max_size=24),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=24),
    st.sampled_from(["invalid_arguments", ":smile:", "12:34:56", "a[b]c", "é", "任务", "x\ty"]),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(cells=[("a", "c" * 30, "t", "invalid_arguments")], width=80, chunk=1)
@example(cells=[("a", "b", ":smile:", "c"), ("a", "b", "c", "d")], width=None, chunk=2)
@given(
    cells=st.lists(st.tuples(_CELL, _CELL, _CELL, _CELL), min_size=0, max_size=12),
    width=st.sampled_from([24, 41, 64, 80, 200, None]),
    chunk=st.integers(1, 5),
)
def test_the_plain_lines_are_richs_lines(
    journals: list[Path], cells: list[tuple[str, str, str, str]], width: int | None, chunk: int
) -> None:
    """Without colours the table is written without rich's layout (`_plain_lines`): byte for
    byte what rich prints, for any cells (cut, markup, emoji codes, wide or tab characters
    fall back to rich), at any console width, the command line's unwrapped one (None) too."""
    base = replay.list_calls(journals[:1], limit=1).calls[0]
    calls = [
        msgspec.structs.replace(
            base, agent_id=agent or None, call_id=call, tool=tool, error_code=code
        )
        for agent, call, tool, code in cells
    ]
    listed = replay.CallList(calls=calls, scanned=len(calls), matched=len(calls))
    printed = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(calls_table, "_CALL_CHUNK", chunk)
        for draw in (one_table, calls_table.render_calls):
            out = io.StringIO()
            draw(_console_on(out, width), listed)
            printed.append(out.getvalue())
    assert printed[0] == printed[1]


def _console_on(out: io.StringIO, width: int | None) -> Console:
    """A console writing to ``out``: a terminal ``width`` wide, or a pipe's (None)."""
    if width is None:
        return SafeConsole(file=out, width=1 << 14, soft_wrap=True, highlight=False)
    return Console(file=out, width=width)


class _EncodedOut(io.StringIO):
    """A terminal whose encoding is not UTF (``PYTHONIOENCODING=ascii``, a Latin-1 locale)."""

    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252", "utf-16"])
@pytest.mark.parametrize("width", [80, None])
def test_the_plain_lines_are_richs_lines_in_any_encoding(
    journals: list[Path], encoding: str, width: int | None
) -> None:
    """Rich draws ASCII lines where the output's encoding is not UTF-8's: the plain lines are
    those too (or rich's own), never a rule the output cannot encode."""
    calls = [  # cells the plain lines take: printable ASCII, one cut
        msgspec.structs.replace(c, agent_id="agt_a", tool="task_get", call_id=f"call-{i}" * 5)
        for i, c in enumerate(replay.list_calls(journals[:1], limit=5).calls)
    ]
    listed = replay.CallList(calls=calls, scanned=5, matched=5)
    printed = []
    for draw in (one_table, calls_table.render_calls):
        out = _EncodedOut(encoding)
        draw(_console_on(out, width), listed)
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert ("\u2500" in printed[1]) is encoding.startswith("utf")
