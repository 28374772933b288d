"""``calls | audit | deprecations | idempotency --from postgresql://...`` equal the local reports.

The fleet: a real bridge session of every kind of call (results, errors, rejections, a refresh,
keyed creates, deprecated names) and a dozen written journals of plausible calls (old tool
names, upstream errors, rejections with multibyte text), shipped into a real PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import replay
from replay import _fleet_reports as reports
from replay._render import to_json

from .fleet_helpers import write_fleet
from .pg_cluster import Cluster
from .replay_helpers import Built, build, everyday

AS_OF = datetime(2027, 1, 15, tzinfo=UTC)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, pg_cluster: Cluster) -> tuple[list[Path], str]:
    base = tmp_path_factory.mktemp("fleet")
    bridge: Built = build(base / "bridge", everyday)
    paths = [bridge.path, *write_fleet(base / "written", 12, 9)]
    url = pg_cluster.create_database()
    shipped = replay.ship(paths, url)
    assert shipped.ok and shipped.shipped > 0
    return paths, url


@pytest.mark.parametrize(
    "where, limit",
    [
        (replay.CallFilter(), None),
        (replay.CallFilter(), 7),
        (replay.CallFilter(status="error"), None),
        (replay.CallFilter(status="in_doubt"), None),
        (replay.CallFilter(status="rejected"), 3),
        (replay.CallFilter(tool="list_tasks"), None),
        (replay.CallFilter(agent="agent-1", tool="task_create"), None),
        (replay.CallFilter(error_code="upstream_unavailable"), None),
        (replay.CallFilter(since=datetime(2000, 1, 1, tzinfo=UTC)), 5),
        (replay.CallFilter(until=datetime(2000, 1, 1, tzinfo=UTC)), None),
    ],
)
def test_calls_from_the_store_equal_the_local_list(
    fleet: tuple[list[Path], str], where: replay.CallFilter, limit: int | None
) -> None:
    paths, url = fleet
    local = replay.list_calls(paths, where, limit=limit)
    assert to_json(reports.calls_from(url, where, limit=limit)) == to_json(local)


def test_audit_from_the_store_equals_the_local_audit(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    local = replay.audit(paths)
    assert local.calls > 100 and local.error_codes and local.mutations_by_board
    assert to_json(reports.audit_from(url)) == to_json(local)


@pytest.mark.parametrize("names", [(), ("list_tasks", "never_used")])
def test_deprecations_from_the_store_equal_the_local_report(
    fleet: tuple[list[Path], str], names: tuple[str, ...]
) -> None:
    paths, url = fleet
    local = replay.deprecations(paths, as_of=AS_OF, names=names)
    assert any(n.count for n in local.names)
    stored = reports.deprecations_from(url, as_of=AS_OF, names=names)
    assert to_json(stored) == to_json(local)


def test_idempotency_from_the_store_equals_the_local_check(fleet: tuple[list[Path], str]) -> None:
    paths, url = fleet
    local = replay.check_idempotency(paths)
    assert local.groups, "the bridge session holds keyed creates"
    assert to_json(reports.idempotency_from(url)) == to_json(local)


@pytest.mark.slow  # eight CLI processes; --json equality is proven above on the same objects
@pytest.mark.parametrize("command", ["calls", "audit", "deprecations", "idempotency"])
def test_the_cli_prints_the_same_report(fleet: tuple[list[Path], str], command: str) -> None:
    paths, url = fleet
    extra = ["--as-of", "2027-01-15"] if command == "deprecations" else []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "replay._cli", command, *args, *extra],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    local = run(*map(str, paths))
    stored = run("--from", url)
    assert stored.returncode == local.returncode, stored.stderr
    assert stored.stdout == local.stdout
