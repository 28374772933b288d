"""`replay.deprecations`: who uses which old name, and when each removal gate is met."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.replay._story import parse_wall

from .replay_helpers import Built, call_event, everyday_journal, session_started, write_events

__all__ = ["everyday_journal"]  # a fixture, shared through the helpers


def by_name(report: replay.DeprecationReport) -> dict[str, replay.DeprecatedName]:
    return {n.old_name: n for n in report.names}


def test_the_bridge_s_deprecated_usage_is_reported_by_name_client_and_agent(
    everyday_journal: Built,
) -> None:
    report = replay.deprecations([everyday_journal.path])
    names = by_name(report)
    assert set(names) == {"list_tasks", "$.includeSubtasks"}
    tool = names["list_tasks"]
    assert (tool.use_kind, tool.replacement, tool.count) == ("tool_name", "task_list", 1)
    [user] = tool.users
    assert (user.client_name, user.client_version, user.agent_id) == (
        "agentteam-tests",
        "9.9.9",
        "agt_local",
    )
    argument = names["$.includeSubtasks"]
    assert (argument.use_kind, argument.replacement) == ("argument", "$.include_subtasks")
    assert argument.tools == ["task_list"]
    # Just used: not met, and the earliest day it can be is the last use + 30 days.
    assert not tool.gate.met and not report.ok
    assert tool.last_seen is not None
    assert parse_wall(tool.gate.since) == parse_wall(tool.last_seen) + timedelta(days=30)


def test_the_gate_is_met_after_n_days_without_use(everyday_journal: Built) -> None:
    last = parse_wall(
        by_name(replay.deprecations([everyday_journal.path]))["list_tasks"].last_seen or ""
    )
    later = replay.deprecations([everyday_journal.path], as_of=last + timedelta(days=31))
    assert later.ok and all(n.gate.met for n in later.names)
    stricter = replay.deprecations(
        [everyday_journal.path], as_of=last + timedelta(days=31), gate_days=60
    )
    assert not stricter.ok and stricter.gate_days == 60


def test_names_asked_about_are_reported_even_unused(everyday_journal: Built) -> None:
    report = replay.deprecations([everyday_journal.path], names=["list_tasks", "task_claim"])
    names = by_name(report)
    assert set(names) == {"list_tasks", "task_claim"}
    unused = names["task_claim"]
    assert unused.count == 0 and unused.users == []
    assert report.window_start is not None
    assert parse_wall(unused.gate.since) == parse_wall(report.window_start) + timedelta(days=30)


def test_uses_from_many_clients_and_journals_are_merged(tmp_path: Path) -> None:
    def use(old: str, replacement: str, client: str, agent: str) -> journal.Event:
        payload = journal.DeprecatedUsage(
            use_kind="argument",
            old_name=old,
            replacement=replacement,
            client_name=client,
            client_version="1",
            agent_id=agent,
        )
        return call_event("c1", payload, tool="task_create")

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    write_events(
        a,
        [
            session_started(),
            use("$.tasks[0].mediaType", "$.tasks[0].media_type", "cursor", "agt_1"),
            use("$.tasks[3].mediaType", "$.tasks[3].media_type", "cursor", "agt_1"),
        ],
    )
    write_events(b, [session_started(), use("$.tasks[1].mediaType", "x", "codex", "agt_2")])
    report = replay.deprecations([a, b])
    [name] = report.names
    assert name.old_name == "$.tasks[].mediaType" and name.count == 3 and report.uses == 3
    assert [(u.client_name, u.agent_id, u.count) for u in name.users] == [
        ("cursor", "agt_1", 2),
        ("codex", "agt_2", 1),
    ]
    assert name.first_seen is not None and name.last_seen is not None
    assert name.first_seen <= name.last_seen
