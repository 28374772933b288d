"""A journal someone else wrote, read on the reviewer's terminal: its text is shown, never obeyed.

Every string a hostile author controls (session, call and tool ids, client names, error codes
and messages, routes, deprecated names, file names) carries terminal escapes (OSC 52 clipboard
write, OSC 8 hyperlink, erase-line and cursor-up that hide earlier lines, a bell, a C1 CSI, a
bidirectional override) and rich markup (an unmatched ``[/red]``, a ``[link=…]``). Each command
must finish with its verdict (no traceback), print no control character a terminal would obey,
and show the text as it is.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from agentteam_task_bridge import journal
from agentteam_task_bridge.replay._calls import list_calls
from agentteam_task_bridge.replay._calls_table import render_calls
from agentteam_task_bridge.replay._terminal import SafeConsole

from .replay_helpers import (
    SEED_VKEY,
    call_event,
    cli_json,
    injected,
    replay_main,
    route,
    session_started,
    tamper,
    write_events,
)

ESCAPES: Final = (
    "\x1b]52;c;SGFja2Vk\x07"  # OSC 52: write the clipboard
    "\x1b[2K\x1b[1A"  # erase the line, cursor up: hide what was printed before
    "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 hyperlink
    "\x9b31m\u202e"  # C1 CSI, right-to-left override
)
MARKUP: Final = "[/red][link=http://evil.example]L[/link][conceal]hidden"
MARKS: Final = "\u200f1\u061c2\u200e"  # the implicit directional marks: they move the digits
HOSTILE: Final = ESCAPES + MARKUP + MARKS
# What a terminal obeys: C0 but newline and tab, DEL, C1, bidirectional controls and marks.
OBEYED: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def hostile_journal(path: Path) -> Path:
    s, c = "s1" + HOSTILE, "c1" + HOSTILE
    tool = "task_get" + HOSTILE

    def ev(call: str, payload: journal.Payload, name: str = tool) -> journal.Event:
        return call_event(call, payload, tool=name, session=s)

    write_events(
        path,
        [
            session_started(s, client_name="cur" + HOSTILE, agent_id="agt" + HOSTILE),
            ev(c, journal.CallReceived(arguments={"channel": HOSTILE, "number": 1})),
            ev(c, injected()),
            ev(c, journal.UpstreamRequest(method="GET" + HOSTILE, route=route() + HOSTILE)),
            ev(c, journal.UpstreamResponse(status=500, body={"e": HOSTILE})),
            ev(c, journal.CallError(error_code="e" + HOSTILE, retryable=False, message=HOSTILE)),
            ev("c2", journal.CallReceived(arguments={}), "list_tasks" + HOSTILE),
            ev(
                "c2",
                journal.DeprecatedUsage(
                    use_kind="tool_name", old_name="old" + HOSTILE, replacement="new" + HOSTILE
                ),
                "list_tasks" + HOSTILE,
            ),
            ev("c2", journal.CallResult(result={"x": HOSTILE}), "list_tasks" + HOSTILE),
            journal.Event(
                session_id=s,
                mcp_method_name="notifications/cancelled",
                payload=journal.SessionEnded(reason=HOSTILE),
            ),
        ],
    )
    return path


def _reading_commands(path: Path, tmp_path: Path) -> list[tuple[str, list[str | Path]]]:
    """Each command that reads a whole journal, with its arguments (its files in tmp_path)."""
    extra: dict[str, list[str | Path]] = {
        "report": ["--html", tmp_path / "report.html"],
        "export": ["-o", tmp_path / "spans.json"],
    }
    commands = ("verify", "calls", "audit", "idempotency", "report", "export")
    return [(command, [command, path, *extra.get(command, [])]) for command in commands]


@pytest.mark.parametrize(
    "command", ["verify", "calls", "show", "audit", "deprecations", "idempotency"]
)
def test_a_journals_text_is_shown_not_obeyed(tmp_path: Path, command: str) -> None:
    path = hostile_journal(tmp_path / "journal.db")
    args: list[str | Path] = [command, path]
    if command == "show":
        args.append("c1" + HOSTILE)
    if command == "verify":
        args += ["--trusted-key", SEED_VKEY]
    done = replay_main(*args)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr
    assert not OBEYED.search(done.stdout), done.stdout
    assert not OBEYED.search(done.stderr), done.stderr
    # The escapes are visible stand-ins, the markup is printed as written (tables cut cells).
    if command != "idempotency":  # its tables name the registry's tools, not the journal's
        assert "\u241b]52;c;" in done.stdout
    if command in ("verify", "show"):
        assert "[/red][link=http://evil.example]" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "command", ["verify", "calls", "show", "audit", "deprecations", "idempotency"]
)
def test_json_for_a_terminal_holds_no_character_it_would_obey(tmp_path: Path, command: str) -> None:
    """``--json`` escapes C0 by JSON's rules; DEL, C1 (a CSI) and the bidirectional overrides
    are written as escapes too, so the same JSON printed to a terminal is shown, not obeyed."""
    path = hostile_journal(tmp_path / "journal.db")
    args: list[str | Path] = [command, path, "--json"]
    if command == "show":
        args.insert(2, "c1" + HOSTILE)
    if command == "verify":
        args += ["--trusted-key", SEED_VKEY]
    done = replay_main(*args)
    assert done.returncode in (0, 1), done.stderr
    assert not OBEYED.search(done.stdout), done.stdout
    parsed = json.dumps(json.loads(done.stdout), ensure_ascii=False)
    if command != "idempotency":  # its JSON names the registry's tools, not the journal's
        assert "\\u009b31m\\u202e" in done.stdout  # the journal's C1 CSI and override
        assert "\x9b31m\u202e" in parsed  # the same strings to a JSON reader


@pytest.mark.parametrize("fmt", ["jsonl", "otlp"])
def test_an_export_to_a_terminal_holds_no_character_it_would_obey(tmp_path: Path, fmt: str) -> None:
    """``export`` writes JSON (a line per event, or OTLP spans) to stdout by default: the
    characters a terminal obeys are JSON escapes there too, the same JSON to a collector."""
    path = hostile_journal(tmp_path / "journal.db")
    done = replay_main("export", path, "--format", fmt)
    assert done.returncode == 0, done.stderr
    assert not OBEYED.search(done.stdout), done.stdout
    assert "\\u009b31m\\u202e" in done.stdout
    lines = done.stdout.splitlines() if fmt == "jsonl" else [done.stdout]
    parsed = json.dumps([json.loads(line) for line in lines], ensure_ascii=False)
    assert "\x9b31m\u202e" in parsed


@pytest.mark.parametrize("command", ["prove --call", "check-proof"])
def test_a_proof_s_json_for_a_terminal_holds_no_character_it_would_obey(
    tmp_path: Path, command: str
) -> None:
    """attack9: ``prove --json`` wrote the call id, and ``check-proof --json`` the leaves of a
    proof file (anyone's: their tool names, sessions, call ids), with C1 and bidirectional
    controls raw. They are JSON escapes there too; the proof file itself is the same JSON."""
    path = hostile_journal(tmp_path / "journal.db")
    proof = tmp_path / "proof.json"
    written = replay_main("prove", path, "--call", "c1" + HOSTILE, "--output", proof)
    assert written.returncode == 0, written.stderr
    if command == "check-proof":
        done = replay_main("check-proof", proof, "--trusted-key", SEED_VKEY, "--json")
    else:
        done = replay_main("prove", path, "--call", "c1" + HOSTILE, "--json")
    assert done.returncode == 0, done.stderr
    assert not OBEYED.search(done.stdout), done.stdout
    assert "\\u009b31m\\u202e" in done.stdout
    parsed = json.loads(done.stdout)
    assert "\x9b31m\u202e" in json.dumps(parsed, ensure_ascii=False)
    if command != "check-proof":
        assert parsed == json.loads(proof.read_text(encoding="utf-8"))


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252"])
@pytest.mark.parametrize("command", ["calls", "audit", "show", "calls --json"])
def test_an_output_that_cannot_encode_a_journals_text_gets_it_escaped(
    tmp_path: Path, encoding: str, command: str
) -> None:
    """An output whose encoding is not UTF (a pipe on Windows, a Latin-1 locale,
    PYTHONIOENCODING=ascii): each character it lacks, a journal's or a stand-in, is written as
    a JSON escape, the command ends as it would (no traceback), and its JSON is the same JSON."""
    path = hostile_journal(tmp_path / "journal.db")
    args = [*command.split(), str(path)]
    if command == "show":
        args.append("c1" + HOSTILE)

    def run(**env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "agentteam_task_bridge.replay._cli", *args],
            capture_output=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "80", **env},
            check=False,
        )
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        return done.stdout.decode(env.get("PYTHONIOENCODING", "utf-8"))

    out = run(PYTHONIOENCODING=encoding)
    assert out.isascii() or encoding != "ascii"
    if command == "calls --json":
        assert json.loads(out) == json.loads(run())
    else:
        assert "\\u241b]52;c;" in out  # the stand-in of an escape, escaped
        assert not OBEYED.search(out), out


def test_on_a_terminal_only_its_own_colours_are_escapes(tmp_path: Path) -> None:
    """With colour on, the only escapes written are rich's own SGR styles."""
    path = hostile_journal(tmp_path / "journal.db")
    file = io.StringIO()
    console = SafeConsole(file=file, force_terminal=True, color_system="standard", width=200)
    render_calls(console, list_calls([path]))
    out = file.getvalue()
    assert "\u241b]52;c;" in out
    assert not OBEYED.search(re.sub(r"\x1b\[[0-9;]*m", "", out)), repr(out)


@pytest.mark.parametrize(
    "name", ["a\x1b]52;c;SGFja2Vk\x07.db", "a\nagentteam-replay: OK.db", "a\x9b2J\u202e.db"]
)
def test_a_file_name_in_an_error_is_one_line_shown_not_obeyed(tmp_path: Path, name: str) -> None:
    done = replay_main("verify", tmp_path / name)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("agentteam-replay: ")
    assert not OBEYED.search(done.stderr), done.stderr


FORMULAS: Final = ['=HYPERLINK("http://evil.example","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(1)"]
FORMULAS_TOO: Final = ["\t=1+1", "\r=1+1", "\uff1d1+1"]


def test_audit_csv_cells_are_never_formulas(tmp_path: Path) -> None:
    """Every text cell the journal's author controls, in every CSV file: a spreadsheet shows it,
    never runs it; the value is the journal's after the apostrophe."""
    texts = [*FORMULAS, *FORMULAS_TOO]
    events = [session_started(texts[0], client_name=texts[1], agent_id=texts[2])]
    for i, text in enumerate(texts):
        call = f"c{i}"
        events += [
            call_event(call, journal.CallReceived(arguments={}), tool=text, session=texts[0]),
            call_event(call, injected(agent=texts[2]), tool=text, session=texts[0]),
            call_event(
                call,
                journal.CallError(error_code=text, retryable=False, message="m", duration_ms=1.0),
                tool=text,
                session=texts[0],
            ),
        ]
    path = tmp_path / "journal.db"
    write_events(path, events)
    done = replay_main("audit", path, "--csv", tmp_path / "csv")
    assert done.returncode == 0, done.stderr
    cells = []
    for file in sorted((tmp_path / "csv").glob("*.csv")):
        with file.open(newline="") as f:
            cells += [(file.name, cell) for row in csv.reader(f) for cell in row]
    starts = tuple("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")
    assert not [c for c in cells if c[1].startswith(starts)], cells
    shown = {cell for _, cell in cells}
    for text in texts:  # each one is there, as text
        assert f"'{text}" in shown, text
    assert "1" in shown  # numbers stay numbers


@pytest.mark.parametrize("depth", [100_000, 5_000, 990])
@pytest.mark.parametrize("kind", ["call_received", "key_rotated"])
def test_a_payload_nested_deeper_than_the_stack_is_a_finding(
    tmp_path: Path, depth: int, kind: str
) -> None:
    """``[[[[…`` a hundred thousand deep (or just past the decoder's stack): payload_invalid
    from verify, the other commands finish; never a RecursionError."""
    path = hostile_journal(tmp_path / "journal.db")
    deep = "[" * depth + "]" * depth
    tamper(
        path,
        f"UPDATE events SET kind = '{kind}', payload = ? WHERE seq = 2",
        params=('{"arguments":{"x":' + deep + '},"vkey":' + deep + "}",),
    )
    for command, args in _reading_commands(path, tmp_path):
        done = replay_main(*args, "--json") if command == "verify" else replay_main(*args)
        assert done.returncode in (0, 1, 2), (command, done.stderr)
        assert "Traceback" not in done.stderr and "Recursion" not in done.stderr, command
        if command == "verify" and depth > 1_000:
            findings = json.loads(done.stdout)["findings"]
            assert {"rule": "payload_invalid", "detail": journal.TOO_DEEP} in [
                {"rule": f["rule"], "detail": f["detail"]} for f in findings
            ], findings


@pytest.mark.parametrize("column", ["payload", "session_id", "gen_ai_tool_name", "ts_wall"])
def test_a_text_that_is_not_utf8_is_row_malformed_and_never_quoted(
    tmp_path: Path, column: str
) -> None:
    """sqlite3 refuses to read a text that is not UTF-8 and quotes it whole in its error: a
    token, a terminal's controls. The reader gives that text as bytes, so verify names the row
    (row_malformed) and reads on to the end; every other command stops on it as on a BLOB;
    nothing shows more than 10 of its characters."""
    path = hostile_journal(tmp_path / "journal.db")
    secret = "atk_" + "Q" * 20
    raw = (secret.encode() + b"\xff\x1b[31m").hex()
    tamper(path, f"UPDATE events SET {column} = CAST(X'{raw}' AS TEXT) WHERE seq = 3")
    events = journal.open_reader(path).count()
    code, out = cli_json("verify", path, "--trusted-key", SEED_VKEY, wire=False)
    assert code == 1 and out["journals"][0]["events"] == events
    said = f"{column} is bytes b'atk_QQQQQQ'… ({len(raw) // 2} bytes), not text"
    assert {"seq": 3, "rule": "row_malformed", "detail": said} in [
        {k: f[k] for k in ("seq", "rule", "detail")} for f in out["findings"]
    ], out["findings"]
    for command, args in _reading_commands(path, tmp_path):
        done = replay_main(*args)
        assert done.returncode in (1, 2), (command, done.stderr)
        assert "QQQQQQQ" not in done.stdout + done.stderr and "\x1b" not in done.stderr, command
        assert "Traceback" not in done.stderr, command


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("ts_mono_ns", "abc", "ts_mono_ns is str 'abc', not an integer"),
        ("ts_mono_ns", 1.5, "ts_mono_ns is float 1.5, not an integer"),
        ("kind_version", "one", "kind_version is str 'one', not an integer"),
        ("ts_wall", "yesterday", "ts_wall 'yesterday' is not an RFC 3339 time"),
        (
            "ts_wall",
            "2026-12-04T10:00:00",
            "ts_wall '2026-12-04T10:00:00' has no UTC offset",
        ),
        (
            "ts_wall",
            b"2026-12-04T10:00:00Z",
            "ts_wall is bytes b'2026-12-04T10:00:00Z', not text",
        ),
        (
            "session_id",
            b"atk_0123456789a",
            "session_id is bytes b'atk_012345'… (15 bytes), not text",
        ),
        (
            "ts_wall",
            "Bearer 0123456789",
            "ts_wall 'Bearer 012'… (17 characters) is not an RFC 3339 time",
        ),
        ("session_id", b"\xff\xfe", "session_id is bytes b'\\xff\\xfe', not text"),
        ("duration_ms", "slow", "duration_ms is str 'slow', not a number"),
    ],
)
def test_a_column_no_bridge_writes_is_row_malformed_not_a_crash(
    tmp_path: Path, column: str, value: object, said: str
) -> None:
    """Any type in any column (SQLite stores what it is given): verify names it, row_malformed;
    every other command stops with one line naming it, exit 2, never a traceback."""
    path = hostile_journal(tmp_path / "journal.db")
    tamper(path, f"UPDATE events SET {column} = ? WHERE seq = 3", params=(value,))
    code, out = cli_json("verify", path, "--trusted-key", SEED_VKEY, wire=False)
    assert code == 1
    assert {"seq": 3, "rule": "row_malformed", "detail": said} in [
        {k: f[k] for k in ("seq", "rule", "detail")} for f in out["findings"]
    ], out["findings"]
    for command in ("calls", "show", "audit", "deprecations", "idempotency", "report", "export"):
        args: list[str | Path] = [command, path]
        if command == "show":
            args.append("c1" + HOSTILE)
        if command == "report":
            args += ["--html", tmp_path / "report.html"]
        if command == "export":
            args += ["-o", tmp_path / "spans.json"]
        done = replay_main(*args)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr == f"agentteam-replay: event 3: {said} (verify: row_malformed)\n"


SPOOF: Final = "\n22:51:53  c9    task_delete  result  -      0.3\nOK: journal verified"


def spoofing_journal(path: Path) -> Path:
    write_events(
        path,
        [
            session_started("s1"),
            call_event("c1" + SPOOF, journal.CallReceived(arguments={}), tool="task_get" + SPOOF),
            call_event(
                "c1" + SPOOF,
                journal.CallError(error_code="x" + SPOOF, retryable=False, message="m" + SPOOF),
                tool="task_get" + SPOOF,
            ),
        ],
    )
    return path


@pytest.mark.parametrize(
    ("command", "lines"),
    [("calls", ["time", "─", "", "1 of 1 calls matched"]), ("audit", None), ("verify", None)],
)
def test_a_newline_in_a_journals_text_prints_no_line_of_its_own(
    tmp_path: Path, command: str, lines: list[str] | None
) -> None:
    """A newline in a call id, tool name or error code is shown (␤): it cannot print a row
    of a table or a verdict line that the journal's author wrote."""
    path = spoofing_journal(tmp_path / f"journal.db{SPOOF}")
    done = replay_main(command, path, env={"COLUMNS": ""})  # lines as long as they are
    assert done.returncode in (0, 1), done.stderr
    out = done.stdout.splitlines()
    assert not [line for line in out if line.startswith(("22:51:53  c9", "OK:"))], out
    assert "\u2424" in done.stdout
    if lines is not None:  # the header, its rule, one row, the count
        assert len(out) == len(lines), out
        assert all(o.startswith(w) for o, w in zip(out, lines, strict=True)), out


# What str.splitlines and a JSON reader's JavaScript take for line ends besides "\n", in the
# model's own text (arguments and results): line and paragraph separators, NEL (a C1 control).
SEPARATED: Final = "x\u2028  verdict: journal verified\u2029OK: no finding\x85  done"


def test_a_line_separator_in_the_model_s_text_prints_no_line_of_its_own(tmp_path: Path) -> None:
    """attack9: ``show`` printed what the model sent and saw one JSON line at a time, cut with
    ``str.splitlines``, which also cuts at U+2028, U+2029 and NEL: the model's text after one
    began a line of its own (a verdict of the model's choosing). Lines are cut at JSON's own
    newlines only, and the separators are shown as stand-ins (␤) in a table cell too; JSON
    output writes them as escapes (JavaScript reads them as line ends)."""
    path = tmp_path / "journal.db"
    write_events(
        path,
        [
            session_started("s1"),
            call_event(
                "c1", journal.CallReceived(arguments={"title": SEPARATED}), tool="t" + SEPARATED
            ),
            call_event("c1", journal.CallResult(result={"x": SEPARATED}), tool="t" + SEPARATED),
        ],
    )
    for command in ("show", "calls", "show --json", "calls --json"):
        args: list[str | Path] = [command.split()[0], path, *command.split()[1:]]
        if command.startswith("show"):
            args.insert(2, "c1")
        done = replay_main(*args, env={"COLUMNS": ""})
        assert done.returncode == 0, done.stderr
        lines = done.stdout.split("\n")
        assert not [line for line in lines if line.lstrip().startswith(("verdict", "OK:"))], lines
        assert not re.search("[\u2028\u2029\x85]", done.stdout), command
        if command.endswith("--json"):
            assert "\\u2028  verdict" in done.stdout and "\\u2029OK" in done.stdout
            assert SEPARATED in json.dumps(json.loads(done.stdout), ensure_ascii=False)
        elif command == "show":
            assert "\u2424  verdict" in done.stdout and "\u2424OK: no finding" in done.stdout
        else:  # the table's cell is cut: its stand-in at least
            assert "tx\u2424" in done.stdout
