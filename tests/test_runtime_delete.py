"""task_delete: creator-only, subtask modes, atomic recursive deletion, tombstones."""

from __future__ import annotations

from agentteam_task_bridge.runtime import OTHER_AGENT_ID

from .conftest import Api


async def test_a_leaf_needs_no_subtask_mode(api: Api) -> None:
    await api.create("general", "leaf")
    result = await api.ok("delete", {"channel": "general", "number": 1})
    assert result == {"channel": "general", "deleted": [1], "promoted": []}
    assert api.runtime.store.stats()["tombstones"] == 1
    await api.fails("get", {"channel": "general", "number": 1}, expect=404, code="task_deleted")


async def test_only_the_creator_deletes(api: Api) -> None:
    await api.as_agent(OTHER_AGENT_ID).create("general", "theirs")
    await api.fails("delete", {"channel": "general", "number": 1}, expect=403, code="not_creator")


async def test_a_parent_needs_a_subtask_mode(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", "c1", "c2", parent=1)
    error = await api.fails(
        "delete", {"channel": "general", "number": 1}, expect=422, code="subtask_mode_required"
    )
    assert "$.subtaskMode" in error["fieldErrors"]
    await api.fails(
        "delete",
        {"channel": "general", "number": 1, "subtaskMode": "orphan"},
        expect=422,
        code="validation_failed",
    )


async def test_promote_keeps_the_children_one_level_up(api: Api) -> None:
    await api.create("general", "grandparent")
    await api.create("general", "parent", parent=1)
    await api.create("general", "c1", "c2", parent=2)
    result = await api.ok("delete", {"channel": "general", "number": 2, "subtaskMode": "promote"})
    assert result == {"channel": "general", "deleted": [2], "promoted": [3, 4]}
    child = (await api.ok("get", {"channel": "general", "number": 3}))["task"]
    assert child["parent"] == 1


async def test_delete_mode_removes_the_whole_subtree(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", "c1", parent=1)
    await api.create("general", "g1", parent=2)
    result = await api.ok("delete", {"channel": "general", "number": 1, "subtaskMode": "delete"})
    assert result["deleted"] == [1, 2, 3]
    assert api.runtime.store.stats()["tombstones"] == 3


async def test_recursive_delete_needs_one_creator_and_is_atomic(api: Api) -> None:
    await api.create("general", "parent")
    await api.create("general", "mine", parent=1)
    await api.as_agent(OTHER_AGENT_ID).create("general", "theirs", parent=2)
    error = await api.fails(
        "delete",
        {"channel": "general", "number": 1, "subtaskMode": "delete"},
        expect=403,
        code="descendant_not_owned",
    )
    assert error["details"]["numbers"] == [3]
    assert api.runtime.store.stats()["tombstones"] == 0
    listed = await api.ok("list", channel="general", includeSubtasks="true")
    assert [t["number"] for t in listed["items"]] == [1, 2, 3]
