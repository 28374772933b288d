"""``report``: everything an auditor looks at, gathered for one self-contained HTML page.

The verdict is :func:`replay.verify`'s over the whole journals (integrity does not depend on a
filter), reached in a second process (forked, where the platform forks) while this one makes
one more pass over the calls that match the filter, fed to the same accumulators ``audit``,
``idempotency`` and ``deprecations`` use, so the page shows the figures those commands print
and takes about as long as the longer of the two passes (verify, on a journal of
bridge-shaped calls). Memory stays bounded however long the journals are:

* calls over time are counted in at most :data:`MAX_BUCKETS` buckets whose width doubles
  (1 s, 2 s, 4 s, ...) whenever more would be needed, each with a latency histogram;
* the stories kept are the first ``stories`` calls in journal order, plus the calls the page
  names elsewhere (findings, in-doubt calls, one example per error code), at most
  :data:`MAX_NAMED_STORIES` of those, read back from the journal by call id.

The page itself is :mod:`replay._report_html`'s; it shows only what the journal holds, which
the bridge redacted before writing, and what the journal erased stays erased.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

import msgspec

from agentteam_task_bridge.journal import Record

from ._audit import AuditReport, Histogram, Latency, _Audit
from ._calls import CallDetail, CallFilter, story_detail, wall
from ._deprecations import DEFAULT_GATE_DAYS, DeprecationReport, Tally
from ._idempotency import IdempotencyResult, _Checker, declared_hints
from ._source import Journals, Progress, ReplayInputError, open_journals
from ._story import CallStory, SessionInfo, iter_stories, parse_wall
from ._verify import Key, VerifyResult, verify

__all__ = ["Bucket", "ErrorExample", "Report", "ReportFilter", "report"]

MAX_BUCKETS: Final = 96
DEFAULT_STORIES: Final = 50
MAX_NAMED_STORIES: Final = 200


class ReportFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which calls the page covers: ``journal`` is a journal id or its first characters."""

    journal: str | None = None
    session: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def calls(self) -> CallFilter:
        return CallFilter(session=self.session, since=self.since, until=self.until)

    def keeps(self, record: Record) -> bool:
        if self.journal is not None and not record.journal_id.startswith(self.journal):
            return False
        return self.session is None or record.session_id == self.session

    def keeps_session(self, info: SessionInfo) -> bool:
        if self.since is not None and (info.ended_at or info.started_at) < wall(self.since):
            return False
        return not (self.until is not None and info.started_at > wall(self.until))

    @property
    def text(self) -> str:
        """The filter as the command line spells it ('' for none)."""
        parts = [f"--journal {self.journal}"] if self.journal else []
        parts += [f"--session {self.session}"] if self.session else []
        parts += [f"--since {wall(self.since)}"] if self.since else []
        parts += [f"--until {wall(self.until)}"] if self.until else []
        return " ".join(parts)


class Bucket(msgspec.Struct, frozen=True, kw_only=True):
    """The calls that began in ``[start, start + width)``: by tool, by outcome, and latency."""

    start: str
    by_tool: dict[str, int]
    by_status: dict[str, int]
    latency: Latency


class ErrorExample(msgspec.Struct, frozen=True, kw_only=True):
    """One error code: how many calls ended with it, of which tools, and the first of them."""

    error_code: str
    calls: int
    tools: list[str]
    example_call: str


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """What the page shows; ``stories`` hold the whole story of every call it links to."""

    generated_at: str
    sources: list[str]
    filter: str
    verify: VerifyResult
    audit: AuditReport
    deprecations: DeprecationReport
    idempotency: IdempotencyResult
    bucket_seconds: int
    buckets: list[Bucket]
    errors: list[ErrorExample]
    stories: list[CallDetail]
    stories_first: int
    stories_more: int

    @property
    def ok(self) -> bool:
        return self.verify.ok and self.idempotency.ok


def report(
    paths: Sequence[str | Path],
    where: ReportFilter | None = None,
    *,
    checkpoints: Sequence[str | Path] = (),
    trusted: Sequence[Key] = (),
    accept_unverified: bool = False,
    local_key_file: bool = False,
    stories: int = DEFAULT_STORIES,
    gate_days: int = DEFAULT_GATE_DAYS,
    progress: Progress | None = None,
) -> Report:
    """Verify the journals (``checkpoints``, ``trusted``, ``accept_unverified`` and
    ``local_key_file`` as for
    :func:`replay.verify`), then gather the audit of the calls ``where`` selects; the first
    ``stories`` calls' stories are kept whole."""
    if stories < 0:
        raise ReplayInputError("the number of stories cannot be negative")
    where = where or ReportFilter()
    verified = _verify_beside(
        paths,
        checkpoints=checkpoints,
        trusted=trusted,
        accept_unverified=accept_unverified,
        local_key_file=local_key_file,
    )
    try:
        try:
            return _gather(paths, where, verified, stories, gate_days, progress, rows_checked=False)
        except _CheckRows:  # the pass, which took each row as it is, runs again checking each
            return _gather(paths, where, verified, stories, gate_days, progress)
    except ReplayInputError:
        verified(_nothing_left)  # an input verify refuses is reported as verify words it
        raise


def _gather(
    paths: Sequence[str | Path],
    where: ReportFilter,
    verdict: Callable[[Callable[[VerifyResult], bool]], VerifyResult],
    stories: int,
    gate_days: int,
    progress: Progress | None,
    *,
    rows_checked: bool = True,
) -> Report:
    """The pass over the calls ``where`` selects, beside the verification ``verdict`` awaits.

    Not ``rows_checked``, each row's columns are taken as they are (no ``row_problem`` per row,
    about 10% of the pass, measured on the bench journal): verify, beside it, checks every row
    of every file. Where it finds one no bridge writes (``row_malformed``), or omits findings,
    or the pass fails on such a row: :class:`_CheckRows`, and the caller runs the checked pass,
    whose page or error is then the report's."""
    page = _Pass(where, stories)
    with open_journals(paths) as journals:
        try:
            page.run(journals.records(progress, checked=rows_checked, screened=True))
            checked = page.checker.result()
        except Exception as exc:  # a row of another shape can break the pass anywhere
            if rows_checked:
                raise
            raise _CheckRows from exc
        verified = verdict(functools.partial(_left_to_verify, journals))
        if not rows_checked and (
            verified.findings_omitted or any(f.rule == "row_malformed" for f in verified.findings)
        ):
            raise _CheckRows
        kept, errors = page.kept, page.errors
        named = _named_calls(verified, checked, errors)
        for call_id in [c for c in named if c not in kept][:MAX_NAMED_STORIES]:
            detail = _read_story(journals, call_id)
            if detail is not None:
                kept[call_id] = detail
    ordered = sorted(kept.values(), key=lambda d: (d.summary.journal_id, d.summary.first_seq))
    first = min(stories, page.matched)
    return Report(
        generated_at=wall(datetime.now(UTC)),
        sources=[str(p) for p in paths],
        filter=where.text,
        verify=verified,
        audit=page.acc.report(),
        deprecations=page.tally.report(gate_days=gate_days),
        idempotency=checked,
        bucket_seconds=page.timeline.width,
        buckets=page.timeline.buckets(),
        errors=[
            ErrorExample(error_code=code, calls=n, tools=sorted(tools), example_call=call)
            for code, (n, tools, call) in sorted(errors.items(), key=lambda kv: (-kv[1][0], kv[0]))
        ],
        stories=ordered,
        stories_first=first,
        stories_more=page.matched - first,
    )


def _left_to_verify(journals: Journals, verified: VerifyResult) -> bool:
    """Whether ``verify(decode_unread=False, screen=False)``'s ``verified`` may not be verify's
    whole verdict over the rows the pass read: a payload did not decode or a row holds a
    secret's shape (``Journals.undecoded``, ``Journals.secrets``), or a journal's last row is not
    the one the pass read (a file written between the two reads: the one that read more saw
    rows the other did not check), or the files verified are not the files the pass read (one
    removed or added between the two reads, a journal's head unchanged: a pruned segment's
    rows, which the pass never screened), or the rows erased are not those verify found erased
    (a sealed segment erased between the two reads: its ``payload_erased`` event was already in
    the live one)."""
    return (
        journals.undecoded > 0
        or journals.secrets > 0
        or any(j.head_seq != journals.read_through.get(j.journal_id, 0) for j in verified.journals)
        or {f for j in verified.journals for f in j.segments or [j.path]}
        != {info.path for info in journals.infos}
        or {(j.journal_id, s) for j in verified.journals for s in j.erased_seqs} != journals.erased
    )


def _nothing_left(verified: VerifyResult) -> bool:
    return False  # the process's result stands


class _CheckRows(Exception):
    """The pass over rows taken as they are cannot stand: run it checking each row."""


class _Pass:
    """What the page gathers from the calls ``where`` selects: the audit, the idempotency
    checks, deprecated usage, the timeline, the error codes and the first ``stories`` stories."""

    def __init__(self, where: ReportFilter, stories: int) -> None:
        self.where = where
        self.stories = stories
        self.acc, self.checker, self.tally = _Audit(), _Checker(declared_hints()), Tally()
        self.timeline = _Timeline()
        self.errors: dict[str, tuple[int, set[str], str]] = {}
        self.kept: dict[str, CallDetail] = {}
        self.matched = 0

    def run(self, records: Iterator[Record]) -> None:
        where, calls, stories = self.where, self.where.calls, self.stories
        acc, checker, timeline = self.acc, self.checker, self.timeline
        errors, kept = self.errors, self.kept
        ended: list[SessionInfo] = []
        for story in iter_stories(
            _kept(records, where, self.tally), sessions_out=ended, in_order=True
        ):
            if ended:
                acc.sessions_ended([s for s in ended if where.keeps_session(s)])
                ended.clear()
            s = story.summary()
            if not calls.matches(s):
                continue
            self.matched += 1
            acc.call(story, s)
            checker.feed(story)
            timeline.add(s.started_at, s.tool or "?", s.status, s.bridge_ms)
            if s.error_code is not None:
                n, tools, example = errors.get(s.error_code, (0, set(), s.call_id))
                tools.add(s.tool or "?")
                errors[s.error_code] = (n + 1, tools, example)
            if len(kept) < stories:
                kept[story.call_id] = story_detail(story)
        acc.sessions_ended([s for s in ended if where.keeps_session(s)])


def _verify_beside(
    paths: Sequence[str | Path], **options: Any
) -> Callable[[Callable[[VerifyResult], bool]], VerifyResult]:
    """Start :func:`replay.verify` in a second process (forked, where the platform forks),
    beside the pass over the calls; the function returned waits for its result. The process
    sends back the result or the input error verify raised; should it die otherwise, verify
    runs again here, where its error shows as it is.

    The process decodes only the payloads verify's checks read and screens no row for secrets
    (``decode_unread=False, screen=False``): the pass over the calls decodes every payload of
    every file anyway, and screens every row as verify does (``Journals.records``). The function
    returned is given a test of the process's result (:func:`_left_to_verify`); where it
    holds, verify runs again here, whole, so the verdict is always verify's own. Why: verify
    decoded responses and results only to find them invalid (about 6% of its time on the bench
    journal) and screened every row (about 8%), while the pass over the calls, then the shorter
    of the two, decodes every payload anyway."""
    if "fork" not in multiprocessing.get_all_start_methods():
        result = verify(paths, **options)
        return lambda again: result  # verified whole
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_verify_child, args=(sender, paths, options), daemon=True)
    process.start()
    sender.close()
    done: list[VerifyResult] = []

    def wait(again: Callable[[VerifyResult], bool]) -> VerifyResult:
        if done:
            return done[0]
        try:
            kind, value = receiver.recv()
        except (EOFError, OSError):
            kind, value = "failed", None
        finally:
            receiver.close()
            process.join()
        if kind == "input":
            raise ReplayInputError(value)
        done.append(value if kind == "ok" and not again(value) else verify(paths, **options))
        return done[0]

    return wait


def _verify_child(sender: Connection, paths: Sequence[str | Path], options: Any) -> None:
    try:
        sender.send(("ok", verify(paths, decode_unread=False, screen=False, **options)))
    except ReplayInputError as exc:
        sender.send(("input", str(exc)))
    except BaseException:  # the parent verifies again and shows the error
        sender.send(("failed", None))
    finally:
        sender.close()


def _kept(records: Iterator[Record], where: ReportFilter, tally: Tally) -> Iterator[Record]:
    """The records of the journals and sessions asked for; deprecated usage counted as read."""
    since = wall(where.since) if where.since else None
    until = wall(where.until) if where.until else None
    if since is None and until is None and where.journal is None and where.session is None:
        for record in records:  # no filter: every record
            tally.add(record)
            yield record
        return
    for record in records:
        if not where.keeps(record):
            continue
        if (since is None or record.ts_wall >= since) and (
            until is None or record.ts_wall <= until
        ):
            tally.add(record)
        yield record


def _named_calls(
    verified: VerifyResult, checked: IdempotencyResult, errors: dict[str, tuple[int, set[str], str]]
) -> list[str]:
    """Every call id the page names outside the stories' list, in the order it names them."""
    ids = [f.call_id for f in verified.findings if f.call_id]
    ids += [c.call_id for c in verified.in_doubt]
    ids += [call for _, _, call in errors.values()]
    ids += [f.call_id for f in checked.findings if f.call_id]
    return list(dict.fromkeys(ids))


def _read_story(journals: Journals, call_id: str) -> CallDetail | None:
    records = journals.events_of_call(call_id)
    if not records:
        return None
    journal_id, session_id = records[0].journal_id, records[0].session_id
    session = SessionInfo.of(
        journals.session_started(journal_id, session_id),
        journals.session_started(journal_id, session_id, "session_handshake"),
    )
    story = CallStory(records[0].journal_id, call_id, records[0].session_id, session)
    for record in records:
        if record.journal_id == story.journal_id:
            story.add(record)
    return story_detail(story)


class _Timeline:
    """Calls per time bucket; the width doubles while the calls span more than MAX_BUCKETS."""

    def __init__(self) -> None:
        self.width = 1
        self.tools: dict[int, Counter[str]] = {}
        self.statuses: dict[int, Counter[str]] = {}
        self.latency: dict[int, Histogram] = {}
        # The last second parsed, by its text (``2026-12-04T21:30:49``): calls come in
        # bursts, many in one second. Only for UTC times (``Z``) after 1970, where the
        # fraction does not change the whole second.
        self._second: tuple[str, int] = ("", 0)

    def add(self, started_at: str, tool: str, status: str, ms: float | None) -> None:
        text = started_at[:19]
        if text == self._second[0] and started_at[-1:] == "Z":
            second = self._second[1]
        else:
            second = int(parse_wall(started_at).timestamp())
            if started_at[-1:] == "Z" and second > 0:
                self._second = (text, second)
        index = second // self.width
        if index not in self.tools:
            self.tools[index], self.statuses[index] = Counter(), Counter()
            self.latency[index] = Histogram()
            if max(self.tools) - min(self.tools) >= MAX_BUCKETS:
                self._widen()
                index = second // self.width
        self.tools[index][tool] += 1
        self.statuses[index][status] += 1
        if ms is not None:
            self.latency[index].add(ms)

    def _widen(self) -> None:
        while max(self.tools) - min(self.tools) >= MAX_BUCKETS:
            self.width *= 2
            tools: dict[int, Counter[str]] = {}
            statuses: dict[int, Counter[str]] = {}
            latency: dict[int, Histogram] = {}
            for index in self.tools:
                wide = index // 2
                tools.setdefault(wide, Counter()).update(self.tools[index])
                statuses.setdefault(wide, Counter()).update(self.statuses[index])
                _merge(latency.setdefault(wide, Histogram()), self.latency[index])
            self.tools, self.statuses, self.latency = tools, statuses, latency

    def buckets(self) -> list[Bucket]:
        if not self.tools:
            return []
        low, high = min(self.tools), max(self.tools)
        out = []
        for index in range(low, high + 1):  # empty buckets too: time runs evenly on the chart
            moment = datetime.fromtimestamp(index * self.width, UTC)
            out.append(
                Bucket(
                    start=wall(moment),
                    by_tool=dict(sorted(self.tools.get(index, Counter()).items())),
                    by_status=dict(sorted(self.statuses.get(index, Counter()).items())),
                    latency=self.latency.get(index, Histogram()).summary("bridge"),
                )
            )
        return out


def _merge(into: Histogram, other: Histogram) -> None:
    into.buckets.update(other.buckets)
    into.count += other.count
    into.total_us += other.total_us
    into.max = max(into.max, other.max)
    into.min = min(into.min, other.min)
