"""Model input: refused enum values name the accepted ones; defaults written out fold away."""

from __future__ import annotations

from typing import Any

import pytest

from agentteam_task_bridge.bridge._compat import translate_arguments
from agentteam_task_bridge.bridge._errors import ToolError
from agentteam_task_bridge.bridge._registry import REGISTRY, TOOLS
from agentteam_task_bridge.bridge._validate import canonical_arguments, validate
from tools.contract_lint import walk_properties

from .bridge_harness import BridgeSession

LOCATOR = {"channel": "general", "number": 1}
# Every enum of every input schema: (tool, path) -> arguments holding "bogus" at that path.
ENUM_CASES: dict[tuple[str, str], dict[str, Any]] = {
    ("task_list", "$.status"): {"channel": "general", "status": "bogus"},
    ("task_list", "$.sort"): {"channel": "general", "sort": "bogus"},
    ("task_list", "$.filters.priority"): {"channel": "general", "filters": {"priority": "bogus"}},
    ("task_create", "$.tasks[].priority"): {
        "channel": "general",
        "tasks": [{"title": "t", "priority": "bogus"}],
    },
    ("task_create", "$.tasks[].status"): {
        "channel": "general",
        "tasks": [{"title": "t", "status": "bogus"}],
    },
    ("task_create", "$.parent_task_scope.kind"): {
        "tasks": [{"title": "t"}],
        "parent_task_scope": {"kind": "bogus", "scope_id": "tsk_1"},
    },
    ("task_update", "$.patch.status"): {**LOCATOR, "patch": {"status": "bogus"}},
    ("task_update", "$.patch.priority"): {**LOCATOR, "patch": {"priority": "bogus"}},
    ("task_delete", "$.subtask_mode"): {**LOCATOR, "subtask_mode": "bogus"},
}


def _enums() -> dict[tuple[str, str], tuple[list[str], bool]]:
    found = {}
    for spec in REGISTRY:
        schema = spec.tool.input_schema
        for path, _, prop in walk_properties(schema):
            branches = [prop, *prop.get("anyOf", [])]
            values = next((b["enum"] for b in branches if "enum" in b), None)
            if values is not None:
                nullable = any(b.get("type") == "null" for b in branches)
                found[(spec.name, path)] = (values, nullable)
    return found


def test_the_table_covers_every_enum_of_every_input_schema() -> None:
    assert set(ENUM_CASES) == set(_enums())


@pytest.mark.parametrize(("where", "args"), ENUM_CASES.items(), ids=lambda v: str(v))
def test_a_refused_enum_value_lists_the_accepted_values(
    where: tuple[str, str], args: dict[str, Any]
) -> None:
    tool, path = where
    values, nullable = _enums()[where]
    with pytest.raises(ToolError) as refused:
        validate(TOOLS[tool].input_type, args)
    error = refused.value
    assert error.code == "invalid_arguments"
    assert error.field_errors is not None
    (at, reason), *_ = error.field_errors.items()
    assert at == path.replace("[]", "[0]")
    assert "'bogus' is not an accepted value" in reason
    for value in values:
        assert f"`{value}`" in reason
    assert ("null" in reason) is nullable
    assert reason in error.message


def test_a_wrong_type_at_an_enum_lists_the_values_too() -> None:
    with pytest.raises(ToolError) as refused:
        validate(TOOLS["task_list"].input_type, {"channel": "general", "status": 5})
    assert refused.value.field_errors == {
        "$.status": "Expected `str | null`, got `int`; use one of "
        "`all`, `canceled`, `done`, `in_progress`, `in_review`, `open`, `todo`, or null"
    }


def test_a_long_refused_value_is_echoed_cut() -> None:
    with pytest.raises(ToolError) as refused:
        validate(TOOLS["task_delete"].input_type, {**LOCATOR, "subtask_mode": "漢" * 5000})
    assert refused.value.field_errors is not None
    assert len(refused.value.field_errors["$.subtask_mode"]) < 120


def test_every_enum_states_its_default_and_what_an_unknown_value_does() -> None:
    for spec in REGISTRY:
        for path, _, prop in walk_properties(spec.tool.input_schema):
            if any("enum" in b for b in [prop, *prop.get("anyOf", [])]):
                text = prop.get("description", "")
                assert "Default" in text or "required" in text, (spec.name, path)
                assert "unknown value is refused" in text, (spec.name, path)


# --- one request, however its defaults are spelled ------------------------------------------

FOLDED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "task_create",
        {
            "channel": "general",
            "tasks": [
                {
                    "title": "t",
                    "description": "",
                    "labels": [],
                    "status": "todo",
                    "checklist": [{"text": "c", "done": False}],
                    "urls": [],
                }
            ],
        },
        {"channel": "general", "tasks": [{"title": "t", "checklist": [{"text": "c"}]}]},
    ),
    (
        "task_create",
        {"channel": "general", "tasks": [{"title": "a", "status": "todo"}, {"title": "b"}]},
        {"channel": "general", "tasks": [{"title": "a"}, {"title": "b"}]},
    ),
    (
        "task_list",
        {
            "channel": "general",
            "query": "  ",
            "status": "open",
            "include_subtasks": False,
            "limit": 20,
            "sort": "number",
            "filters": {},
        },
        {"channel": "general"},
    ),
    (
        "task_list",
        {"channel": "general", "query": "login", "sort": "relevance"},
        {"channel": "general", "query": "login"},
    ),
]


@pytest.mark.parametrize(("tool", "spelled", "plain"), FOLDED)
def test_defaults_written_out_are_the_same_canonical_request(
    tool: str, spelled: dict[str, Any], plain: dict[str, Any]
) -> None:
    input_type = TOOLS[tool].input_type
    assert canonical_arguments(validate(input_type, spelled)) == canonical_arguments(
        validate(input_type, plain)
    )


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("task_create", {"channel": "general", "tasks": [{"title": "t", "status": "done"}]}),
        ("task_create", {"channel": "general", "tasks": [{"title": "t", "description": " "}]}),
        ("task_list", {"channel": "general", "sort": "updated"}),
        ("task_list", {"channel": "general", "query": "x", "sort": "number"}),
        ("task_list", {"channel": "general", "limit": 21}),
        ("task_update", {**LOCATOR, "patch": {"status": "todo"}}),
    ],
)
def test_a_value_other_than_the_default_is_kept(tool: str, args: dict[str, Any]) -> None:
    assert canonical_arguments(validate(TOOLS[tool].input_type, args)) == args


async def test_a_refused_status_names_the_lifecycle_through_the_bridge(
    bridge: BridgeSession,
) -> None:
    error = await bridge.fails(
        "task_create",
        {"channel": "general", "tasks": [{"title": "t", "status": "blocked"}]},
        code="invalid_arguments",
    )
    assert error["field_errors"] == {
        "$.tasks[0].status": "'blocked' is not an accepted value; use one of "
        "`canceled`, `done`, `in_progress`, `in_review`, `todo`, or null"
    }
    assert error["retryable"] is False
    assert bridge.runtime is not None and bridge.runtime.store.stats()["tasks"] == 0


# --- task_update's thread, messages and workspaces --------------------------------------------


@pytest.mark.parametrize(
    "patch",
    [
        {"thread": "#general"},
        {"thread": "#general:th_1"},
        {"thread": None},
        {"messages": []},
        {"messages": [f"#general:m{i}" for i in range(20)]},
        {"workspaces": []},
        {"workspaces": ["😀" * 200] * 10},
        {"workspaces": ["~/src/api", "github.com/acme/api@fix-login"]},
    ],
)
def test_patch_links_within_bounds_are_accepted(patch: dict[str, Any]) -> None:
    value = validate(TOOLS["task_update"].input_type, {**LOCATOR, "patch": patch})
    assert canonical_arguments(value)["patch"] == patch


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"thread": "general"}, "$.patch.thread"),
        ({"thread": "#"}, "$.patch.thread"),
        ({"messages": None}, "$.patch.messages"),
        ({"messages": ["#general"]}, "$.patch.messages[0]"),
        ({"messages": [f"#general:m{i}" for i in range(21)]}, "$.patch.messages"),
        ({"workspaces": None}, "$.patch.workspaces"),
        ({"workspaces": [""]}, "$.patch.workspaces[0]"),
        ({"workspaces": ["😀" * 201]}, "$.patch.workspaces[0]"),
        ({"workspaces": ["a\nb"]}, "$.patch.workspaces[0]"),
        ({"workspaces": ["w "]}, "$.patch.workspaces[0]"),
        ({"workspaces": ["w"] * 11}, "$.patch.workspaces"),
    ],
)
def test_patch_links_out_of_bounds_are_refused(patch: dict[str, Any], path: str) -> None:
    with pytest.raises(ToolError) as refused:
        validate(TOOLS["task_update"].input_type, {**LOCATOR, "patch": patch})
    assert refused.value.field_errors is not None and path in refused.value.field_errors


@pytest.mark.parametrize("name", ["thread", "messages", "workspaces"])
def test_the_new_patch_fields_have_no_old_flat_spelling(name: str) -> None:
    translated, uses = translate_arguments("task_update", {**LOCATOR, name: []})
    assert uses == []
    with pytest.raises(ToolError) as refused:
        validate(TOOLS["task_update"].input_type, translated)
    assert refused.value.field_errors == {f"$.{name}": "unknown field"}


# --- one meaning for "" per field (issue 28, X4) -------------------------------------------


async def test_an_empty_description_means_none_in_create_and_update_alike(
    bridge: BridgeSession,
) -> None:
    made = await bridge.ok(
        "task_create", {"channel": "general", "tasks": [{"title": "a", "description": ""}]}
    )
    number = made["data"]["tasks"][0]["number"]
    locator = {"channel": "general", "number": number}
    created = await bridge.ok("task_get", locator)
    assert created["data"]["task"]["description"] is None
    await bridge.ok("task_update", {**locator, "patch": {"description": "words"}})
    await bridge.ok("task_update", {**locator, "patch": {"description": ""}})
    updated = await bridge.ok("task_get", locator)
    assert updated["data"]["task"]["description"] is None  # as null would: cleared


def test_an_empty_description_is_one_request_with_null_and_with_none() -> None:
    def canonical(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return canonical_arguments(validate(TOOLS[tool].input_type, args))

    update = {**LOCATOR, "patch": {"description": ""}}
    assert canonical("task_update", update) == canonical(
        "task_update", {**LOCATOR, "patch": {"description": None}}
    )
    create = {"channel": "general", "tasks": [{"title": "t", "description": ""}]}
    assert canonical("task_create", create) == canonical(
        "task_create", {"channel": "general", "tasks": [{"title": "t"}]}
    )


@pytest.mark.parametrize("title", [" ", "   ", "\t\n", "\u3000", "\u00a0 "])
def test_a_title_of_only_whitespace_is_refused_in_create_and_update(title: str) -> None:
    cases = [
        ("task_create", {"channel": "general", "tasks": [{"title": title}]}, "$.tasks[0].title"),
        (
            "task_create",
            {"channel": "general", "tasks": [{"title": "ok"}, {"title": title}]},
            "$.tasks[1].title",
        ),
        ("task_update", {**LOCATOR, "patch": {"title": title}}, "$.patch.title"),
    ]
    for tool, args, path in cases:
        with pytest.raises(ToolError) as refused:
            validate(TOOLS[tool].input_type, args)
        assert refused.value.code == "invalid_arguments"
        assert refused.value.field_errors == {path: "must not be blank"}


def _with_nulls(schema: dict[str, Any], args: dict[str, Any], skip: str = "patch") -> Any:
    """`args` as a strict-mode client sends them: null in every optional property left out, at
    every depth (a patch's fields excepted: null clears there)."""
    out = dict(args)
    for name, prop in schema.get("properties", {}).items():
        branch = next((b for b in [prop, *prop.get("anyOf", [])] if b.get("type") != "null"), prop)
        if name not in out:
            out[name] = None
        elif name != skip and branch.get("type") == "object":
            out[name] = _with_nulls(branch, out[name])
        elif branch.get("type") == "array" and branch["items"].get("type") == "object":
            out[name] = [_with_nulls(branch["items"], item) for item in out[name]]
    return out


STRICT_BASES: dict[str, dict[str, Any]] = {
    "task_list": {"channel": "general", "filters": {}},
    "task_get": LOCATOR,
    "task_create": {"channel": "general", "tasks": [{"title": "t", "checklist": [{"text": "c"}]}]},
    "task_update": {**LOCATOR, "patch": {"status": "done", "priority": None}},
    "task_set_claim": {"channel": "general", "numbers": [1], "claimed": True},
    "task_checkpoint": {**LOCATOR, "summary": "s"},
    "task_delete": LOCATOR,
}


@pytest.mark.parametrize("tool", sorted(STRICT_BASES))
def test_null_in_an_optional_field_is_the_field_left_out(tool: str) -> None:
    """What OpenAI strict mode makes a model send is one canonical request (one idempotency
    digest, one cursor binding) with the same call without the nulls; a patch keeps its null."""
    assert set(STRICT_BASES) == set(TOOLS)
    spec = TOOLS[tool]
    base = STRICT_BASES[tool]
    strict = _with_nulls(spec.tool.input_schema, base)
    if tool not in ("task_get", "task_set_claim", "task_checkpoint"):
        assert strict != base  # the case sends at least one null
    assert canonical_arguments(validate(spec.input_type, strict)) == canonical_arguments(
        validate(spec.input_type, base)
    )
    if tool == "task_update":
        assert canonical_arguments(validate(spec.input_type, strict))["patch"]["priority"] is None
