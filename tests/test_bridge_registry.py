"""The registry and the surfaces generated from it: names, schemas, annotations, budgets."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentteam_task_bridge.bridge._registry import INSTRUCTIONS, REGISTRY, TOOLS, mcp_tools
from agentteam_task_bridge.journal import is_hidden_name

_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def _wire(tool: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped


def _properties(schema: dict[str, Any], path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, prop in schema.get("properties", {}).items():
        found.append((f"{path}.{name}", prop))
        for branch in [prop, *prop.get("anyOf", []), prop.get("items", {})]:
            if isinstance(branch, dict) and "properties" in branch:
                found += _properties(branch, f"{path}.{name}")
            items = branch.get("items") if isinstance(branch, dict) else None
            if isinstance(items, dict) and "properties" in items:
                found += _properties(items, f"{path}.{name}[]")
    return found


def test_exactly_the_seven_canonical_tools_in_a_stable_order() -> None:
    assert list(TOOLS) == [
        "task_list",
        "task_get",
        "task_create",
        "task_update",
        "task_set_claim",
        "task_checkpoint",
        "task_delete",
    ]
    assert [t.name for t in mcp_tools()] == list(TOOLS)


def test_tools_list_bytes_are_deterministic() -> None:
    first = json.dumps([_wire(t) for t in mcp_tools()], sort_keys=False)
    import importlib

    from agentteam_task_bridge.bridge import _registry as registry

    importlib.reload(registry)
    assert json.dumps([_wire(t) for t in registry.mcp_tools()], sort_keys=False) == first


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_input_schema_is_flat_closed_and_self_contained(spec: Any) -> None:
    schema = spec.tool.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert not {"oneOf", "anyOf", "allOf", "$defs", "$ref"} & set(schema)
    assert "$ref" not in json.dumps(schema)


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_every_field_is_snake_case_documented_and_never_hidden_context(spec: Any) -> None:
    schema = spec.tool.input_schema
    for path, _prop in _properties(schema):
        name = path.rsplit(".", 1)[-1].rstrip("[]")
        assert _SNAKE.match(name), path
        assert not is_hidden_name(name), path
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
        if name not in schema.get("required", []):
            assert "Default" in prop["description"], f"{spec.name}.{name} states no default"


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_annotations_follow_the_permission_class(spec: Any) -> None:
    hints = spec.tool.annotations
    assert hints.read_only_hint is (spec.permission == "read_only")
    assert hints.destructive_hint is (spec.permission == "destructive_mutation")
    assert hints.open_world_hint is False
    assert hints.title == spec.title


def test_idempotent_hints_are_where_product_md_puts_them() -> None:
    assert TOOLS["task_create"].tool.annotations.idempotent_hint is False
    assert TOOLS["task_set_claim"].tool.annotations.idempotent_hint is True
    assert TOOLS["task_checkpoint"].tool.annotations.idempotent_hint is False


@pytest.mark.parametrize("spec", REGISTRY, ids=lambda s: s.name)
def test_output_schema_admits_data_meta_and_error(spec: Any) -> None:
    schema = spec.tool.output_schema
    assert schema["type"] == "object" and set(schema["properties"]) == {"data", "meta", "error"}
    assert "required" not in schema
    assert not {"oneOf", "anyOf", "allOf"} & set(schema)


def test_instructions_name_only_registered_tools() -> None:
    mentioned = set(re.findall(r"\btask_[a-z_]+\b", INSTRUCTIONS))
    described = {n for s in REGISTRY for n in re.findall(r"\btask_[a-z_]+\b", s.description)}
    assert mentioned | described <= set(TOOLS)
