"""Every report ``--from`` reads one instant of the store, however many statements, connections
and threads it uses.

Against a real PostgreSQL, on a store that takes batches while a report is made: each
statement a report runs on the store is followed at once, before the report goes on, by the
next batch of a fleet that keeps shipping (new calls in a new session, new errors and
deprecated names, a new journal, an erasure applied once cosigned, more calls), shipped and
committed by the same thread. Deterministic: the batches land between the report's statements,
on whatever connection or thread those run. Each report then equals the one made before the
batches, its parts count the same calls and sessions, and a report made after them shows them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec
import psycopg
import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay import _fleet_reports as reports
from agentteam_task_bridge.replay._cosign import WitnessKey
from agentteam_task_bridge.replay._fleet_cosign import cosign_once
from agentteam_task_bridge.replay._fleet_report import report_from
from agentteam_task_bridge.replay._render import to_json
from agentteam_task_bridge.replay._report_html import write_html

from .fleet_helpers import append_calls, write_fleet, write_fleet_journal, write_idempotency_fleet
from .journal_helpers import KEY
from .pg_cluster import Cluster
from .replay_helpers import replay_main

SIGNER: Final = journal.SigningKey("agentteam-bridge/seed", KEY)
WITNESS: Final = WitnessKey("witness.example/snapshot", bytes(range(80, 112)))
AS_OF: Final = datetime(2027, 1, 15, tzinfo=UTC)


class Fleet:
    """Journals shipped to a store, and the batches still to ship (each a step that writes to
    the journals and ships, or erases and ships and cosigns)."""

    def __init__(self, base: Path, url: str) -> None:
        self.url = url
        self.written = write_fleet(base / "written", 3, 9)
        self.paths = [*self.written, *write_idempotency_fleet(base / "idempotency")]
        assert replay.ship(self.paths, url).ok
        self.base = base
        self.batches: list[Callable[[], None]] = [
            self.more_calls(self.written[0], "fleet-0000", 10, 7),
            self._new_journal,
            self._erasure,
            self.more_calls(self.written[2], "fleet-0002", 20, 6),
        ]
        self.shipped = 0

    def more_calls(self, path: Path, jid: str, start: int, calls: int) -> Callable[[], None]:
        def step() -> None:  # a new session: results, errors, rejections, a deprecated name
            append_calls(path, jid, start, calls)
            self._ship([path])

        return step

    def _new_journal(self) -> None:
        path = self.base / "late.db"
        write_fleet_journal(path, 5, 6)
        self.paths.append(path)
        self._ship([path])

    def _erasure(self) -> None:
        path = self.written[1]
        selector = journal.EraseSelector(call_id="s1.3")
        assert journal.erase_payloads(path, selector, reason="r", key=SIGNER).seqs
        self._ship([path])
        assert cosign_once(self.url, WITNESS).ok  # the store applies the erasure

    def _ship(self, paths: list[Path]) -> None:
        shipped = replay.ship(paths, self.url)
        assert shipped.ok and shipped.shipped, shipped

    def ship_next(self) -> None:
        if self.batches:
            self.batches.pop(0)()
            self.shipped += 1


_local = threading.local()


@pytest.fixture
def shipping(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Fleet], None]]:
    """``shipping(fleet)``: from then on, every query a store connection runs is followed by
    ``fleet``'s next batch, shipped by the same thread (whose own connections ship nothing)."""
    lock = threading.Lock()
    fleets: list[Fleet] = []
    plain = psycopg.Connection.connect

    class ShippingConnection(psycopg.Connection[Any]):
        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            cursor = super().execute(query, *args, **kwargs)
            if isinstance(query, str) and not query.lstrip().upper().startswith("SET"):
                with lock:
                    _local.shipping = True
                    try:
                        fleets[0].ship_next()
                    finally:
                        _local.shipping = False
            return cursor

    def connect(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "shipping", False):
            return plain(*args, **kwargs)
        return ShippingConnection.connect(*args, **kwargs)

    def start(fleet: Fleet) -> None:
        fleets.append(fleet)
        monkeypatch.setattr(psycopg, "connect", connect)

    yield start
    monkeypatch.undo()


@pytest.fixture
def fleet(tmp_path: Path, pg_cluster: Cluster) -> Fleet:
    return Fleet(tmp_path, pg_cluster.create_database())


def _same_moment(page: replay.Report, like: replay.Report) -> replay.Report:
    """``page`` as if made at ``like``'s moment (the deprecation gates are judged at it)."""
    return msgspec.structs.replace(
        page,
        generated_at=like.generated_at,
        deprecations=msgspec.structs.replace(page.deprecations, as_of=like.deprecations.as_of),
    )


def _consistent(page: replay.Report, whole: bool) -> None:
    """Every part of the page counts the same calls and sessions."""
    calls = page.audit.calls
    assert calls > 0
    assert sum(sum(b.by_tool.values()) for b in page.buckets) == calls
    assert sum(sum(b.by_status.values()) for b in page.buckets) == calls
    assert sum(u.calls for u in page.audit.tool_usage) == calls
    assert sum(s.calls for s in page.audit.sessions) == calls
    assert page.stories_first + page.stories_more == calls
    if whole:
        assert sum(j.calls for j in page.verify.journals) == calls
        assert page.idempotency.calls == calls
    errors = {e.error_code: e.calls for e in page.errors}
    assert errors == _by_code(page.audit.error_codes)
    stories = {d.summary.call_id: d.summary for d in page.stories}
    sessions = {(s.journal_id, s.session_id) for s in page.audit.sessions}
    for example in page.errors:  # each example's story is in the page (its anchor)
        assert example.example_call in stories, example
        assert stories[example.example_call].error_code == example.error_code
    for summary in stories.values():
        assert (summary.journal_id, summary.session_id) in sessions, summary


def _by_code(rows: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row.error_code] = out.get(row.error_code, 0) + row.calls
    return out


@pytest.mark.parametrize(
    "where",
    [replay.ReportFilter(), replay.ReportFilter(since=datetime(2020, 1, 1, tzinfo=UTC))],
    ids=["whole-journals", "a-window"],
)
def test_a_page_is_one_instant_of_a_store_taking_batches(
    fleet: Fleet,
    shipping: Callable[[Fleet], None],
    where: replay.ReportFilter,
    tmp_path: Path,
) -> None:
    """Over whole journals (the idempotency check from the kept state) and over a window (its
    statement over the lines): batches shipped between every two statements of the page, on
    every connection, change nothing in it."""
    whole = where.since is None
    before = report_from(fleet.url, where, stories=7)
    _consistent(before, whole)
    shipping(fleet)
    during = report_from(fleet.url, where, stories=7)
    assert fleet.shipped == 4 and not fleet.batches, "every batch landed while the page was made"
    _consistent(during, whole)
    assert to_json(_same_moment(during, before)) == to_json(before)
    # The page itself, byte for byte.
    write_html(_same_moment(during, before), tmp_path / "during.html")
    write_html(before, tmp_path / "before.html")
    assert (tmp_path / "during.html").read_bytes() == (tmp_path / "before.html").read_bytes()
    after = report_from(fleet.url, where, stories=7)
    _consistent(after, whole)
    assert after.audit.calls == before.audit.calls + 7 + 6 + 6
    assert len(after.audit.sessions) == len(before.audit.sessions) + 3
    assert len(after.verify.journals) == len(before.verify.journals) + 1
    assert _erased(fleet.url) > 0, "the erasure was applied"


def _erased(url: str) -> int:
    with reports.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM agentteam.events WHERE journal_id = 'fleet-0001'"
            " AND call_id = 's1.3' AND payload = '{\"erased\":true}'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(
    "command",
    [
        lambda url: reports.calls_from(url, replay.CallFilter()),
        reports.audit_from,
        lambda url: reports.deprecations_from(url, as_of=AS_OF),
    ],
    ids=["calls", "audit", "deprecations"],
)
def test_the_other_reports_from_the_store_read_one_instant(
    fleet: Fleet, shipping: Callable[[Fleet], None], command: Callable[[str], Any]
) -> None:
    """``calls``, ``audit`` and ``deprecations --from`` each run several statements: the
    batches shipped between them change none of their figures."""
    before = command(fleet.url)
    shipping(fleet)
    during = command(fleet.url)
    assert fleet.shipped >= 2, "a batch landed after each of its statements"
    assert to_json(during) == to_json(before)
    if isinstance(during, replay.CallList):
        assert during.scanned == during.matched == len(during.calls)
    after = command(fleet.url)
    assert to_json(after) != to_json(before)


def test_a_proof_from_the_store_reads_one_instant(
    fleet: Fleet, shipping: Callable[[Fleet], None]
) -> None:
    """``prove --from`` reads the head, the stored hashes and the checkpoints in several
    statements: the journal's next batches (a new signed checkpoint each) landing between them
    change nothing in the proof."""
    store = ("--from", fleet.url, "--journal", "fleet-0000")
    asked = [(*store, "--seq", "5"), (*store, "--consistency", "3", "40")]
    before = [_proof(*args) for args in asked]
    for args, was in zip(asked, before, strict=True):
        fleet.batches = [
            fleet.more_calls(fleet.written[0], "fleet-0000", 60 + 10 * fleet.shipped + n, 3)
            for n in range(4)
        ]
        shipping(fleet)
        shipped = fleet.shipped
        assert _proof(*args) == was, args
        assert fleet.shipped > shipped, "a batch landed between its statements"
    assert _proof(*asked[0])["tree_size"] > before[0]["tree_size"]


def _proof(*args: str) -> dict[str, Any]:
    done = replay_main("prove", *args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    proof: dict[str, Any] = json.loads(done.stdout)
    return proof


def test_the_witness_reads_the_store_before_the_files(
    fleet: Fleet, shipping: Callable[[Fleet], None], tmp_path: Path
) -> None:
    """``verify --witness`` beside a shipper that keeps shipping the same files: batches landing
    between its statements are no finding (the store read first, at one instant, holds only
    what the files held), and the erasures pending are read in the same instant."""
    from agentteam_task_bridge.replay._fleet_witness import witness_findings

    paths = fleet.written[:2]
    assert witness_findings(fleet.url, paths) == []
    env = {"XDG_CONFIG_HOME": str(tmp_path / "auditor")}
    for n in range(2):
        fleet.batches = [
            fleet.more_calls(fleet.written[0], "fleet-0000", 100 + 10 * fleet.shipped + i, 4)
            for i in range(3)
        ] + [fleet.more_calls(fleet.written[1], "fleet-0001", 300 + fleet.shipped, 4)]
        shipping(fleet)
        shipped = fleet.shipped
        if n == 0:
            assert witness_findings(fleet.url, paths) == []
        else:
            done = replay_main("verify", *paths, "--witness", fleet.url, "--json", env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            verified = json.loads(done.stdout)
            assert verified["ok"] and not verified["findings"], verified["findings"]
        assert fleet.shipped > shipped, "a batch landed while the store was read"
