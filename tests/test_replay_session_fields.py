"""A session's fields are declared once: `journal.SessionFields`, which the `session_started`
event and replay's `SessionInfo` (the session read back) both derive from, so whatever a start
journals is read back under the same name, by the fold and by `show`, with no second list."""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentteam_task_bridge import journal, replay

from .replay_helpers import call_event, write_events

FIELDS = journal.SessionFields.__struct_fields__


def test_the_event_and_the_session_read_back_share_one_declaration() -> None:
    assert issubclass(journal.SessionStarted, journal.SessionFields)
    assert issubclass(replay.SessionInfo, journal.SessionFields)
    # The event adds no field of its own; it only requires two of the shared ones.
    assert journal.SessionStarted.__struct_fields__ == FIELDS
    required = set(FIELDS) - set(FIELDS[-len(journal.SessionStarted.__struct_defaults__) :])
    assert required == {"bridge_version", "compat_policy"}
    assert set(FIELDS) < set(replay.SessionInfo.__struct_fields__)


def test_every_field_a_start_journals_is_read_back_by_the_fold_and_by_show(
    tmp_path: Path,
) -> None:
    # Each field a distinct value (its own name), so a field copied into another reads wrong.
    started = journal.SessionStarted(**{name: f"{name}-value" for name in FIELDS})
    path = tmp_path / "journal.db"
    write_events(
        path,
        [
            journal.Event(session_id="s1", mcp_method_name="initialize", payload=started),
            call_event("s1.1", journal.CallReceived(arguments={"channel": "general"})),
            call_event("s1.1", journal.CallResult(result={"data": {}})),
            journal.Event(session_id="s1", payload=journal.SessionEnded(reason="eof", calls=1)),
        ],
    )
    sessions: list[replay.SessionInfo] = []
    with replay.open_journals([path]) as journals:
        (story,) = replay.iter_stories(journals.records(), sessions_out=sessions)
    (ended,) = sessions
    detail = replay.show_call([path], "s1.1")
    for info in (story.session, ended, detail.session):
        assert info is not None
        assert {name: getattr(info, name) for name in FIELDS} == msgspec.structs.asdict(started)
    assert (ended.session_id, ended.end_reason) == ("s1", "eof")
