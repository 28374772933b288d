"""Result budgets: bytes of compact JSON, cut by field on character boundaries, never a failure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentteam_task_bridge.bridge._budget import cut_text, fit, size
from agentteam_task_bridge.bridge._cursor import Cursors, PageState, list_digest
from agentteam_task_bridge.bridge._errors import ToolError

CURSORS = Cursors(b"k" * 32)

EMOJI = "😀"  # 4 UTF-8 bytes


def _items(n: int) -> list[dict[str, Any]]:
    return [{"number": i, "title": "x" * 150, "labels": ["l" * 40] * 10} for i in range(1, n + 1)]


def _summary(number: int, title: str, labels: list[str]) -> dict[str, Any]:
    return {
        "channel": "general",
        "number": number,
        "scope_id": f"tsk_{number}",
        "title": title,
        "status": "todo",
        "priority": None,
        "assignee": None,
        "labels": labels,
        "parent": None,
        "subtask_count": 0,
        "updated_at": "2026-12-02T00:00:00.000000Z",
    }


def _compact_bytes(envelope: dict[str, Any]) -> int:
    return len(json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode())


def test_a_result_within_budget_is_untouched() -> None:
    envelope = {"data": {"channel": "general", "items": _items(2)}, "meta": {}}
    before = json.dumps(envelope)
    assert not fit("task_list", 10_000, envelope, list_state=PageState(None, "d"))
    assert json.dumps(envelope) == before


@pytest.mark.parametrize("text", ["漢" * 50, EMOJI * 50, "a" * 150, "é😀漢a" * 40])
def test_a_cut_string_is_valid_utf8_within_its_bytes_and_marked(text: str) -> None:
    for limit in range(0, 160):
        cut = cut_text(text, limit)
        assert len(cut.encode()) <= limit
        assert cut == text or (cut.endswith("…") and text.startswith(cut[:-1])) or cut == ""


def test_a_cut_list_is_marked_and_its_cursor_resumes_after_the_last_kept_item() -> None:
    envelope: dict[str, Any] = {"data": {"channel": "general", "items": _items(40)}, "meta": {}}
    args = {"channel": "general", "limit": 40}
    state = PageState("up1", "d", dropped=5)
    assert fit("task_list", 8_000, envelope, list_state=state, list_arguments=args, cursors=CURSORS)
    result = envelope
    assert result["meta"]["truncated"] is True
    assert result["meta"]["truncated_fields"] == ["$.data.items"]
    assert "next_cursor" in result["meta"]["truncation_note"]
    assert _compact_bytes(result) <= 8_000
    assert result["meta"]["continuation"] == {
        "tool": "task_list",
        "arguments": {**args, "cursor": result["meta"]["next_cursor"]},
    }
    kept = len(result["data"]["items"])
    assert 0 < kept < 40
    last = result["data"]["items"][-1]["number"]
    opened, delivered = CURSORS.open(result["meta"]["next_cursor"], "d", "number")
    assert (opened.upstream_cursor, opened.after, delivered) == ("up1", (last,), 5 + kept)


def test_a_page_always_keeps_one_item_cutting_its_strings() -> None:
    items = [_summary(1, EMOJI * 200, [EMOJI * 50] * 20), _summary(2, "b", [])]
    envelope: dict[str, Any] = {"data": {"channel": "general", "items": items}, "meta": {}}
    state = PageState(None, "d")
    assert fit("task_list", 2_000, envelope, list_state=state, list_arguments={}, cursors=CURSORS)
    assert [t["number"] for t in envelope["data"]["items"]] == [1]
    opened, delivered = CURSORS.open(envelope["meta"]["next_cursor"], "d", "number")
    assert (opened.upstream_cursor, opened.after, delivered) == (None, (1,), 1)
    assert _compact_bytes(envelope) <= 2_000
    assert set(envelope["data"]["items"][0]) == set(items[0])  # every property stays


def test_bridge_cursors_are_bound_to_the_query_and_the_workspace() -> None:
    args = {"channel": "general", "query": "x"}
    cursor = CURSORS.issue(PageState(None, list_digest(args, "ws_1"), "relevance"), [{"number": 3}])
    opened, _ = CURSORS.open(cursor, list_digest({**args, "limit": 5}, "ws_1"), "relevance")
    assert opened.seen == (3,)
    for other in (list_digest({**args, "status": "done"}, "ws_1"), list_digest(args, "ws_2")):
        with pytest.raises(ToolError) as mismatch:
            CURSORS.open(cursor, other, "relevance")
        assert mismatch.value.code == "cursor_mismatch"
    with pytest.raises(ToolError) as invalid:
        CURSORS.open("bt1.!!!", "d", "number")
    assert invalid.value.code == "cursor_invalid"


def test_a_receipt_keeps_every_task_and_every_property() -> None:
    tasks = [_summary(i, EMOJI * 200, [EMOJI * 50] * 20) for i in range(1, 51)]
    result: dict[str, Any] = {
        "data": {"channel": "general", "parent": None, "tasks": tasks, "reused": False},
        "meta": {},
    }
    assert fit("task_create", 40 * 1024, result)
    assert _compact_bytes(result) <= 40 * 1024
    assert result["meta"]["truncated"] is True
    assert [t["number"] for t in result["data"]["tasks"]] == list(range(1, 51))
    assert all(set(t) == set(tasks[0]) for t in result["data"]["tasks"])
    assert result["data"]["tasks"][0]["title"].endswith("…")
    assert result["meta"]["truncated_fields"] == [
        "$.data.tasks[*].title",
        "$.data.tasks[*].labels[*]",
    ]
    assert "was applied" in result["meta"]["truncation_note"]


def test_a_detail_cuts_the_description_and_says_no_tool_returns_the_rest() -> None:
    task = {**_summary(1, "t", []), "description": "漢" * 9_000, "checkpoints": {"items": []}}
    result: dict[str, Any] = {"data": {"task": task}, "meta": {}}
    assert fit("task_get", 24 * 1024, result)
    assert _compact_bytes(result) <= 24 * 1024
    assert result["meta"]["truncated_fields"] == ["$.data.task.description"]
    assert "No tool returns" in result["meta"]["truncation_note"]
    assert "next_cursor" not in json.dumps(result["meta"])
    description = result["data"]["task"]["description"]
    assert 7_000 < len(description) < 9_000 and description.endswith("漢…")


def test_a_huge_answer_is_cut_to_its_identities_rather_than_refused() -> None:
    # Beyond anything a valid upstream sends: a claim receipt with 20,000 numbers and failures.
    failures = [
        {"number": i, "code": "claimed_by_other", "message": EMOJI * 500} for i in range(1, 20_001)
    ]
    result: dict[str, Any] = {
        "data": {
            "channel": "general",
            "claimed": True,
            "count": 20_000,
            "changed": list(range(20_000)),
            "unchanged": [],
            "failures": failures,
            "tasks": [],
        },
        "meta": {},
    }
    assert fit("task_set_claim", 40 * 1024, result)
    assert size(result) <= 40 * 1024
    assert set(result["data"]) == {
        "channel",
        "claimed",
        "count",
        "changed",
        "unchanged",
        "failures",
        "tasks",
    }
    assert "$.data.changed" in result["meta"]["truncated_fields"]


def test_a_floor_over_budget_is_answered_anyway() -> None:
    result: dict[str, Any] = {"data": {"channel": "c" * 100}, "meta": {}}
    assert fit("task_delete", 10, result)  # logged, not raised
    assert result["data"] == {"channel": ""}


_texts = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda ch, n: ch * n, st.sampled_from(["😀", "漢", "é", '"', "\n"]), st.integers(0, 3000)
    ),
)
_tasks = st.builds(
    lambda n, title, labels: _summary(n, title, labels),
    st.integers(1, 2**53),
    _texts,
    st.lists(_texts, max_size=20),
)
_claims = st.fixed_dictionaries(
    {
        "channel": _texts,
        "claimed": st.booleans(),
        "count": st.integers(0, 10**6),
        "changed": st.lists(st.integers(1, 2**53), max_size=300),
        "unchanged": st.lists(st.integers(1, 2**53), max_size=50),
        "failures": st.lists(
            st.fixed_dictionaries(
                {"number": st.integers(1, 99), "code": _texts, "message": _texts}
            ),
            max_size=50,
        ),
        "tasks": st.lists(_tasks, max_size=60),
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_claims, limit=st.integers(2_600, 40_960))
def test_fit_never_raises_and_keeps_every_property(data: dict[str, Any], limit: int) -> None:
    original = json.loads(json.dumps(data))
    envelope: dict[str, Any] = {"data": data, "meta": {}}
    truncated = fit("task_set_claim", limit, envelope)
    assert _compact_bytes(envelope) <= limit
    assert truncated == (_compact_bytes({"data": original, "meta": {}}) > limit)
    assert set(envelope["data"]) == set(original)
    for kept, was in zip(envelope["data"]["tasks"], original["tasks"], strict=False):
        assert set(kept) == set(was)
        title = kept["title"]
        assert title == was["title"] or was["title"].startswith(title.removesuffix("…"))


# Extended grapheme clusters (UAX #29) a cut must keep whole or drop whole (issue 28, B4).
CLUSTERS = [
    "a",
    "\r\n",  # CR LF: one cluster
    "e\u0308",  # e + combining diaeresis
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # ZWJ family
    "\U0001f1eb\U0001f1f7",  # a flag: two regional indicators
    "\U0001f44d\U0001f3fd",  # thumbs up + skin tone
    "\u1100\u1161\u11a8",  # Hangul L V T jamo: one syllable
    "\u0915\u094d\u0937",  # Devanagari conjunct (virama): one cluster (Unicode 15.1)
    "\U0001f3f3\ufe0f\u200d\U0001f308",  # rainbow flag: ZWJ sequence with VS16
    "漢",
    "😀",
]


@given(st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=30))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_a_cut_never_splits_a_grapheme_cluster(parts: list[str]) -> None:
    text = "".join(parts)
    size_of = len(text.encode())
    for limit in range(size_of + 1):
        cut = cut_text(text, limit)
        assert len(cut.encode()) <= limit
        if cut == text or cut == "":
            continue
        head = cut.removesuffix("…")
        # The head is exactly the first k clusters, for the largest k that fits.
        prefixes = ["".join(parts[:k]) for k in range(len(parts) + 1)]
        assert head in prefixes, (parts, limit, head)
        k = prefixes.index(head)
        assert len(prefixes[k + 1].encode()) + len("…".encode()) > limit


def test_the_audits_clusters_survive_a_cut_whole_or_not_at_all() -> None:
    family = CLUSTERS[3]
    assert cut_text("ab" + family + "cdefgh", 2 + 3 + len(family.encode()) - 1) == "ab…"
    assert cut_text("x" + "e\u0308" * 3, 1 + 3 + 1 + 3) == "xe\u0308…"  # never a bare "e"
    assert cut_text("\U0001f1eb\U0001f1f7" * 3, 8 + 3 + 4) == "\U0001f1eb\U0001f1f7…"
    assert cut_text("ab\r\ncdef", 2 + 1 + 3) == "ab…"  # CR LF stays whole
