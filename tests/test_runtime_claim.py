"""task_set_claim: a desired-state setter over a bounded batch with per-task failures."""

from __future__ import annotations

import trio

from agentteam_task_bridge.runtime import OTHER_AGENT_ID

from .conftest import Api


async def _claim(api: Api, numbers: list[int], claimed: bool = True) -> dict[str, object]:
    return await api.ok("set-claim", {"channel": "general", "numbers": numbers, "claimed": claimed})


async def test_claim_is_a_desired_state_never_a_toggle(api: Api) -> None:
    await api.create("general", "a", "b")
    first = await _claim(api, [1, 2])
    assert (first["count"], first["changed"], first["unchanged"]) == (2, [1, 2], [])
    again = await _claim(api, [1, 2])
    assert (again["count"], again["changed"], again["unchanged"]) == (2, [], [1, 2])
    assert all(t["assignee"] == "@local-agent" for t in again["tasks"])  # type: ignore[attr-defined]
    released = await _claim(api, [1], claimed=False)
    assert released["changed"] == [1]
    released_again = await _claim(api, [1], claimed=False)
    assert (released_again["changed"], released_again["unchanged"]) == ([], [1])


async def test_per_task_failures(api: Api) -> None:
    await api.create("general", "mine", "theirs")
    await api.as_agent(OTHER_AGENT_ID).ok(
        "set-claim", {"channel": "general", "numbers": [2], "claimed": True}
    )
    result = await _claim(api, [1, 2, 9])
    assert result["count"] == 1
    failures = {f["number"]: f for f in result["failures"]}  # type: ignore[attr-defined]
    assert failures[2]["code"] == "claimed_by_other" and failures[2]["holder"] == "@helper-agent"
    assert failures[9]["code"] == "task_not_found"
    release = await _claim(api, [2], claimed=False)
    assert release["failures"][0]["code"] == "not_assignee"  # type: ignore[index]


async def test_batch_bounds_and_duplicates(api: Api) -> None:
    for numbers, path in (
        ([], "$.numbers"),
        ([1, 1], "$.numbers[1]"),
        ([0], "$.numbers[0]"),
        (list(range(1, 52)), "$.numbers"),
    ):
        error = await api.fails(
            "set-claim",
            {"channel": "general", "numbers": numbers, "claimed": True},
            expect=422,
            code="validation_failed",
        )
        assert path in error["fieldErrors"]
    await api.fails(
        "set-claim",
        {"channel": "general", "numbers": [1], "claimed": "yes"},
        expect=422,
        code="validation_failed",
    )


async def test_concurrent_claims_of_one_task_have_one_winner(api: Api) -> None:
    await api.create("general", "contested")
    contenders = [api, api.as_agent(OTHER_AGENT_ID)]
    results: list[dict[str, object]] = []

    async def claim(who: Api) -> None:
        results.append(
            await who.ok("set-claim", {"channel": "general", "numbers": [1], "claimed": True})
        )

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            for who in contenders:
                nursery.start_soon(claim, who)
    winners = {t["assignee"] for r in results for t in r["tasks"]}  # type: ignore[attr-defined]
    assert len(winners) == 1
    assert sum(1 for r in results if r["changed"]) == 1
