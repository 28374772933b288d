"""The surfaces the contract lint reads: every tool as MCP, the Agent Tool API and the model see it.

:func:`surface_from_registry` builds a :class:`Surface` from ``bridge.REGISTRY``; a test changes
one tool of it (:meth:`Surface.with_tool`) to see a rule fail. :func:`walk_properties` and
:func:`texts` are how the rules walk schemas and the texts a model reads.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from agentteam_task_bridge.bridge import (
    ARGUMENT_ALIASES,
    BUDGET_BYTES,
    INSTRUCTIONS,
    REGISTRY,
    TOOL_MIGRATIONS,
    ArgumentAlias,
    ToolMigration,
    describe,
)

__all__ = [
    "DEFINITION_BUDGET_BYTES",
    "Surface",
    "ToolSurface",
    "Violation",
    "schema_type",
    "surface_from_registry",
    "texts",
    "walk_properties",
]

# Compact-JSON UTF-8 bytes of what a model sees of each tool (name, title, description,
# inputSchema, annotations): a deterministic regression guard of persistent context (10.1).
# task_create pays ~30 bytes a field for `null` as omitted (OpenAI strict mode, 13 fields).
DEFINITION_BUDGET_BYTES = {
    "task_list": 2600,
    "task_get": 1050,  # with its continuation `cursor`
    "task_create": 4200,
    "task_update": 4600,
    "task_set_claim": 1300,
    "task_checkpoint": 1200,
    "task_delete": 1200,
}


@dataclass(frozen=True)
class ToolSurface:
    """One tool as every surface sees it: MCP definition, metadata, typed parameters."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: dict[str, Any]
    metadata: dict[str, Any]
    parameters: dict[str, tuple[str, bool]]  # Agent Tool parameters: name -> (json type, required)
    data_type: type[msgspec.Struct]


@dataclass(frozen=True)
class Surface:
    tools: tuple[ToolSurface, ...]
    instructions: str
    tool_migrations: dict[str, ToolMigration]
    argument_aliases: tuple[ArgumentAlias, ...]
    budgets: dict[str, int] = field(default_factory=lambda: dict(BUDGET_BYTES))
    definition_budgets: dict[str, int] = field(
        default_factory=lambda: dict(DEFINITION_BUDGET_BYTES)
    )

    def tool(self, name: str) -> ToolSurface:
        return next(t for t in self.tools if t.name == name)

    def with_tool(self, tool_name: str, /, **changes: Any) -> Surface:
        """A copy with one tool changed (for tests of the rules)."""
        tools = tuple(replace(t, **changes) if t.name == tool_name else t for t in self.tools)
        return replace(self, tools=tools)


@dataclass(frozen=True)
class Violation:
    rule: str
    tool: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.tool}.{self.field}" if self.field else self.tool
        return f"[{self.rule}] {where}: {self.message}"


def surface_from_registry() -> Surface:
    tools = []
    for spec in REGISTRY:
        wire = spec.tool.model_dump(by_alias=True, exclude_none=True, mode="json")
        tools.append(
            ToolSurface(
                name=spec.name,
                description=spec.description,
                input_schema=copy.deepcopy(wire["inputSchema"]),
                output_schema=copy.deepcopy(wire["outputSchema"]),
                annotations=dict(wire["annotations"]),
                metadata=describe(spec),
                parameters=agent_tool_parameters(spec.input_type),
                data_type=spec.data_type,
            )
        )
    return Surface(tuple(tools), INSTRUCTIONS, dict(TOOL_MIGRATIONS), ARGUMENT_ALIASES)


def agent_tool_parameters(input_type: type[msgspec.Struct]) -> dict[str, tuple[str, bool]]:
    """The Agent Tool parameter list, read from the typed definition (not from the schema)."""
    info = msgspec.inspect.type_info(input_type)
    assert isinstance(info, msgspec.inspect.StructType)
    return {f.encode_name: (_json_type(f.type), f.required) for f in info.fields}


def _json_type(t: msgspec.inspect.Type) -> str:
    if isinstance(t, msgspec.inspect.Metadata):
        return _json_type(t.type)
    if isinstance(t, msgspec.inspect.UnionType):
        kinds = sorted(
            {_json_type(x) for x in t.types if not isinstance(x, msgspec.inspect.NoneType)}
        )
        return "|".join(kinds)
    return {
        msgspec.inspect.StrType: "string",
        msgspec.inspect.IntType: "integer",
        msgspec.inspect.BoolType: "boolean",
        msgspec.inspect.ListType: "array",
        msgspec.inspect.StructType: "object",
        msgspec.inspect.LiteralType: "enum",
        msgspec.inspect.FloatType: "number",
        msgspec.inspect.DictType: "object",
    }.get(type(t), "unknown")


def schema_type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "enum"
    if "anyOf" in prop:
        kinds = sorted({schema_type(b) for b in prop["anyOf"] if b.get("type") != "null"})
        return "|".join(kinds)
    return str(prop.get("type", "unknown"))


def walk_properties(
    schema: dict[str, Any], path: str = "$"
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, name, property) for every property at every depth."""
    for name, prop in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        yield here, name, prop
        for branch in [prop, *prop.get("anyOf", [])]:
            if not isinstance(branch, dict):
                continue
            if "properties" in branch:
                yield from walk_properties(branch, here)
            items = branch.get("items")
            if isinstance(items, dict) and "properties" in items:
                yield from walk_properties(items, here + "[]")


def texts(s: Surface) -> Iterator[tuple[str, str, str]]:
    """(tool or `instructions`, field path, text) for every text a model reads."""
    yield "instructions", "", s.instructions
    for t in s.tools:
        yield t.name, "", t.description
        for side, schema in (("$", t.input_schema), ("$out", t.output_schema)):
            for path, _, prop in walk_properties(schema, side):
                for branch in [prop, *prop.get("anyOf", [])]:
                    if isinstance(branch, dict) and isinstance(branch.get("description"), str):
                        yield t.name, path, branch["description"]
