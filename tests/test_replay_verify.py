"""`replay.verify`: a sound journal passes; each planted fault is found at its seq, by its rule."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from agentteam_task_bridge import journal, replay
from agentteam_task_bridge.journal import accepts
from agentteam_task_bridge.runtime import FaultSpec, Runtime

from .bridge_harness import CALL_GRAMMAR
from .replay_helpers import (
    SEED,
    Built,
    RawBridge,
    build,
    call_event,
    copy_journal,
    everyday,
    injected,
    key_path_for,
    route,
    seq_of,
    session_started,
    tamper,
    write_events,
)


@pytest.fixture(scope="module")
def everyday_journal(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The `everyday` session written by `agentteam-bridge serve` as a subprocess: the journal
    the other replay tests read in-process, proven here on the wire."""
    return build(tmp_path_factory.mktemp("everyday"), everyday, wire=True)


@pytest.fixture
def copied(everyday_journal: Built, tmp_path: Path) -> Built:
    return copy_journal(everyday_journal, tmp_path / "copy")


def rules(result: replay.VerifyResult) -> list[tuple[int | None, str]]:
    return [(f.seq, f.rule) for f in result.findings]


def test_a_real_bridge_journal_verifies_with_its_checkpoint_and_key(
    everyday_journal: Built,
) -> None:
    result = replay.verify([everyday_journal.path], key=everyday_journal.key)
    assert result.ok, result.findings
    assert result.in_doubt == []
    [report] = result.journals
    assert report.held_checkpoint == str(everyday_journal.checkpoint_path)
    assert report.signatures_checked >= 2 and report.signatures_unchecked == 0
    assert report.calls == 18 and report.events == report.head_seq


def test_an_edited_row_is_found_at_its_seq(copied: Built) -> None:
    seq = seq_of(copied.path, "call_result", nth=2)
    tamper(
        copied.path,
        f"UPDATE events SET payload = replace(payload, 'first', 'FIRST') WHERE seq = {seq}",
    )
    assert rules(replay.verify([copied.path], key=copied.key)) == [
        (seq, "hash_mismatch"),
        (seq, "payload_digest_mismatch"),  # the leaf commits to the payload it had
    ]


def test_a_truncated_tail_is_found_against_the_exported_checkpoint(copied: Built) -> None:
    with journal.open_reader(copied.path) as reader:
        head, _ = reader.head()
    tamper(copied.path, f"DELETE FROM events WHERE seq > {head - 3}", "DELETE FROM checkpoints")
    held = replay.verify([copied.path], checkpoints=[copied.checkpoint_path], key=copied.key)
    assert rules(held) == [(1, "unsigned_history"), (head - 2, "truncated_before_checkpoint")]
    # The chain alone cannot tell it was cut; that no signature covers what is left, it can.
    alone = replay.verify([copied.path], auto_checkpoint=False, key=copied.key)
    assert rules(alone) == [(1, "unsigned_history")]


def test_a_checkpoint_signed_by_another_key_is_unverified(copied: Built) -> None:
    result = replay.verify([copied.path], key=bytes(range(1, 33)))
    assert {rule for _, rule in rules(result)} == {"checkpoint_unverified"}
    # Accepted explicitly, they are counted as unchecked, not as checked.
    lenient = replay.verify([copied.path], accept_unverified=True)
    assert lenient.ok and lenient.journals[0].signatures_unchecked >= 2
    assert lenient.journals[0].signatures_checked == 0


async def test_a_bridge_killed_mid_mutation_leaves_an_in_doubt_call(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    file_runtime.faults.arm(FaultSpec(kind="latency", op="create", delay_ms=20_000))
    bridge = await RawBridge.start(file_runtime, path)
    await bridge.request("tools/list", {})
    await bridge.call_soon("task_create", {"channel": "general", "tasks": [{"title": "held"}]})
    await bridge.wait_for_event("upstream_request")
    await bridge.kill()
    result = replay.verify([path], key=journal.load_key(key_path_for(path), create=False))
    assert result.ok, result.findings  # dying is no fault of the journal
    [doubt] = result.in_doubt
    assert (doubt.tool, doubt.reason, doubt.method) == ("task_create", "no_outcome", "POST")
    assert doubt.seq == seq_of(path, "upstream_request")
    assert doubt.body["tasks"] == [{"title": "held"}]
    listed = replay.list_calls([path], replay.CallFilter(status="in_doubt"))
    assert [c.call_id for c in listed.calls] == [doubt.call_id]


def _write_session(path: Path, calls: dict[str, list[tuple[journal.Payload, str]]]) -> None:
    events = [session_started()]
    for call_id, steps in calls.items():
        events += [call_event(call_id, payload, tool=tool) for payload, tool in steps]
    events.append(journal.Event(session_id="s1", payload=journal.SessionEnded(reason="eof")))
    write_events(path, events)


GET = journal.UpstreamRequest(method="POST", route=route(), body={"channel": "g", "number": 1})
OK = journal.UpstreamResponse(status=200, body={}, duration_ms=1.0)
UNAUTHORIZED = journal.UpstreamResponse(status=401, body={}, duration_ms=1.0)
RESULT = journal.CallResult(result={"data": {}, "meta": {}}, duration_ms=2.0)
REFRESHED = journal.TokenRefreshed(source="command", reason="401")


def _received(**arguments: object) -> journal.Payload:
    return journal.CallReceived(arguments=dict(arguments))


@pytest.mark.parametrize(
    ("steps", "at", "rule"),
    [
        # no context_injected before the upstream request
        ([_received(), GET, OK, RESULT], 1, "call_grammar"),
        # an event after the outcome
        ([_received(), injected(), GET, OK, RESULT, GET], 5, "call_grammar"),
        # the session ended with the call still open
        ([_received(), injected(), GET], 0, "call_incomplete"),
        # a model argument naming hidden context went on past rejection
        (
            [_received(number=1, workspace_id="ws_2"), injected(), GET, OK, RESULT],
            0,
            "hidden_context_in_arguments",
        ),
        # the injected agent is not the session's
        ([_received(), injected(agent="agt_evil"), GET, OK, RESULT], 1, "context_mismatch"),
        # a second refresh and a third request
        (
            [
                _received(),
                injected(),
                GET,
                UNAUTHORIZED,
                REFRESHED,
                GET,
                UNAUTHORIZED,
                REFRESHED,
                GET,
                OK,
                RESULT,
            ],
            7,
            "refresh_replay_exceeded",
        ),
        # the replay after the refresh is another operation
        (
            [
                _received(),
                injected(),
                GET,
                UNAUTHORIZED,
                REFRESHED,
                journal.UpstreamRequest(method="POST", route=route(), body={"number": 2}),
                OK,
                RESULT,
            ],
            5,
            "replay_differs",
        ),
        # a token-shaped value the writer's redactor does not know
        ([_received(title="atk_" + "x" * 40), injected(), GET, OK, RESULT], 0, "secret_in_payload"),
    ],
)
def test_each_planted_call_fault_is_found_at_its_seq_by_its_rule(
    tmp_path: Path, steps: list[journal.Payload], at: int, rule: str
) -> None:
    path = tmp_path / "j.db"
    _write_session(path, {"c1": [(p, "task_get") for p in steps]})
    result = replay.verify([path], key=SEED)
    first_call_seq = 2  # seq 1 is session_started
    assert (first_call_seq + at, rule) in rules(result), result.findings


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "BeArEr", "bEARER", "beAReR"])
def test_a_bearer_token_planted_by_hand_is_found(copied: Built, scheme: str) -> None:
    """In any letter case of the scheme (HTTP's auth-scheme is case-insensitive)."""
    seq = seq_of(copied.path, "call_received")
    tamper(
        copied.path,
        f"UPDATE events SET payload = replace(payload, '\"general\"', '\"{scheme} abcdefgh12345\"')"
        f" WHERE seq = {seq}",
    )
    found = rules(replay.verify([copied.path], key=copied.key))
    assert (seq, "secret_in_payload") in found and (seq, "hash_mismatch") in found
    # the detail never repeats the secret
    result = replay.verify([copied.path], key=copied.key)
    assert all("12345" not in f.detail for f in result.findings)


@pytest.mark.parametrize("column", ["gen_ai_tool_name", "mcp_method_name"])
def test_a_token_in_an_envelope_column_is_found(copied: Built, column: str) -> None:
    """Journals written before the writer redacted the tool and method columns may hold a
    model-supplied token there: verify looks at them as it does at the payload."""
    seq = seq_of(copied.path, "call_received")
    tamper(copied.path, f"UPDATE events SET {column} = 'atk_{'x' * 40}' WHERE seq = {seq}")
    result = replay.verify([copied.path], key=copied.key)
    assert (seq, "secret_in_payload") in rules(result), result.findings
    assert all("xxxxxxxx" not in f.detail for f in result.findings)


def test_many_journals_are_checked_each_and_named_in_findings(
    everyday_journal: Built, tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    _write_session(other, {"c1": [(_received(), "task_get"), (GET, "task_get")]})
    result = replay.verify([everyday_journal.path, other], trusted=[everyday_journal.key, SEED])
    assert [j.path for j in result.journals] == [str(everyday_journal.path), str(other)]
    with journal.open_reader(other) as reader:
        other_id = reader.journal_id
    assert {(f.journal_id, f.rule) for f in result.findings} == {(other_id, "call_grammar")}


def test_inputs_that_cannot_be_used_raise_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    for path, message in [
        (tmp_path / "missing.db", "no journal at"),
        (tmp_path / "notes.txt", "is not a journal"),
    ]:
        with pytest.raises(replay.ReplayInputError, match=message):
            replay.verify([path])


ALPHABET = [
    "call_received",
    "call_rejected",
    "context_injected",
    "upstream_request",
    "upstream_response",
    "token_refreshed",
    "deprecated_usage",
    "call_result",
    "call_error",
    "call_cancelled",
]


def test_the_grammar_accepts_exactly_the_harness_call_grammar() -> None:
    def agree(kinds: tuple[str, ...] | list[str]) -> None:
        expected = CALL_GRAMMAR.match(" ".join(kinds)) is not None
        assert accepts(list(kinds)) == expected, kinds

    for n in range(1, 6):
        for kinds in itertools.product(ALPHABET, repeat=n):
            agree(kinds)
    # Longer sequences: every one-symbol change of every accepted sequence, and random ones.
    rng = random.Random(6)
    valid: list[list[str]] = []
    frontier: list[list[str]] = [[]]
    while frontier:
        prefix = frontier.pop()
        for kind in ALPHABET:
            candidate = [*prefix, kind]
            if len(candidate) <= 10 and CALL_GRAMMAR.match(" ".join(candidate)):
                valid.append(candidate)
            if len(candidate) < 10 and _viable(candidate):
                frontier.append(candidate)
    assert valid
    for kinds in valid:
        agree(kinds)
        for i in range(len(kinds) + 1):
            for kind in ALPHABET:
                agree([*kinds[:i], kind, *kinds[i:]])
                agree([*kinds[:i], kind, *kinds[i + 1 :]])
    for _ in range(20_000):
        agree([rng.choice(ALPHABET) for _ in range(rng.randrange(6, 12))])


def _viable(prefix: list[str]) -> bool:
    """Whether some accepted sequence starts with this prefix (by the replay grammar)."""
    grammar = journal.Grammar()
    return all(grammar.step(kind) is None for kind in prefix) and not grammar.complete
