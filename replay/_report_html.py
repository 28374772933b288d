"""The report as one self-contained HTML page: readable offline, printable, nothing fetched.

Invariants:

* every text from a journal (titles, arguments, error messages, ids) goes through
  :func:`html.escape`: a title holding ``<script>`` is shown, never run; text is UTF-8, so
  4-byte characters render as themselves; its control characters and bidirectional overrides
  are shown as stand-ins (:func:`replay._terminal.shown`), so a name cannot reorder what the
  reader sees (ids keep them in anchors, where they are not shown);
* the page loads nothing: a Content-Security-Policy ``default-src 'none'`` allows only its own
  inline style and its one inline script (by hash); charts are inline SVG
  (:mod:`replay._report_svg`), each beside a table holding the same numbers;
* every call id shown links to that call's story (``show``) inside the page when the page holds
  it, and says the command that shows it otherwise; tables are bounded, with "N more" and the
  command that lists them all;
* the page's size does not grow with what the model or a journal's writer chooses: a text from a
  journal is shown up to ``MAX_TEXT_CHARS`` characters (then how many more), the calls per tool
  chart names the ``MAX_SERIES`` busiest tools (the others summed in one series), a list of
  tools in a cell names ``MAX_LISTED`` of them; ids in links and anchors are kept whole;
* findings are rendered from their fields (rule, journal, seq, call, detail, and any other a
  newer check adds), so new kinds of finding need no change here.

The script checks, once the page has loaded, that every chart drew (a non-empty SVG path with a
non-empty box) and counts the resources fetched and the CSP violations, on the root element
(``data-charts``, ``data-charts-drawn``, ``data-resources``, ``data-csp-violations``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import msgspec

from agentteam_task_bridge import journal

from . import _report_svg as svg
from ._calls import CallDetail
from ._report import Report
from ._source import ReplayInputError
from ._terminal import shown

__all__ = ["render_html", "write_html"]

MAX_ROWS: Final = 200
MAX_JSON_CHARS: Final = 8_000
MAX_TEXT_CHARS: Final = 1_000  # a journal's text in a cell, a fact, a legend, a title
MAX_SERIES: Final = 20  # tools named in the calls per tool chart, the busiest first
MAX_LISTED: Final = 10  # tools named in one cell

_CHECK: Final = """\
(function () {
  var root = document.documentElement, violations = 0;
  document.addEventListener("securitypolicyviolation", function () {
    violations += 1;
    root.setAttribute("data-csp-violations", String(violations));
  });
  function check() {
    var charts = document.querySelectorAll("figure.chart svg"), drawn = 0;
    for (var i = 0; i < charts.length; i++) {
      var paths = charts[i].querySelectorAll("path");
      for (var j = 0; j < paths.length; j++) {
        var d = paths[j].getAttribute("d") || "", box = paths[j].getBBox();
        if (d.length > 0 && (box.width > 0 || box.height > 0)) { drawn += 1; break; }
      }
    }
    root.setAttribute("data-charts", String(charts.length));
    root.setAttribute("data-charts-drawn", String(drawn));
    root.setAttribute("data-resources", String(performance.getEntriesByType("resource").length));
    root.setAttribute("data-csp-violations", String(violations));
    root.setAttribute("data-check", "done");
  }
  if (document.readyState === "complete") { check(); } else { addEventListener("load", check); }
})();
"""
_SCRIPT_HASH: Final = base64.b64encode(hashlib.sha256(_CHECK.encode()).digest()).decode()
CSP: Final = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_SCRIPT_HASH}'; "
    "base-uri 'none'; form-action 'none'"
)

_STYLE: Final = """\
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;
margin:0 auto;max-width:1100px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0;font-size:12.5px}
th,td{border:1px solid #d5d5d5;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:6px;white-space:pre-wrap;
overflow-wrap:anywhere;max-height:none}
.verdict{font-size:20px;font-weight:600;padding:8px 12px;border-radius:6px;display:inline-block}
.ok{background:#e3f5e1;color:#17561b}.bad{background:#fde2e1;color:#8a1c13}
.doubt{background:#fff3cd;color:#6b4e00}
.pair{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure.chart{margin:0;flex:1 1 480px;min-width:320px}figure.chart svg{width:100%;height:auto}
svg text{font:10px system-ui,sans-serif;fill:#333}svg .grid{stroke:#e5e5e5}svg .unit{fill:#777}
.scroll{overflow:auto;max-height:420px;flex:1 1 300px}.wide{overflow-x:auto}
.scroll td:first-child{white-space:nowrap}
ul.legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:10px}
ul.legend span{display:inline-block;width:10px;height:10px;margin-right:4px}
.more{color:#555;font-style:italic}section.story{border-top:1px solid #ddd;margin-top:14px}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 14px}dt{color:#555}dd{margin:0}
@media print{.scroll,.wide{max-height:none;overflow:visible}figure.chart,table,section.story
{break-inside:avoid}a{color:inherit;text-decoration:none}body{max-width:none}}
"""


def write_html(result: Report, target: Path) -> int:
    """Write the page to ``target`` (0600, folders made 0700) and return its size in bytes."""
    data = render_html(result).encode("utf-8")
    try:
        fd = journal.open_private(target)
    except OSError as exc:
        raise ReplayInputError(f"cannot write {target}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return len(data)


def render_html(r: Report) -> str:
    page = _Page(r)
    body = "".join(
        [
            page.header(),
            page.verdict(),
            page.activity(),
            page.errors(),
            page.sessions(),
            page.deprecations(),
            page.idempotency(),
            page.truncation(),
            page.boards(),
            page.stories(),
        ]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>agentteam-replay report</title><style>{_STYLE}</style>"
        f"<script>{_CHECK}</script></head><body>{body}</body></html>\n"
    )


def _e(value: object) -> str:
    """A journal's text, escaped, shown up to ``MAX_TEXT_CHARS`` characters, its control and
    bidirectional characters as visible stand-ins (``shown``, as on a terminal)."""
    return escape(shown(_cut("" if value is None else str(value)), one_line=True))


def _cut(text: str) -> str:
    """The text up to ``MAX_TEXT_CHARS`` characters, then how many more."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]}… {len(text) - MAX_TEXT_CHARS} more characters"


def _listed(names: Sequence[str]) -> str:
    """Names, escaped, the first ``MAX_LISTED`` of them, then how many more."""
    more = len(names) - MAX_LISTED
    return ", ".join(_e(n) for n in names[:MAX_LISTED]) + (f", and {more} more" if more > 0 else "")


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    numeric: frozenset[int] | set[int] = frozenset(),
) -> str:
    """A table of cells already escaped (or built of escaped parts)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _legend(names: Sequence[str]) -> str:
    items = "".join(
        f'<li><span style="background:{svg.colour(k, n)}"></span>{_e(n)}</li>'
        for k, n in enumerate(names)
    )
    return f'<ul class="legend">{items}</ul>'


def _chart(drawing: str, legend: Sequence[str], table: str) -> str:
    caption = _legend(legend) if legend else ""
    return (
        f'<div class="pair"><figure class="chart">{drawing}<figcaption>{caption}</figcaption>'
        f'</figure><div class="scroll">{table}</div></div>'
    )


def _json(value: Any) -> str:
    text = msgspec.json.format(msgspec.json.encode(value), indent=2).decode("utf-8")
    if len(text) > MAX_JSON_CHARS:
        text = text[:MAX_JSON_CHARS] + f"\n… {len(text) - MAX_JSON_CHARS} more characters"
    return f"<pre>{escape(shown(text))}</pre>"


def _trust(v: Any) -> str:
    if getattr(v, "trusted_local_key_file", False):
        return "this machine's key file (no key held elsewhere was given)"
    return "the keys given" if v.trusted_keys else "none"


def _user(u: Any) -> str:
    who = " ".join(str(x) for x in (u.client_name, u.client_version, u.agent_id) if x)
    return f"{who or 'unknown'} ×{u.count}"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


class _Page:
    def __init__(self, r: Report) -> None:
        self.r = r
        self.known = {d.summary.call_id for d in r.stories}
        self.sources = " ".join(shlex.quote(s) for s in r.sources) or "JOURNAL"

    def call(self, call_id: str | None) -> str:
        """A call id: a link to its story in the page, or the command that shows it."""
        if not call_id:
            return ""
        if call_id in self.known:
            return f'<a href="#call-{quote(call_id, safe="")}"><code>{_e(call_id)}</code></a>'
        command = f"agentteam-replay show {self.sources} {shlex.quote(call_id)}"
        return f'<code title="{escape(command)}">{_e(call_id)}</code>'

    def more(self, hidden: int, command: str) -> str:
        if hidden <= 0:
            return ""
        return f'<p class="more">{hidden} more: <code>{escape(command)}</code></p>'

    def header(self) -> str:
        r = self.r
        where = f" · filter <code>{_e(r.filter)}</code>" if r.filter else ""
        return (
            f"<h1>Audit of agent tool use</h1><p>{_e(', '.join(r.sources))}{where}<br>"
            f"generated {_e(r.generated_at)} by <code>agentteam-replay report</code></p>"
        )

    def verdict(self) -> str:
        v = self.r.verify
        if not v.ok:
            broken = len(v.findings) + v.findings_omitted
            badge = f'<span class="verdict bad">FAILED: {broken} findings</span>'
        elif v.in_doubt:
            badge = f'<span class="verdict doubt">SOUND, {len(v.in_doubt)} calls in doubt</span>'
        else:
            badge = '<span class="verdict ok">VERIFIED: no rule broken</span>'
        j = v.journals
        facts = [
            ("journals", len(j)),
            ("events", v.events),
            ("calls", sum(x.calls for x in j)),
            ("calls in this report", self.r.audit.calls),
            ("sessions in this report", len(self.r.audit.sessions)),
            ("checkpoints checked", sum(x.checkpoints_checked for x in j)),
            ("signatures checked", sum(x.signatures_checked for x in j)),
            ("signatures unchecked (no trusted key)", sum(x.signatures_unchecked for x in j)),
            ("trusted keys", ", ".join(v.trusted_keys) or "none"),
            ("trust", _trust(v)),
            ("findings", len(v.findings) + v.findings_omitted),
            ("in-doubt calls", len(v.in_doubt)),
        ]
        dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(val)}</dd>" for k, val in facts)
        out = [f'<h2 id="verdict">Verification</h2>{badge}<dl class="facts">{dl}</dl>']
        out.append(self.findings("Findings", v.findings, v.findings_omitted, "verify"))
        if v.in_doubt:
            out.append("<h3>In-doubt calls (to reconcile)</h3>")
            out.append(self.structs(v.in_doubt))
        out.append("<h3>Journals</h3>" + self.structs(j))
        return "".join(out)

    def findings(self, title: str, found: Sequence[Any], omitted: int, command: str) -> str:
        if not found and not omitted:
            return f"<h3>{_e(title)}</h3><p>none</p>"
        by_rule: dict[str, int] = {}
        for f in found:
            by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
        summary = _table(
            ("rule", "findings"), [(_e(k), str(n)) for k, n in sorted(by_rule.items())], {1}
        )
        return f"<h3>{_e(title)}</h3>{summary}{self.structs(found[:MAX_ROWS])}" + self.more(
            len(found) - MAX_ROWS + omitted, f"agentteam-replay {command} {self.sources} --json"
        )

    def structs(self, items: Sequence[Any]) -> str:
        """Structs as a table of all their fields (new fields show up as new columns)."""
        if not items:
            return "<p>none</p>"
        rows = [msgspec.structs.asdict(i) for i in items]
        names: list[str] = list(dict.fromkeys(k for row in rows for k in row))
        cells = [[self.cell(k, row.get(k)) for k in names] for row in rows]
        return f'<div class="wide">{_table(names, cells)}</div>'

    def cell(self, name: str, value: Any) -> str:
        if name == "call_id" or name.endswith("_call"):
            return self.call(value)
        if isinstance(value, list | dict):
            return f"<code>{_e(msgspec.json.encode(value).decode())}</code>"
        return _e(value)

    def activity(self) -> str:
        r = self.r
        labels = [b.start[:19].replace("T", " ") for b in r.buckets]
        calls_of: dict[str, int] = {}
        for b in r.buckets:
            for t, n in b.by_tool.items():
                calls_of[t] = calls_of.get(t, 0) + n
        busiest = sorted(calls_of, key=lambda t: (-calls_of[t], t))[:MAX_SERIES]
        tools = sorted(busiest)
        others = len(calls_of) - len(tools)
        seen = {s for b in r.buckets for s in b.by_status}
        statuses = [s for s in svg.OUTCOMES if s in seen] + sorted(seen - set(svg.OUTCOMES))
        out = [
            f'<h2 id="activity">Calls over time</h2><p>buckets of {r.bucket_seconds} s (UTC)</p>'
        ]
        for title, names, field in (
            ("per tool", tools, "by_tool"),
            ("per outcome", statuses, "by_status"),
        ):
            counts = [
                [getattr(b, field).get(n, 0) for n in names] + [sum(getattr(b, field).values())]
                for b in r.buckets
            ]
            if field == "by_tool" and others:  # the tools not named, summed
                names = [*names, f"{others} other tools"]
                counts = [[*c[:-1], c[-1] - sum(c[:-1]), c[-1]] for c in counts]
            names = [_cut(n) for n in names]  # a table's head and a chart's titles, too
            series = [(n, [c[k] for c in counts]) for k, n in enumerate(names)]
            rows = [
                [_e(label), *(str(n) for n in c)] for label, c in zip(labels, counts, strict=True)
            ]
            table = _table(["from", *names, "total"], rows, set(range(1, len(names) + 2)))
            out.append(f"<h3>Calls {title}</h3>")
            out.append(_chart(svg.stacked(f"calls {title}", labels, series, "calls"), names, table))
        series_ms = [
            (name, [getattr(b.latency, f"{name}_ms") for b in r.buckets])
            for name in ("p50", "p90", "p99")
        ]
        rows = [
            [
                _e(label),
                str(b.latency.count),
                _ms(b.latency.p50_ms),
                _ms(b.latency.p90_ms),
                _ms(b.latency.p99_ms),
                _ms(b.latency.max_ms),
            ]
            for label, b in zip(labels, r.buckets, strict=True)
        ]
        table = _table(
            ("from", "calls", "p50 ms", "p90 ms", "p99 ms", "max ms"), rows, {1, 2, 3, 4, 5}
        )
        out.append("<h3>Latency percentiles over time (bridge, call received to outcome)</h3>")
        out.append(
            _chart(
                svg.lines("latency percentiles", labels, series_ms, "ms"),
                ["p50", "p90", "p99"],
                table,
            )
        )
        latency = [*r.audit.latency, *r.audit.latency_by_tool[:MAX_ROWS]]
        out.append("<h3>Latency overall and per tool</h3>")
        out.append(
            _table(
                ("name", "calls", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms"),
                [
                    [
                        _e(x.name),
                        str(x.count),
                        _ms(x.mean_ms),
                        _ms(x.p50_ms),
                        _ms(x.p90_ms),
                        _ms(x.p99_ms),
                        _ms(x.max_ms),
                    ]
                    for x in latency
                ],
                {1, 2, 3, 4, 5, 6},
            )
        )
        hidden = len(r.audit.latency_by_tool) - MAX_ROWS
        out.append(self.more(hidden, f"agentteam-replay audit {self.sources} --json"))
        return "".join(out)

    def errors(self) -> str:
        errs = self.r.errors
        out = ['<h2 id="errors">Error codes</h2>']
        if not errs:
            return out[0] + "<p>no call ended in an error</p>"
        shown = errs[:MAX_ROWS]
        table = _table(
            ("error code", "calls", "tools", "example call"),
            [
                [_e(e.error_code), str(e.calls), _listed(e.tools), self.call(e.example_call)]
                for e in shown
            ],
            {1},
        )
        drawing = svg.bars(
            "calls per error code", [(e.error_code, e.calls) for e in shown[:30]], "calls"
        )
        out.append(_chart(drawing, [], table))
        out.append(self.more(len(errs) - len(shown), f"agentteam-replay audit {self.sources}"))
        return "".join(out)

    def sessions(self) -> str:
        rows = self.r.audit.sessions
        out = ['<h2 id="sessions">Sessions</h2>']
        if not rows:
            return out[0] + "<p>none</p>"
        shown = rows[:MAX_ROWS]
        from ._story import parse_wall

        t0 = min(parse_wall(s.started_at) for s in shown)
        last = max(parse_wall(s.ended_at or s.last_call_at or s.started_at) for s in shown)
        causes = sorted({s.end_reason or "still open" for s in shown})
        spans = []
        for s in shown[:60]:
            start = (parse_wall(s.started_at) - t0).total_seconds()
            stop = (parse_wall(s.ended_at or s.last_call_at or s.started_at) - t0).total_seconds()
            spans.append((s.session_id, start, stop, causes.index(s.end_reason or "still open")))
        drawing = svg.spans("sessions", spans, str(t0)[:19], str(last)[:19])
        table = _table(
            (
                "session",
                "client",
                "agent",
                "start",
                "end",
                "cause of end",
                "calls",
                "errors",
                "mutations",
                "in doubt",
            ),
            [
                [
                    _e(s.session_id),
                    _e(s.client),
                    _e(s.agent_id),
                    _e(s.started_at),
                    _e(s.ended_at),
                    _e(s.end_reason or "still open"),
                    str(s.calls),
                    str(s.errors),
                    str(s.mutations),
                    str(s.in_doubt),
                ]
                for s in shown
            ],
            {6, 7, 8, 9},
        )
        out.append(_chart(drawing, causes, table))
        out.append(
            self.more(len(rows) - len(shown), f"agentteam-replay audit {self.sources} --json")
        )
        return "".join(out)

    def deprecations(self) -> str:
        d = self.r.deprecations
        out = [
            f'<h2 id="deprecations">Deprecated usage</h2><p>{d.uses} uses; removal gate: '
            f"no use for {d.gate_days} days, judged at {_e(d.as_of)}</p>"
        ]
        if not d.names:
            return out[0] + "<p>no deprecated name used</p>"
        shown = d.names[:MAX_ROWS]
        out.append(
            _table(
                ("name", "kind", "replacement", "uses", "last used", "users", "removal gate"),
                [
                    [
                        _e(n.old_name),
                        _e(n.use_kind),
                        _e(n.replacement),
                        str(n.count),
                        _e(n.last_seen),
                        _e("; ".join(_user(u) for u in n.users[:5])),
                        _e(n.gate.text),
                    ]
                    for n in shown
                ],
                {3},
            )
        )
        out.append(
            self.more(len(d.names) - len(shown), f"agentteam-replay deprecations {self.sources}")
        )
        return "".join(out)

    def idempotency(self) -> str:
        i = self.r.idempotency
        out = ['<h2 id="idempotency">Idempotency</h2>']
        out.append(
            f"<p>{i.keyed_calls} keyed calls, {i.claim_calls} claim calls "
            f"({i.claim_repeats} repeats)</p>"
        )
        out.append(self.findings("Idempotency findings", i.findings, 0, "idempotency"))
        out.append("<h3>Idempotent hints against observed repeats</h3>")
        out.append(self.structs(i.hints))
        out.append("<h3>Keyed creates</h3>" + self.structs(i.groups[:MAX_ROWS]))
        out.append(
            self.more(len(i.groups) - MAX_ROWS, f"agentteam-replay idempotency {self.sources}")
        )
        return "".join(out)

    def truncation(self) -> str:
        a = self.r.audit
        return (
            f'<h2 id="truncation">Truncation</h2>'
            f"<p>{a.truncation_rate:.1%} of results truncated</p>"
            + _table(
                ("tool", "results", "truncated", "rate"),
                [
                    [_e(t.tool), str(t.results), str(t.truncated), f"{t.rate:.1%}"]
                    for t in a.truncation[:MAX_ROWS]
                ],
                {1, 2, 3},
            )
            + self.more(len(a.truncation) - MAX_ROWS, f"agentteam-replay audit {self.sources}")
        )

    def boards(self) -> str:
        rows = self.r.audit.mutations_by_board
        out = ['<h2 id="boards">Mutations per board</h2>']
        if not rows:
            return out[0] + "<p>no mutation</p>"
        totals: dict[str, int] = {}
        for m in rows:
            board = f"{m.workspace_id}/{m.channel}"
            totals[board] = totals.get(board, 0) + m.mutations
        table = _table(
            ("workspace", "channel", "tool", "mutations"),
            [
                [_e(m.workspace_id), _e(m.channel), _e(m.tool), str(m.mutations)]
                for m in rows[:MAX_ROWS]
            ],
            {3},
        )
        drawing = svg.bars(
            "mutations per board", sorted(totals.items(), key=lambda kv: -kv[1])[:30], "mutations"
        )
        out.append(_chart(drawing, [], table))
        out.append(self.more(len(rows) - MAX_ROWS, f"agentteam-replay audit {self.sources}"))
        return "".join(out)

    def stories(self) -> str:
        r = self.r
        out = [
            f'<h2 id="stories">Call stories</h2><p>the first {r.stories_first} calls in journal '
            "order, and every call named above</p>"
        ]
        out.extend(self.story(d) for d in r.stories)
        out.append(
            self.more(r.stories_more, f"agentteam-replay calls {self.sources} {r.filter}".rstrip())
        )
        return "".join(out)

    def story(self, d: CallDetail) -> str:
        s = d.summary
        facts = [
            (
                "tool",
                s.tool if s.tool == s.requested_tool else f"{s.tool} (asked as {s.requested_tool})",
            ),
            (
                "outcome",
                s.status
                + (f" ({s.error_code})" if s.error_code else "")
                + (f", in doubt: {s.in_doubt}" if s.in_doubt else ""),
            ),
            ("session", s.session_id),
            ("journal:seq", f"{s.journal_id}:{s.first_seq}-{s.last_seq}"),
            ("started", s.started_at),
            ("bridge ms", _ms(s.bridge_ms)),
            (
                "upstream",
                f"{s.upstream_requests} requests, {_ms(s.upstream_ms)} ms, "
                f"last status {s.http_status}",
            ),
            ("agent / workspace", f"{s.agent_id} / {s.workspace_id}"),
        ]
        dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
        parts = [("arguments", d.arguments), ("injected context", d.injected)]
        parts += (
            [("upstream", [msgspec.to_builtins(x) for x in d.exchanges])] if d.exchanges else []
        )
        parts += [("deprecated", d.deprecated)] if d.deprecated else []
        parts += [("token refreshes", d.token_refreshes)] if d.token_refreshes else []
        parts += [
            (f"outcome ({d.outcome_kind})", d.outcome),
            ("events", [[e.seq, e.kind, e.offset_ms] for e in d.events]),
        ]
        body = "".join(f"<h4>{_e(name)}</h4>{_json(value)}" for name, value in parts)
        return (
            f'<section class="story" id="call-{escape(s.call_id)}">'
            f"<h3>Call <code>{_e(s.call_id)}</code></h3>"
            f'<dl class="facts">{dl}</dl>{body}</section>'
        )
