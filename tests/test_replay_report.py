"""`agentteam-replay report --html`: one self-contained page, escaped, owner-only, in a browser.

The page is rendered by headless Chromium (Debian's `chromium`; .ci/run installs it): its own
check script reports on the root element whether every chart drew, how many resources were
fetched and how many Content-Security-Policy violations happened; a local HTTP server counts
what would have been fetched.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import pytest

from agentteam_task_bridge import journal, replay

from .replay_helpers import (
    SEED_VKEY,
    call_event,
    injected,
    replay_main,
    route,
    session_started,
    tamper,
    write_events,
)

HOSTILE = "<script>document.documentElement.setAttribute('data-pwned','1')</script>"
WIDE = "crab 🦀 clef 𝄞"  # 4-byte UTF-8 characters
LEAK = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token a model pasted


def _call(
    session: str, call: str, tool: str, outcome: journal.Payload, arguments: dict[str, Any]
) -> list[journal.Event]:
    method = "POST" if tool != "task_get" else "GET"
    suffix = "" if method == "POST" else "/get"
    agent = "agt_2" if session == "s2" else "agt_1"
    return [
        call_event(call, journal.CallReceived(arguments=arguments), tool=tool, session=session),
        call_event(call, injected(agent=agent), tool=tool, session=session),
        call_event(
            call,
            journal.UpstreamRequest(
                method=method, route=route(suffix, agent=agent), body=arguments
            ),
            tool=tool,
            session=session,
        ),
        call_event(
            call,
            journal.UpstreamResponse(status=200, body={}, duration_ms=12.5),
            tool=tool,
            session=session,
        ),
        call_event(call, outcome, tool=tool, session=session),
    ]


def _multi_session_journal(path: Path) -> None:
    """Three sessions of two clients: results, errors, a deprecated name, a hostile title."""
    events = [
        session_started("s1", client_name="cursor"),
        session_started("s2", client_name="claude-code", agent_id="agt_2"),
    ]
    done = journal.CallResult(result={"data": {"task": {"title": HOSTILE}}, "meta": {}})
    failed = journal.CallError(error_code="task_not_found", retryable=False, message=WIDE)
    for i in range(6):
        session = "s1" if i % 2 else "s2"
        title = HOSTILE if i == 0 else f"{WIDE} {i}"
        args = {"channel": "general", "tasks": [{"title": title, "description": f"use {LEAK}"}]}
        events += _call(session, f"c{i}", "task_create", done, args)
        events += _call(session, f"g{i}", "task_get", failed, {"channel": "general", "number": i})
    events.append(
        call_event(
            "d1",
            journal.CallReceived(arguments={"channel": "eng"}),
            tool="list_tasks",
            session="s1",
        )
    )
    events.append(
        call_event(
            "d1",
            journal.DeprecatedUsage(use_kind="tool_name", old_name="list_tasks"),
            tool="list_tasks",
            session="s1",
        )
    )
    events.append(
        call_event(
            "d1",
            journal.CallRejected(error_code="deprecated_tool", message="renamed to task_list"),
            tool="list_tasks",
            session="s1",
        )
    )
    events.append(journal.Event(session_id="s1", payload=journal.SessionEnded(reason="eof")))
    events.append(session_started("s3", client_name="zed"))
    events += _call("s3", "z1", "task_create", done, {"channel": "ops", "tasks": [{"title": "x"}]})
    write_events(path, events)


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("multi") / "journal.db"
    _multi_session_journal(path)
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The journal `agentteam-bridge demo --journal` writes (the bridge as a subprocess)."""
    path = tmp_path_factory.mktemp("demo") / "journal.db"
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.cli", "demo", "--journal", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return path


def _report(journal_path: Path, html: Path, *extra: str) -> str:
    """`report --html`, trusting the hand-written journals' key (the demo's is this machine's,
    trusted with no flag)."""
    trust = ("--trusted-key", SEED_VKEY) if journal_path.parent.name.startswith("multi") else ()
    done = replay_main("report", journal_path, "--html", html, *trust, *extra)
    assert done.returncode in (0, 3), done.stderr
    return html.read_text(encoding="utf-8")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "a" and found.get("href"):
            self.hrefs.append(str(found["href"]))
        for name in ("src", "href"):  # nothing outside the page
            value = found.get(name) or ""
            assert not value or value.startswith("#"), (tag, name, value)
        self.scripts += tag == "script"


def test_the_page_escapes_model_text_links_every_call_and_is_owner_only(
    multi: Path, tmp_path: Path
) -> None:
    os.umask(0o022)
    html = tmp_path / "new" / "report.html"
    page = _report(multi, html)
    assert stat.S_IMODE(html.stat().st_mode) == 0o600
    assert stat.S_IMODE(html.parent.stat().st_mode) == 0o700
    assert HOSTILE not in page and "&lt;script&gt;document.documentElement" in page
    assert WIDE in page
    links = _Links()
    links.feed(page)
    assert links.scripts == 1  # the page's own check, nothing the model wrote
    assert links.hrefs and all(h[1:] in links.ids for h in links.hrefs)
    # every error example and the session of every client is on the page
    for text in ("task_not_found", "deprecated_tool", "list_tasks", "cursor", "claude-code"):
        assert text in page
    # redaction holds: the journal holds no credential, so neither does the page
    assert LEAK not in page and "[REDACTED:sha256:" in page
    assert "VERIFIED" in page


def test_findings_and_in_doubt_calls_show_first_with_their_seqs_and_stories(
    tmp_path: Path,
) -> None:
    path = tmp_path / "broken.db"
    done = journal.CallResult(result={"data": {}, "meta": {}})
    events = [session_started("s1", agent_id="agt_2")]  # its calls inject agt_1: a mismatch
    events += _call("s1", "m1", "task_create", done, {"channel": "general", "tasks": []})
    sent = _call("s1", "lost", "task_create", done, {"channel": "general", "tasks": []})
    events += sent[:3]  # sent upstream, and the journal ends: in doubt
    write_events(path, events)
    html = tmp_path / "broken.html"
    done_cli = replay_main("report", path, "--html", html, "--trusted-key", SEED_VKEY)
    assert done_cli.returncode == 1, done_cli.stderr
    page = html.read_text(encoding="utf-8")
    verdict = page.index("FAILED")
    assert verdict < page.index('id="activity"')  # the verdict comes first
    assert "context_mismatch" in page and "no_outcome" in page
    for call in ("m1", "lost"):
        assert f'href="#call-{call}"' in page and f'id="call-{call}"' in page
    found = replay.report([path], trusted=[replay._verify.load_trusted_key(SEED_VKEY)])
    for f in found.verify.findings:  # each finding with its seq, as verify reports it
        assert f"<td>{f.seq}</td><td>{f.rule}</td>" in page


def test_filters_select_the_calls_and_the_stories_are_bounded(multi: Path, tmp_path: Path) -> None:
    where = replay.ReportFilter(session="s3")
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    only = replay.report([multi], where, trusted=trusted, stories=0)
    assert only.audit.calls == 1 and [s.session_id for s in only.audit.sessions] == ["s3"]
    whole = replay.report([multi], trusted=trusted, stories=3)
    assert whole.audit.calls == 14 and whole.stories_first == 3 and whole.stories_more == 11
    named = {e.example_call for e in whole.errors}
    held = {d.summary.call_id for d in whole.stories}
    assert named <= held and {"c0", "g0", "c1"} <= held
    page = _report(multi, tmp_path / "r.html", "--stories", "3", "--journal", "nope")
    assert "calls in this report</dt><dd>0" in page
    counted = sum(sum(b.by_tool.values()) for b in whole.buckets)
    assert counted == whole.audit.calls


def _rejected(call: str, tool: str, code: str, session: str = "s1") -> list[journal.Event]:
    """A call the bridge refused (an unknown tool, say): its name and code as sent."""
    received = journal.CallReceived(arguments={"channel": "general"})
    rejected = journal.CallRejected(error_code=code, message="no such tool")
    return [
        call_event(call, received, tool=tool, session=session),
        call_event(call, rejected, tool=tool, session=session),
    ]


@pytest.mark.parametrize("hostile", ["tools", "texts"])
def test_the_page_stays_small_whatever_the_model_or_the_journal_names(
    tmp_path: Path, hostile: str
) -> None:
    """The model names its tools (each unknown name is journaled, 128 characters); a journal's
    writer names clients, agents, tools and error codes at any length: the page stays under
    2 MB, naming the busiest tools and how many others, and a long text's start and length."""
    events = [session_started("s1")]
    if hostile == "tools":  # 4,000 distinct names, the first the busiest
        events += _rejected("busy-0", "busiest", "unknown_tool")
        events += _rejected("busy-1", "busiest", "unknown_tool")
        for i in range(4_000):
            events += _rejected(f"c{i}", f"tool_{i:05d}_" + "x" * 118, "unknown_tool")
    else:  # 1 MB each, and 1 MB more in each call's arguments
        big = "\U0001f980" * (1 << 18)
        events = [session_started("s1", client_name=big, agent_id=big, workspace_id=big)]
        for i in range(3):
            events += _rejected(f"c{i}", f"tool{i}{big}", f"code{i}{big}")
    path = tmp_path / "multi-sizes" / "journal.db"
    path.parent.mkdir()
    write_events(path, events)
    html = tmp_path / "sizes.html"
    page = _report(path, html)
    assert html.stat().st_size < 2_000_000
    links = _Links()
    links.feed(page)
    assert links.hrefs and all(h[1:] in links.ids for h in links.hrefs)
    if hostile == "tools":
        assert "busiest" in page and "3981 other tools" in page and "and 3991 more" in page
    else:
        big = "\U0001f980" * (1 << 18)
        assert f"<td>{big[:1000]}… {len(big) - 1000} more characters</td>" in page


# The bidirectional embeddings, overrides and isolates: text that reorders what a reader sees.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def test_names_that_reorder_or_break_the_page_are_shown_not_obeyed(tmp_path: Path) -> None:
    """Tool names, error codes, clients, sessions and call ids holding markup breakers, quotes,
    `#`, spaces, bidirectional overrides and control characters: escaped, the overrides and
    controls shown as stand-ins wherever the page shows text (in SVG labels too), and every
    call id's link still finds its story."""
    rlo = "\u202e"
    session = f"s{rlo}live\u2066"
    tool = f"t{rlo}</script></style>]]>\x1b[2J"
    events = [session_started(session, client_name=f"cli{rlo}\x07</title>")]
    for call in (f"c{rlo}1", 'c"2 #x', "c 3", "c\u20284", "c%41", "c" * 1024):
        events += _rejected(call, tool, f"e{rlo}<svg onload=alert(1)>", session=session)
    path = tmp_path / "multi-bidi" / "journal.db"
    path.parent.mkdir()
    write_events(path, events)
    page = _report(path, tmp_path / "bidi.html", "--stories", "100")
    links = _Links()
    links.feed(page)
    assert links.scripts == 1 and "<svg onload" not in page and "\x1b" not in page
    assert links.hrefs and all(unquote(h[1:]) in links.ids for h in links.hrefs)
    shown_text = re.sub(r' id="[^"]*"', "", page)  # ids are anchors, never shown
    assert not _BIDI.search(shown_text), _BIDI.search(shown_text)
    assert "t\ufffd&lt;/script&gt;&lt;/style&gt;]]&gt;\u241b[2J" in page


def _verify_in(pids: Path) -> Any:
    """replay.verify, noting the id of the process it runs in."""
    real = replay._verify.verify

    def noted(*args: Any, **kwargs: Any) -> Any:
        with pids.open("a") as file:
            file.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    return noted


def test_the_verdict_is_reached_in_a_second_process_beside_the_calls(
    multi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal is verified in a forked process while this one reads the calls (the report
    takes about as long as the longer of the two); the verdict is verify's, whole."""
    pids = tmp_path / "pids"
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    monkeypatch.setattr("agentteam_task_bridge.replay._report.verify", _verify_in(pids))
    reported = replay.report([multi], trusted=trusted)
    assert [int(p) for p in pids.read_text().split()] != [os.getpid()]
    assert len(pids.read_text().split()) == 1
    assert reported.verify == replay.verify([multi], trusted=trusted)
    with pytest.raises(replay.ReplayInputError, match="no journal at"):
        replay.report([tmp_path / "absent.db"])


def test_a_verification_process_that_dies_is_replaced_by_verifying_here(
    multi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    here = os.getpid()
    real = replay._verify.verify

    def dies_elsewhere(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() != here:
            os._exit(3)  # killed, out of memory, ...: nothing sent back
        return real(*args, **kwargs)

    monkeypatch.setattr("agentteam_task_bridge.replay._report.verify", dies_elsewhere)
    reported = replay.report([multi], trusted=trusted)
    assert reported.verify == real([multi], trusted=trusted) and reported.audit.calls == 14


@pytest.mark.parametrize("kind", ["upstream_response", "call_result", "call_error", "none"])
@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"status": true, "result": 3, "error_code": 5, "duration_ms": "1"}']
)
def test_the_verdict_finds_a_payload_no_check_reads_that_does_not_decode(
    multi: Path, tmp_path: Path, kind: str, text: str
) -> None:
    """The second process leaves the payloads no check reads (a response's, a result's)
    undecoded; this one decodes every payload, and where one does not decode the journal is
    verified again here: the verdict is always verify's, payload_invalid included."""
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    path = tmp_path / "journal.db"
    shutil.copyfile(multi, path)
    if kind != "none":
        tamper(
            path,
            "UPDATE events SET payload = ? WHERE seq = (SELECT max(seq) FROM events"
            " WHERE kind = ? AND call_id IS NOT NULL)",
            params=(text, kind),
        )
    reported = replay.report([path], trusted=trusted)
    verified = replay.verify([path], trusted=trusted)
    assert reported.verify == verified
    invalid = [f for f in verified.findings if f.rule == "payload_invalid"]
    assert len(invalid) == (kind != "none")


@pytest.mark.parametrize(
    "edit",
    [
        'payload = replace(payload, \'"status":\', \'"note":"ATK_0123456789ab","status":\')'
        " WHERE seq = (SELECT max(seq) FROM events WHERE kind = 'upstream_response')",
        'payload = \'{"x":"bearer  abcdefghijkl",\' || substr(payload, 2)'
        " WHERE seq = (SELECT max(seq) FROM events WHERE kind = 'call_result')",
        "gen_ai_tool_name = 'Bearer abcdefghijkl' WHERE seq = 5",
        "jsonrpc_request_id = 'eyJhbGciOi.eyJzdWIiOi.' WHERE seq = 6",
        "call_id = 'task_atk_0123456789' WHERE seq = 7",
        "session_id = session_id WHERE seq = 1",  # nothing: the verdict is the process's
    ],
)
def test_the_verdict_finds_a_secret_in_any_text_of_any_row(
    multi: Path, tmp_path: Path, edit: str
) -> None:
    """The second process screens no row for secrets; this one screens every row of every file
    as verify does, and where one holds a secret's shape the journal is verified again here:
    the verdict is always verify's, secret_in_payload included."""
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    path = tmp_path / "journal.db"
    shutil.copyfile(multi, path)
    tamper(path, f"UPDATE events SET {edit}")
    reported = replay.report([path], trusted=trusted)
    verified = replay.verify([path], trusted=trusted)
    assert reported.verify == verified
    secrets = [f for f in verified.findings if f.rule == "secret_in_payload"]
    assert len(secrets) == (not edit.startswith("session_id"))
    assert not any(f.rule == "payload_invalid" for f in verified.findings)


@pytest.mark.parametrize(
    "column, value",
    [
        ("http_response_status_code", 200.5),  # taken as it is, the pass would not fail
        ("duration_ms", "5 ms"),  # the column's affinity keeps a number-like text a number
        ("ts_wall", "yesterday"),
        ("ts_mono_ns", "12 ns"),
        ("call_id", b"c1"),
        ("kind", b"upstream_response"),
    ],
)
def test_a_row_no_bridge_writes_fails_the_report_as_it_fails_the_audit(
    multi: Path, tmp_path: Path, column: str, value: object
) -> None:
    """The pass takes each row as it is while verify, beside it, checks every row: where verify
    finds one no bridge writes, the pass runs again checking each, so the report fails on it
    as `audit` does, whatever the row would have done to the pass."""
    path = tmp_path / "journal.db"
    shutil.copyfile(multi, path)
    tamper(
        path,
        f"UPDATE events SET {column} = ? WHERE seq = (SELECT max(seq) FROM events"
        " WHERE kind = 'upstream_response')",
        params=(value,),
    )
    with pytest.raises(journal.JournalFormatError) as audited:
        replay.audit([path])
    with pytest.raises(journal.JournalFormatError) as reported:
        replay.report([path], accept_unverified=True)
    assert str(reported.value) == str(audited.value)
    assert "row_malformed" in str(reported.value)


def test_a_journal_written_between_the_two_reads_is_verified_whole_again(
    multi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verifying process left payloads undecoded and rows unscreened that the pass here
    decodes and screens: the pass must have read the rows it verified. An event written after
    the process read the journal and before this pass did: verify runs again here, whole."""
    trusted = [replay._verify.load_trusted_key(SEED_VKEY)]
    path = tmp_path / "journal.db"
    shutil.copyfile(multi, path)
    here, verified = os.getpid(), tmp_path / "verified"
    real_verify, real_records = replay._verify.verify, replay._source.Journals.records

    def verify_then_say(*args: Any, **kwargs: Any) -> Any:
        result = real_verify(*args, **kwargs)
        if os.getpid() != here:
            verified.touch()
        return result

    def write_then_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 60
        while not verified.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert verified.exists()
        write_events(path, [call_event("late", journal.CallReceived(arguments={"q": "late"}))])
        return real_records(self, *args, **kwargs)

    monkeypatch.setattr("agentteam_task_bridge.replay._report.verify", verify_then_say)
    monkeypatch.setattr("agentteam_task_bridge.replay._source.Journals.records", write_then_read)
    reported = replay.report([path], trusted=trusted)
    now = replay.verify([path], trusted=trusted)
    assert reported.verify == now and reported.verify.events == replay.verify([multi]).events + 1


def test_calls_over_a_long_span_fold_into_bounded_buckets() -> None:
    from agentteam_task_bridge.replay._report import MAX_BUCKETS, _Timeline

    line = _Timeline()
    for day in range(1, 29):
        for hour in (0, 13, 23):
            line.add(f"2026-02-{day:02d}T{hour:02d}:00:00.000000Z", "task_get", "result", 5.0)
    buckets = line.buckets()
    assert len(buckets) <= MAX_BUCKETS and sum(sum(b.by_tool.values()) for b in buckets) == 84
    assert sum(b.latency.count for b in buckets) == 84


# --- in a browser ----------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return found


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "image/png")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counter() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that records every request it gets."""
    hits: ClassVar[list[str]] = []
    handler = type("Handler", (_Counter,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _browse(page: Path, tmp_path: Path, *flags: str) -> str:
    done = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            *flags,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _root(dom: str) -> dict[str, str]:
    tag = re.search(r"<html[^>]*>", dom)
    assert tag is not None
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag.group(0)))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["demo", "multi"])
def test_the_page_draws_in_chromium_and_fetches_nothing(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, counter: tuple[str, list[str]]
) -> None:
    source: Path = request.getfixturevalue(which)
    html = tmp_path / "report.html"
    _report(source, html)
    dom = _browse(html, tmp_path, "--dump-dom")
    root = _root(dom)
    assert root.get("data-check") == "done", dom[:500]
    assert int(root["data-charts"]) >= 5 and root["data-charts-drawn"] == root["data-charts"]
    assert root["data-resources"] == "0" and root["data-csp-violations"] == "0"
    assert "data-pwned" not in root  # the title's script was shown, not run
    if which == "multi":
        assert "&lt;script&gt;document.documentElement" in dom and WIDE in dom
    shot = tmp_path / "shot.png"
    _browse(html, tmp_path, f"--screenshot={shot}", "--window-size=1200,1600")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    # The same page with an image, a style sheet and a script from the network added: the
    # policy refuses them, the check counts the refusals, and the server sees no request.
    url, hits = counter
    added = (
        f'<img src="{url}/pixel.png" alt=""><link rel="stylesheet" href="{url}/s.css">'
        f"<script>document.documentElement.setAttribute('data-pwned','1')</script>"
    )
    hostile = tmp_path / "hostile.html"
    hostile.write_text(html.read_text(encoding="utf-8").replace("<body>", "<body>" + added, 1))
    dom = _browse(hostile, tmp_path, "--dump-dom")
    root = _root(dom)
    assert root.get("data-check") == "done" and int(root["data-csp-violations"]) >= 2
    assert "data-pwned" not in root and hits == []
