"""Human rendering of every replay result with rich: tables that fit the terminal, colour on a TTY.

Rendering only: every function takes a result of :mod:`replay` and a console, and prints. The
``calls`` table, printed as its stream is read, is :mod:`replay._calls_table`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agentteam_task_bridge import journal

from ._audit import AuditReport
from ._calls import CallDetail
from ._deprecations import DeprecationReport
from ._erase import EraseReport
from ._export import ExportResult
from ._findings import Finding
from ._idempotency import IdempotencyResult
from ._key import KeyInfo
from ._prune import PruneReport
from ._rerun import RerunResult
from ._terminal import json_shown, shown
from ._verify import VerifyResult

__all__ = [
    "render_audit",
    "render_deprecations",
    "render_export",
    "render_idempotency",
    "render_key",
    "render_rerun",
    "render_show",
    "render_verify",
    "to_json",
    "write_audit_csv",
]

_STATUS_STYLE: Final = {
    "result": "green",
    "error": "red",
    "rejected": "yellow",
    "cancelled": "magenta",
    "in_doubt": "bold red",
    "incomplete": "dim",
}
_encode = msgspec.json.Encoder().encode


# verify's text for a v2 journal's leaf store (JournalReport.leaf_store).
_LEAF_STORES: Final = {
    "events": "the events row",
    "event_leaves": "event_leaves (files made before schema 10)",
    "mixed": "event_leaves in older files, the events row in newer ones",
}


def to_json(result: Any) -> str:
    """The result as JSON, with ``ok`` first when the result has a verdict."""
    data = msgspec.to_builtins(result)
    if hasattr(result, "ok") and isinstance(data, dict):
        data = {"ok": bool(result.ok), **data}
    return json_shown(_encode(data).decode())


def _table(*columns: str, title: str | None = None) -> Table:
    """A borderless table; a column given as ``"name:12"`` is at most 12 wide, cut with an
    ellipsis, and ``"name:>7"`` is also right-aligned (numbers)."""
    table = Table(
        title=None if title is None else Text(title),
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        header_style="bold",
    )
    for column in columns:
        name, _, width = column.partition(":")
        right = width.startswith(">")
        size = int(width.lstrip(">")) if width.lstrip(">") else None
        table.add_column(
            name,
            justify="right" if right else "left",
            max_width=size,
            no_wrap=size is not None,
            overflow="ellipsis" if size is not None else "fold",
        )
    return table


def _esc(value: Any) -> str:
    """A journal's value inside a markup line: one line, its markup shown, not applied."""
    return escape(shown(str(value), one_line=True))


def _short(text: str | None, width: int = 14) -> str:
    if text is None:
        return "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value / 1000:.2f}s"


def _time(ts: str | None) -> str:
    return "-" if not ts else ts[11:23]


def _whole(console: Console, value: Any, indent: str = "  ") -> None:
    """A JSON value in full, one member a line (what the model saw is never cut): cut at the
    JSON's own newlines, not at a line separator in a string (``str.splitlines`` would)."""
    for line in json.dumps(value, indent=2, ensure_ascii=False).split("\n"):
        console.print(Text(indent + line), soft_wrap=True)


def _findings(console: Console, findings: Sequence[Finding], omitted: int = 0) -> None:
    if not findings:
        return
    table = _table("where:13", "rule:27", "detail", title=f"Findings ({len(findings)})")
    table.columns[1].style = "red"
    for f in findings:
        detail = f"{f.call_id}: {f.detail}" if f.call_id else f.detail
        table.add_row(f.where, f.rule, detail)
    console.print(table)
    if omitted:
        console.print(f"… and {omitted} more findings not listed")


# --- verify -------------------------------------------------------------------------------


def render_prune(console: Console, report: PruneReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    console.print(f"store: {report.store}; segments older than {report.older_than_days:g} days")
    for j in report.journals:
        files = ", ".join(s.file for s in j.removed) or "nothing"
        console.print(
            f"[bold]{_esc(j.journal)}[/] ({_esc(j.journal_id)}): {verb} {_esc(files)}",
            markup=True,
        )
        witnessed = "nothing" if j.witnessed_seq is None else f"seq {j.witnessed_seq}"
        console.print(
            f"  store holds 1..{j.held_seq}, witnessed {witnessed}; {j.kept} files kept "
            f"({j.stopped})"
        )


def render_erase(console: Console, report: EraseReport) -> None:
    verb = "would erase" if report.dry_run else "erased"
    for j in report.journals:
        seqs = _seq_ranges(j.seqs) or "nothing"
        console.print(
            f"[bold]{_esc(j.journal)}[/] ({_esc(j.journal_id)}): {verb} {seqs}",
            markup=True,
        )
        if j.event_seq is not None:
            scrub = "scrubbed" if j.scrubbed else "[red]WAL not yet scrubbed: run erase again[/]"
            console.print(f"  payload_erased at seq {j.event_seq}, signed; {scrub}", markup=True)
    done = "would be erased" if report.dry_run else "erased"
    console.print(f"{report.erased} events {done} ({report.selector}); reason: {report.reason}")


def _seq_ranges(seqs: list[int]) -> str:
    out: list[str] = []
    for seq in seqs:
        if out and out[-1].split("..")[-1] == str(seq - 1):
            out[-1] = f"{out[-1].split('..')[0]}..{seq}"
        else:
            out.append(str(seq))
    return ", ".join(out)


def render_key(console: Console, info: KeyInfo) -> None:
    # One line each, never wrapped: the key is copied from here.
    console.print(f"public key:  {info.vkey}", soft_wrap=True)
    console.print(f"fingerprint: {info.fingerprint}", soft_wrap=True)
    console.print(f"private key: {info.path}", style="dim", soft_wrap=True)


def render_verify(console: Console, result: VerifyResult) -> None:
    for j in result.journals:
        console.print(f"[bold]{_esc(j.path)}[/]", markup=True)
        console.print(
            f"  journal {j.journal_id}: {j.events} events, {j.calls} calls, head seq {j.head_seq}"
        )
        if j.held_checkpoint is None:
            held = "none (a tail cut back below the last stored checkpoint cannot be detected)"
        else:
            held = f"{j.held_checkpoint}, seq {j.held_checkpoint_seq}"
            if j.held_checkpoint_beside:
                held += " (beside the journal: no witness)"
        log = (
            "v2: Merkle log (RFC 6962), proofs"
            if j.log_version == 2
            else "v1: chain only, no proofs"
        )
        where = _LEAF_STORES.get(j.leaf_store or "")
        if j.log_version == 2 and where is not None:
            log += f"; leaves in {where}"
        console.print(f"  log: {log}")
        console.print(f"  held checkpoint: {held}")
        signatures = f"{j.signatures_checked} signatures verified"
        if j.signatures_unchecked:
            signatures += f", {j.signatures_unchecked} accepted unverified"
        console.print(
            f"  {j.checkpoints_checked} checkpoints, {signatures};"
            f" signed up to seq {j.last_checkpoint_seq}"
        )
        if j.unsigned_tail:
            live = " (a live session: its writer holds the file)" if j.live else ""
            console.print(
                f"  unsigned tail: {j.unsigned_tail} events after seq {j.signed_through}"
                f" are covered by no checkpoint yet{live}"
            )
        if j.erasures_pending:
            seqs = ", ".join(str(s) for s in j.erasures_pending)
            console.print(
                f"  erasures pending in the store: payload_erased at seq {seqs} waits for a"
                " witness cosignature over it (the store still holds those payloads)"
            )
        if j.erasures_held:
            seqs = ", ".join(str(s) for s in j.erasures_held)
            console.print(
                f"  erasures held in the store: payload_erased at seq {seqs} (a key rotated since"
                " the store registered the journal: its owner erases them with erase --from)"
            )
        named = ", ".join("+".join(vkey.split("+", 2)[:2]) for vkey in j.recorded_keys)
        console.print(f"  signing keys named by the journal: {named or 'none (HMAC era)'}")
    trusted = ", ".join(result.trusted_keys) or "none (signatures cannot be checked)"
    console.print(f"trusted keys: {trusted}")
    _findings(console, result.findings, result.findings_omitted)
    if any(f.rule == "checkpoint_unverified" for f in result.findings):
        console.print(
            "Unverified signatures: give the public key of the machine that wrote the journal "
            "with --trusted-key (`agentteam-replay key` prints it there), or pass "
            "--accept-unverified to accept them unchecked."
        )
    if result.in_doubt:
        table = _table("seq:>6", "call:16", "tool:14", "request:18", "why:19", title="In doubt")
        for c in result.in_doubt:
            table.add_row(
                str(c.seq),
                c.call_id,
                c.tool or "-",
                f"{c.method} {c.route.rsplit('/runtime', 1)[-1]}",
                c.reason,
            )
        console.print(table)
        console.print(
            "In-doubt calls sent a mutation whose effect is unknown: check the server "
            "(task_get / task_list) before retrying."
        )
    if result.ok:
        verdict = Text(f"OK: {result.events} events verified", style="bold green")
        if result.in_doubt:
            verdict.append(f"; {len(result.in_doubt)} in-doubt calls", style="bold yellow")
    else:
        count = len(result.findings) + result.findings_omitted
        verdict = Text(f"FAILED: {count} findings", style="bold red")
    console.print(verdict)


# --- calls and show -----------------------------------------------------------------------


def render_show(console: Console, d: CallDetail) -> None:
    s = d.summary
    status = Text(s.in_doubt or s.status, style=_STATUS_STYLE.get(s.status, ""))
    head = Text(shown(f"{s.call_id}  {s.tool}  ", one_line=True))
    head.append(status)
    if s.error_code:
        head.append(shown(f" {s.error_code}", one_line=True))
    console.print(head, style="bold")
    session = d.session
    if session is not None:
        console.print(
            f"session {s.session_id}: {session.client_name} {session.client_version},"
            f" protocol {session.protocol_version}, compat {session.compat_policy},"
            f" bridge {session.bridge_version}"
        )
    console.print(
        f"started {s.started_at}; bridge {_ms(s.bridge_ms)} ms, upstream {_ms(s.upstream_ms)} ms,"
        f" seq {s.first_seq}-{s.last_seq}"
    )
    if d.trace_id:
        console.print(f"trace {d.trace_id}, span {d.span_id or '-'}")
    console.print("\n[bold]The model sent[/]", markup=True)
    console.print(Text(f"  arguments {_encode(d.arguments).decode()}"), soft_wrap=True)
    console.print(f"  _meta keys {', '.join(d.meta_keys) or '-'}; request id {s.request_id}")
    for use in d.deprecated:
        console.print(
            f"  [yellow]deprecated[/] {_esc(use['use_kind'])} {_esc(use['old_name'])}"
            f" -> {_esc(use.get('replacement') or '-')}",
            markup=True,
        )
    if d.injected:
        table = _table("name:18", "from:34", "value:24", title="\nThe bridge injected")
        for f in d.injected:
            table.add_row(f["name"], f["source"], str(f.get("value")))
        console.print(table)
    for x in d.exchanges:
        console.print(
            f"\n[bold]Upstream, attempt {x.attempt}[/] at +{_ms(x.sent_ms)} ms", markup=True
        )
        console.print(f"  {x.method} {x.route}")
        console.print(Text(f"  body {_encode(x.body).decode()}"), soft_wrap=True)
        if x.status is None:
            console.print("  [red]no response recorded[/]", markup=True)
        else:
            console.print(
                f"  -> {x.status} in {_ms(x.duration_ms)} ms (at +{_ms(x.answered_ms)} ms)"
            )
            console.print(Text(f"  {_encode(x.response_body).decode()}"), soft_wrap=True)
    for r in d.token_refreshes:
        console.print(f"  token refreshed from {r['source']}: {r['reason']}")
    console.print("\n[bold]The model saw[/]", markup=True)
    if d.outcome_kind is None:
        console.print(
            "  [red]nothing recorded[/] (the bridge stopped before an outcome)", markup=True
        )
    else:
        console.print(f"  {d.outcome_kind}:")
        _whole(console, d.outcome, "    ")
    table = _table("seq:>8", "+ms:>10", "kind:38", title="\nTimeline")
    for e in d.events:
        erased = " (payload erased)" if e.payload == {"erased": True} else ""
        table.add_row(str(e.seq), _ms(e.offset_ms), e.kind + erased)
    console.print(table)


# --- idempotency --------------------------------------------------------------------------


def render_idempotency(console: Console, r: IdempotencyResult) -> None:
    if r.groups:
        table = _table(
            "key:18",
            "run / callback:24",
            "calls:>5",
            "reused:>6",
            "conflict:>8",
            "ok:3",
            title="Keys",
        )
        for g in r.groups:
            table.add_row(
                g.key,
                f"{g.workflow_run_id}/{g.callback_effect_id}",
                str(g.calls),
                str(g.replays),
                str(g.conflicts),
                Text("yes", style="green") if g.ok else Text("NO", style="bold red"),
            )
        console.print(table)
    table = _table(
        "tool:16", "idempotentHint:14", "repeats:>7", "unsafe:>6", "verdict:27", title="Hints"
    )
    for h in r.hints:
        verdict = Text(h.verdict, style="bold red" if h.verdict == "violated" else "")
        declared = "-" if h.declared is None else str(h.declared).lower()
        table.add_row(h.tool, declared, str(h.repeats), str(h.unsafe), verdict)
    console.print(table)
    console.print(
        f"{r.calls} calls; {r.keyed_calls} keyed creates in {len(r.groups)} scopes;"
        f" {r.claim_calls} set-claim calls, {r.claim_repeats} repeats"
    )
    _findings(console, r.findings)
    if r.ok:
        console.print(Text("OK: idempotency held", style="bold green"))
    else:
        console.print(Text(f"FAILED: {len(r.findings)} violations", style="bold red"))


# --- deprecations -------------------------------------------------------------------------


def render_deprecations(console: Console, r: DeprecationReport) -> None:
    console.print(
        f"{r.uses} deprecated uses in events from {_day(r.window_start)} to"
        f" {_day(r.window_end)}; gate: no use for {r.gate_days} days, as of {_day(r.as_of)}"
    )
    if not r.names:
        console.print("No deprecated name was used.")
        return
    table = _table(
        "name:18", "replacement:18", "uses:>5", "last seen:10", "gate", title="Deprecated names"
    )
    for n in r.names:
        gate = Text(n.gate.text, style="green" if n.gate.met else "yellow")
        table.add_row(
            n.old_name,
            n.replacement or "-",
            str(n.count),
            _day(n.last_seen),
            gate,
        )
    console.print(table)
    users = _table(
        "name:18", "client:16", "agent:10", "uses:>5", "first:10", "last:10", title="Who uses them"
    )
    for n in r.names:
        for u in n.users:
            client = f"{u.client_name or '?'} {u.client_version or ''}".strip()
            users.add_row(
                n.old_name,
                client,
                u.agent_id or "-",
                str(u.count),
                _day(u.first_seen),
                _day(u.last_seen),
            )
    if users.row_count:
        console.print(users)


def _day(ts: str | None) -> str:
    return "-" if not ts else ts[:10]


# --- audit --------------------------------------------------------------------------------


def render_audit(console: Console, r: AuditReport) -> None:
    console.print(f"[bold]{r.calls} calls[/], truncation rate {r.truncation_rate:.1%}", markup=True)
    usage = _table("tool:16", "agent:20", "status:10", "calls:>8", title="\nTool usage")
    for u in r.tool_usage:
        status = Text(u.status, _STATUS_STYLE.get(u.status, ""))
        usage.add_row(u.tool, u.agent_id, status, str(u.calls))
    console.print(usage)
    if r.error_codes:
        errors = _table("error code:34", "tool:16", "calls:>8", title="Error codes")
        for e in r.error_codes:
            errors.add_row(e.error_code, e.tool, str(e.calls))
        console.print(errors)
    latency = _table(
        "latency (ms):16", "count:>8", "p50:>8", "p90:>8", "p99:>8", "max:>8", title="Latency"
    )
    for lat in [*r.latency, *r.latency_by_tool]:
        latency.add_row(
            lat.name,
            str(lat.count),
            _ms(lat.p50_ms),
            _ms(lat.p90_ms),
            _ms(lat.p99_ms),
            _ms(lat.max_ms),
        )
    console.print(latency)
    if r.truncation:
        trunc = _table("tool:16", "results:>8", "truncated:>9", "rate:>7", title="Truncation")
        for t in r.truncation:
            trunc.add_row(t.tool, str(t.results), str(t.truncated), f"{t.rate:.1%}")
        console.print(trunc)
    if r.mutations_by_board:
        boards = _table(
            "workspace:16", "board:20", "tool:16", "mutations:>9", title="Mutations per board"
        )
        for b in r.mutations_by_board:
            boards.add_row(b.workspace_id, b.channel, b.tool, str(b.mutations))
        console.print(boards)
    sessions = _table(
        "started:14",
        "session:14",
        "client:15",
        "calls:>5",
        "err:>3",
        "mut:>3",
        "ended:13",
        title="Sessions",
    )
    for s in r.sessions:
        sessions.add_row(
            s.started_at[5:19].replace("T", " "),
            s.session_id,
            s.client or "-",
            str(s.calls),
            str(s.errors),
            str(s.mutations),
            s.end_reason or ("running/died" if s.ended_at is None else "-"),
        )
    console.print(sessions)


# A cell a spreadsheet would run as a formula (CSV injection): the journal's author writes tool
# names, error codes, client and session ids. Such a text cell gets a leading apostrophe, which
# spreadsheets show as text; numbers are written as numbers.
_FORMULA_STARTS: Final = tuple("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")


def _cell(value: Any) -> Any:
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value


def write_audit_csv(report: AuditReport, directory: Path) -> list[Path]:
    """One CSV per section of the audit; returns the files written. No text cell starts as a
    spreadsheet formula would (``=``, ``+``, ``-``, ``@``, a tab or line break): such a cell is
    written after an apostrophe."""
    journal.make_private_dir(directory)
    sections: dict[str, Iterable[msgspec.Struct]] = {
        "tool_usage": report.tool_usage,
        "error_codes": report.error_codes,
        "latency": [*report.latency, *report.latency_by_tool],
        "truncation": report.truncation,
        "mutations_by_board": report.mutations_by_board,
        "sessions": report.sessions,
    }
    written = []
    for name, rows in sections.items():
        path = directory / f"{name}.csv"
        records = [{k: _cell(v) for k, v in msgspec.to_builtins(row).items()} for row in rows]
        fields = list(records[0]) if records else []
        with open(path, "w", newline="", opener=journal.private_opener) as file:
            writer = csv.DictWriter(file, fieldnames=fields)
            writer.writeheader()
            writer.writerows(records)
        written.append(path)
    return written


# --- rerun and export ---------------------------------------------------------------------


def render_rerun(console: Console, r: RerunResult) -> None:
    where = f"against {r.against}" if r.against else "against the recorded upstream answers"
    console.print(f"Re-ran recorded calls through today's bridge, {where}")
    differing = [c for c in r.calls if c.verdict == "differs"]
    if differing:
        # Whole values, folded across lines where they are long: a cut value hides the cause.
        table = _table("call:17", "path", "recorded", "today", title="Differences")
        for c in differing:
            table.add_row(
                Text(f"{shown(c.call_id, one_line=True)}\n{shown(c.tool or '-', one_line=True)}"),
                Text("outcome", style="bold"),
                shown(c.recorded or "-", one_line=True),
                Text(
                    shown(c.today or "-", one_line=True),
                    style="" if c.recorded == c.today else "bold",
                ),
            )
            for d in c.differences:
                table.add_row("", d.path, _encode(d.recorded).decode(), _encode(d.today).decode())
        console.print(table)
    skipped = [c for c in r.calls if c.verdict == "skipped"]
    if skipped:
        table = _table("call:16", "tool:14", "why skipped", title="Skipped")
        for c in skipped:
            table.add_row(c.call_id, c.tool or "-", c.reason or "")
        console.print(table)
    verdict = f"{r.same} same, {r.differs} differ, {r.skipped} skipped"
    console.print(Text(verdict, style="bold green" if r.ok else "bold red"))


def render_export(console: Console, r: ExportResult) -> None:
    what = f"{r.spans} spans of {r.calls} calls" if r.format == "otlp" else f"{r.events} events"
    if r.requests:
        retried = f", {r.retries} retries" if r.retries else ""
        console.print(f"pushed {what} to {r.output} in {r.requests} requests{retried}")
        return
    console.print(f"exported {what} to {r.output} ({r.format})")
