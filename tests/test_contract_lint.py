"""The contract lint passes on the real registry and fails, rule by rule, on broken ones."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgspec
import pytest

from agentteam_task_bridge.bridge._compat import ArgumentAlias, ToolMigration
from agentteam_task_bridge.bridge._outputs import TaskGetData, TaskListData
from tools.contract_lint import (
    RULES,
    Surface,
    definition_bytes,
    lint,
    surface_from_registry,
    worst_case,
)

REAL = surface_from_registry()


def _schema(tool: str, edit: Callable[[dict[str, Any]], None]) -> Surface:
    schema = copy.deepcopy(REAL.tool(tool).input_schema)
    edit(schema)
    return REAL.with_tool(tool, input_schema=schema)


def _prop(
    name: str, prop: dict[str, Any], required: bool = False
) -> Callable[[dict[str, Any]], None]:
    def edit(schema: dict[str, Any]) -> None:
        schema["properties"][name] = prop
        if required:
            schema.setdefault("required", []).append(name)

    return edit


def _output(tool: str, edit: Callable[[dict[str, Any]], None]) -> Surface:
    schema = copy.deepcopy(REAL.tool(tool).output_schema)
    edit(schema)
    return REAL.with_tool(tool, output_schema=schema)


def _described(tool: str, path: tuple[str, ...], text: str) -> Surface:
    """A copy whose input field at `path` (property names) carries `text` in its description."""

    def edit(schema: dict[str, Any]) -> None:
        node = schema
        for name in path:
            node = node["properties"][name]
        node["description"] = node.get("description", "") + text

    return _schema(tool, edit)


def _hints(tool: str, **changes: Any) -> Surface:
    return REAL.with_tool(tool, annotations={**REAL.tool(tool).annotations, **changes})


def _reclassed(tool: str, permission: str) -> Surface:
    """`tool` declared `permission`, its annotations and metadata agreeing (rule 5 holds)."""
    read_only, destructive = permission == "read_only", permission == "destructive_mutation"
    return REAL.with_tool(
        tool,
        annotations={
            **REAL.tool(tool).annotations,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": True,
        },
        metadata={
            **REAL.tool(tool).metadata,
            "permission_class": permission,
            "read_only": read_only,
            "destructive": destructive,
        },
    )


def _meta(tool: str, **changes: Any) -> Surface:
    return REAL.with_tool(tool, metadata={**REAL.tool(tool).metadata, **changes})


def _renamed(new: str) -> Surface:
    return REAL.with_tool("task_get", name=new)


BROKEN: list[tuple[str, Surface]] = [
    ("naming", _renamed("getTask")),
    ("naming", _renamed("task_fetch")),
    ("naming", _renamed("task_http_get")),
    ("naming", _renamed("ticket_get")),
    (
        "snake_case_fields",
        _schema(
            "task_create",
            lambda s: s["properties"]["parent_task_scope"]["anyOf"][0]["properties"].__setitem__(
                "scopeRef", {"type": "string"}
            ),
        ),
    ),
    # A camelCase field the model reads in a result, not only one it writes.
    (
        "snake_case_fields",
        _output(
            "task_get",
            lambda s: s["properties"]["data"]["properties"]["task"]["properties"].__setitem__(
                "updatedAt", {"type": "string"}
            ),
        ),
    ),
    ("no_deprecated_alias", _schema("task_list", _prop("includeSubtasks", {"type": "boolean"}))),
    # An old tool name in a field description, at the root and nested, and in a tool description.
    ("no_deprecated_alias", _described("task_get", ("number",), " As in get_task.")),
    ("no_deprecated_alias", _described("task_update", ("patch", "status"), " See task_claim.")),
    (
        "no_deprecated_alias",
        REAL.with_tool(
            "task_list", description="Formerly task_search. " + REAL.tool("task_list").description
        ),
    ),
    ("no_deprecated_alias", _renamed("list_tasks")),
    ("parameters_agree", _schema("task_get", lambda s: s.__setitem__("required", ["channel"]))),
    (
        "parameters_agree",
        _schema("task_get", lambda s: s["properties"]["number"].__setitem__("type", "string")),
    ),
    (
        "annotations",
        REAL.with_tool(
            "task_delete",
            annotations={**REAL.tool("task_delete").annotations, "destructiveHint": False},
        ),
    ),
    (
        "annotations",
        REAL.with_tool(
            "task_list", annotations={**REAL.tool("task_list").annotations, "readOnlyHint": False}
        ),
    ),
    # The audit's seeded breakage: a delete re-classed as a plain agent_mutation, annotations and
    # metadata agreeing with that class; and a read classed as a mutation.
    ("class_fits_operation", _reclassed("task_delete", "agent_mutation")),
    ("class_fits_operation", _reclassed("task_get", "agent_mutation")),
    ("class_fits_operation", _reclassed("task_update", "read_only")),
    # google-genai refuses `examples`; an optional field strict mode forces with no null to send;
    # a root that is not one object (Anthropic).
    (
        "portability",
        _schema("task_get", lambda s: s["properties"]["channel"].__setitem__("examples", ["g"])),
    ),
    ("portability", _schema("task_get", _prop("verbose", {"type": "boolean"}))),
    ("portability", _schema("task_set_claim", lambda s: s.__setitem__("anyOf", [{}]))),
    # idempotentHint on the append-only checkpoint, and on a create idempotent only with a key.
    ("annotations", _hints("task_checkpoint", idempotentHint=True)),
    ("annotations", _hints("task_create", idempotentHint=True)),
    ("no_hidden_context", _schema("task_get", _prop("workspace_id", {"type": "string"}))),
    ("pagination", _schema("task_list", _prop("page", {"type": "integer"}))),
    ("pagination", _schema("task_list", lambda s: s["properties"].pop("cursor"))),
    ("mutation_semantics", _meta("task_update", concurrency="")),
    ("mutation_semantics", _meta("task_create", idempotency=None)),
    ("owner_and_exposure", _meta("task_get", owner="")),
    ("owner_and_exposure", _meta("task_get", exposure=None)),
    ("visible_references", replace(REAL, instructions=REAL.instructions + " See task_search.")),
    ("visible_references", REAL.with_tool("task_get", description="Prefer task_lookup.")),
    ("result_budgets", replace(REAL, budgets={**REAL.budgets, "detail": 1024})),
    ("visible_references", _described("task_create", ("tasks",), " Or use task_import.")),
    # Under 1 KiB not even a receipt's identities (numbers and 4-byte titles cut to a marker) fit.
    ("result_budgets", replace(REAL, budgets={**REAL.budgets, "receipt": 1024})),
    # 60 emoji more: 60 characters fit the budget, their 240 UTF-8 bytes do not.
    (
        "definition_budgets",
        REAL.with_tool("task_get", description=REAL.tool("task_get").description + "😀" * 60),
    ),
    ("definition_budgets", replace(REAL, definition_budgets={})),
    (
        "result_budgets",
        REAL.with_tool(
            "task_get",
            data_type=TaskListData,
            metadata={**REAL.tool("task_get").metadata, "budget_class": "receipt"},
        ),
    ),
    (
        "migrations",
        replace(
            REAL,
            tool_migrations={
                **REAL.tool_migrations,
                "old_get": ToolMigration("old_get", "task_fetch"),
            },
        ),
    ),
    (
        "migrations",
        replace(
            REAL,
            tool_migrations={
                **REAL.tool_migrations,
                "old_get": ToolMigration("old_get", "task_get", removal_gate=""),
            },
        ),
    ),
    (
        "migrations",
        replace(
            REAL, argument_aliases=(*REAL.argument_aliases, ArgumentAlias("taskNo", "task_no"))
        ),
    ),
    ("flat_roots", _schema("task_create", lambda s: s.__setitem__("anyOf", [{}]))),
    ("flat_roots", _schema("task_create", lambda s: s.pop("additionalProperties"))),
    (
        "field_forms",
        _schema(
            "task_get",
            _prop(
                "board_id", {"type": "string", "description": "Board id or name. Default: none."}
            ),
        ),
    ),
    (
        "field_forms",
        _schema(
            "task_get",
            _prop(
                "seen",
                {"type": "string", "description": "When you saw it, RFC3339. Default: none."},
            ),
        ),
    ),
    (
        "field_forms",
        _schema(
            "task_get",
            _prop("wait", {"type": "integer", "description": "Duration in seconds. Default: 0."}),
        ),
    ),
    (
        "field_forms",
        _schema(
            "task_get", _prop("no_children", {"type": "boolean", "description": "Default: false."})
        ),
    ),
    (
        "documented_defaults",
        _schema("task_get", _prop("verbose", {"type": "boolean", "description": "Say more."})),
    ),
    ("documented_defaults", _schema("task_get", _prop("detail", {"enum": ["a", "b"]}))),
    (
        "documented_defaults",
        _schema(
            "task_update",
            lambda s: s["properties"]["patch"]["properties"]["status"].__setitem__(
                "description", "New status. Default: unchanged."
            ),
        ),
    ),
    (
        "profile_fields",
        _schema("task_update", lambda s: s["properties"]["patch"]["properties"].pop("messages")),
    ),
]


def test_worst_case_text_is_four_bytes_a_character() -> None:
    data = msgspec.to_builtins(worst_case(TaskGetData))
    task = data["task"]
    assert len(task["description"]) == 10_000
    assert len(task["description"].encode()) == 40_000
    assert len(task["title"].encode()) == 800
    assert all(len(w.encode()) == 800 for w in task["workspaces"])
    # ASCII by pattern stays one byte a character: ids, slugs, times, URLs.
    assert task["channel"].isascii() and task["updated_at"].isascii()
    assert all(u.isascii() for u in task["urls"])


def test_the_emoji_description_fits_by_characters_but_not_by_bytes() -> None:
    tool = REAL.tool("task_get")
    assert definition_bytes(tool) + 60 <= REAL.definition_budgets["task_get"]


def test_the_real_registry_passes_every_rule() -> None:
    assert lint(REAL) == []


def test_every_rule_has_a_broken_registry_that_fails_it() -> None:
    assert {rule for rule, _ in BROKEN} == {r.__name__.removeprefix("rule_") for r in RULES}


@pytest.mark.parametrize(("rule", "surface"), BROKEN, ids=[r for r, _ in BROKEN])
def test_a_broken_registry_fails_its_rule(rule: str, surface: Surface) -> None:
    violations = lint(surface)
    assert rule in {v.rule for v in violations}, violations
    assert all(v.tool and v.message for v in violations)


def test_the_command_exits_zero_and_says_so() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.contract_lint"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
    assert "0 violation(s)" in done.stdout


# --- the lint command, as it runs, fails on each breakage ------------------------------------

# Each edits the real registry in place, then runs `python -m tools.contract_lint` as it is.
BREAKAGES = {
    "snake_case_fields": """
        task = TOOLS["task_get"].tool.output_schema["properties"]["data"]["properties"]["task"]
        task["properties"]["updatedAt"] = {"type": "string"}
    """,
    "annotations": """
        TOOLS["task_checkpoint"].tool.annotations.idempotent_hint = True
    """,
    "no_deprecated_alias": """
        prop = TOOLS["task_update"].tool.input_schema["properties"]["number"]
        prop["description"] += " As in get_task."
    """,
    # 60 emoji: 60 characters fit task_get's definition budget, their 240 UTF-8 bytes do not.
    "definition_budgets": """
        prop = TOOLS["task_get"].tool.input_schema["properties"]["number"]
        prop["description"] += "\\N{GRINNING FACE}" * 60
    """,
}


def _lint_command(edit: str) -> subprocess.CompletedProcess[str]:
    script = "from agentteam_task_bridge.bridge._registry import TOOLS\n" + textwrap.dedent(edit)
    script += "import runpy\nrunpy.run_module('tools.contract_lint', run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", script, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("rule", list(BREAKAGES))
def test_the_lint_command_fails_on_each_breakage(rule: str) -> None:
    done = _lint_command(BREAKAGES[rule])
    assert done.returncode == 1, done.stdout + done.stderr
    assert rule in {v["rule"] for v in json.loads(done.stdout)}, done.stdout


def test_the_lint_command_passes_unedited_through_the_same_path() -> None:
    done = _lint_command("")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []
