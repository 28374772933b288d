"""Contract lint: the twelve checks of contract section 12 (and a few more) over the registry.

Run `python -m tools.contract_lint`; it exits 1 and names the rule, tool and field of every
violation. Each rule is a function of a `Surface` (the surfaces built from the registry), so a
test can feed it a deliberately broken surface and see that rule fail.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

import journal
from bridge import (
    ARGUMENT_ALIASES,
    BUDGET_BYTES,
    INSTRUCTIONS,
    REGISTRY,
    TOOL_MIGRATIONS,
    ArgumentAlias,
    PageState,
    ToolMigration,
    describe,
    keeps_identities,
)

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
PREFERRED_VERBS = ("get", "list", "search", "create", "create_batch", "update", "delete")
# Precise domain verbs allowed beside the preferred ones (contract 3.1, "or a precise domain verb").
DOMAIN_VERBS = ("checkpoint",)
TRANSPORT_WORDS = frozenset(
    {
        "http",
        "https",
        "mcp",
        "rpc",
        "api",
        "exec",
        "cli",
        "handler",
        "endpoint",
        "v1",
        "v2",
        "v3",
        "openai",
        "anthropic",
        "claude",
        "cursor",
        "provider",
        "runtime",
        "desktop",
    }
)
# Compact-JSON UTF-8 bytes of what a model sees of each tool (name, title, description,
# inputSchema, annotations): a deterministic regression guard of persistent context (10.1).
DEFINITION_BUDGET_BYTES = {
    "task_list": 2600,
    "task_get": 900,
    "task_create": 3900,
    "task_update": 4600,
    "task_set_claim": 1300,
    "task_checkpoint": 1200,
    "task_delete": 1200,
}
PAGINATION_FORBIDDEN = frozenset(
    {"page", "page_number", "offset", "has_more", "nextCursor", "next_page", "page_size", "hasMore"}
)
# Contract 13.2's stable profile fields of task_update (option refs: labels and priority).
PROFILE_FIELDS = frozenset(
    {
        "title",
        "description",
        "labels",
        "priority",
        "assignee",
        "checklist",
        "messages",
        "urls",
        "workspaces",
        "attachments",
        "blocker",
        "thread",
        "parent",
        "status",
    }
)
# Declared idempotency kinds (`ToolSpec.idempotency`, before the colon) that repeat harmlessly.
IDEMPOTENT_KINDS = frozenset({"natural", "desired_state"})
NEGATIVE_BOOL = re.compile(r"^(no|not|disable|disabled|skip|without)_")


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


def _schema_type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "enum"
    if "anyOf" in prop:
        kinds = sorted({_schema_type(b) for b in prop["anyOf"] if b.get("type") != "null"})
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


# --- the twelve checks of section 12 ------------------------------------------------------


def rule_naming(s: Surface) -> Iterator[Violation]:
    """1. raw names follow `<domain>_<verb>` / `<domain>_<resource>_<verb>`."""
    domains = {t.metadata.get("owner") for t in s.tools}
    for t in s.tools:
        if not SNAKE.match(t.name) or not t.name.isascii():
            yield Violation("naming", t.name, "", "not lowercase ASCII snake_case")
            continue
        words = t.name.split("_")
        if words[0] not in domains:
            yield Violation("naming", t.name, "", f"domain `{words[0]}` first is not an owner")
        verb = "_".join(words[1:])
        if not (
            verb in PREFERRED_VERBS
            or verb in DOMAIN_VERBS
            or verb.startswith("set_")
            or words[-1] in PREFERRED_VERBS
        ):
            yield Violation(
                "naming",
                t.name,
                "",
                f"`{verb}` is not a preferred verb, set_*, or a declared domain verb",
            )
        for word in words:
            if word in TRANSPORT_WORDS:
                yield Violation("naming", t.name, "", f"encodes transport/provider word `{word}`")


def rule_snake_case_fields(s: Surface) -> Iterator[Violation]:
    """2. every field the model writes or reads is snake_case, at every depth, in and out."""
    for t in s.tools:
        for side, schema in (("input", t.input_schema), ("output", t.output_schema)):
            for path, name, _ in walk_properties(schema):
                if not SNAKE.match(name):
                    yield Violation(
                        "snake_case_fields", t.name, path, f"{side} field is not snake_case"
                    )


def rule_no_deprecated_alias(s: Surface) -> Iterator[Violation]:
    """3. no deprecated alias appears in the default schema, in tools/list or in any text."""
    olds = {a.old for a in s.argument_aliases if not a.tools}
    old_names = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(s.tool_migrations))) + r")\b")
    for where, field_path, text in texts(s):
        for name in sorted(set(old_names.findall(text))) if s.tool_migrations else ():
            yield Violation(
                "no_deprecated_alias", where, field_path, f"names the old tool `{name}`"
            )
    for t in s.tools:
        if t.name in s.tool_migrations:
            yield Violation("no_deprecated_alias", t.name, "", "an old tool name is listed")
        flat = {a.old for a in s.argument_aliases if t.name in a.tools}
        for path, name, _ in walk_properties(t.input_schema):
            if name in olds or (path.count(".") == 1 and name in flat):
                yield Violation("no_deprecated_alias", t.name, path, "a deprecated spelling")


def rule_parameters_agree(s: Surface) -> Iterator[Violation]:
    """4. the MCP schema and the Agent Tool parameters agree on requiredness and types."""
    for t in s.tools:
        props = t.input_schema.get("properties", {})
        required = set(t.input_schema.get("required", []))
        if set(props) != set(t.parameters):
            yield Violation(
                "parameters_agree",
                t.name,
                "",
                f"MCP properties {sorted(props)} differ from parameters {sorted(t.parameters)}",
            )
        for name, (kind, needed) in t.parameters.items():
            if name not in props:
                continue
            if (name in required) != needed:
                yield Violation("parameters_agree", t.name, f"$.{name}", "requiredness differs")
            if _schema_type(props[name]) != kind:
                yield Violation(
                    "parameters_agree",
                    t.name,
                    f"$.{name}",
                    f"type {_schema_type(props[name])} differs from {kind}",
                )


def rule_annotations(s: Surface) -> Iterator[Violation]:
    """5. annotations agree with the permission class and read-only/destructive metadata."""
    for t in s.tools:
        m, a = t.metadata, t.annotations
        read_only = m["permission_class"] == "read_only"
        destructive = m["permission_class"] == "destructive_mutation"
        checks = (
            ("readOnlyHint", read_only, m["read_only"]),
            ("destructiveHint", destructive, m["destructive"]),
        )
        for hint, expected, declared in checks:
            if a.get(hint) is not expected or declared is not expected:
                yield Violation(
                    "annotations", t.name, hint, f"must be {expected} for {m['permission_class']}"
                )
        if read_only and a.get("idempotentHint") is not True:
            yield Violation("annotations", t.name, "idempotentHint", "reads are idempotent")
        # The kind before the colon of the declared idempotency: only a natural or desired-state
        # operation repeats harmlessly. An append-only one (`none`) or one that is idempotent
        # only with a key (`key`) must not tell a client that blind retries are safe.
        kind = str(m.get("idempotency") or "").partition(":")[0].strip()
        if a.get("idempotentHint") is True and kind not in IDEMPOTENT_KINDS:
            yield Violation(
                "annotations",
                t.name,
                "idempotentHint",
                f"true, but the declared idempotency is `{kind or 'missing'}`",
            )


def rule_no_hidden_context(s: Surface) -> Iterator[Violation]:
    """6. no hidden-context field appears in any model input schema."""
    for t in s.tools:
        for path, name, _ in walk_properties(t.input_schema):
            if journal.is_hidden_name(name):
                yield Violation("no_hidden_context", t.name, path, "hidden context as input")


def rule_pagination(s: Surface) -> Iterator[Violation]:
    """7. list/search pagination is `limit` + `cursor` in, `next_cursor` out, nothing else."""
    for t in s.tools:
        paged = t.name.endswith(("_list", "_search"))
        names_in = set(t.input_schema.get("properties", {}))
        names_out = {name for _, name, _ in walk_properties(t.output_schema)}
        for name in (names_in | names_out) & PAGINATION_FORBIDDEN:
            yield Violation("pagination", t.name, name, "use limit/cursor/next_cursor only")
        if paged:
            for name in ("limit", "cursor"):
                if name not in names_in:
                    yield Violation("pagination", t.name, name, "a list tool takes it")
            meta = t.output_schema.get("properties", {}).get("meta", {})
            if "next_cursor" not in meta.get("properties", {}):
                yield Violation("pagination", t.name, "meta.next_cursor", "a list tool answers it")


def rule_mutation_semantics(s: Surface) -> Iterator[Violation]:
    """8. every mutation declares idempotency and concurrency behaviour."""
    for t in s.tools:
        if t.metadata["permission_class"] == "read_only":
            continue
        for key in ("idempotency", "concurrency"):
            if not str(t.metadata.get(key) or "").strip():
                yield Violation("mutation_semantics", t.name, key, "not declared")


def rule_owner_and_exposure(s: Surface) -> Iterator[Violation]:
    """9. every tool is classified by owner and exposure policy."""
    for t in s.tools:
        for key in ("owner", "exposure"):
            if not t.metadata.get(key):
                yield Violation("owner_and_exposure", t.name, key, "missing")


def rule_visible_references(s: Surface) -> Iterator[Violation]:
    """10. instructions, tool and field descriptions reference only tools visible in the session."""
    visible = {t.name for t in s.tools}
    prefixes = sorted({t.metadata["owner"] for t in s.tools} | {"list", "get", "create", "update"})
    pattern = re.compile(r"\b(?:" + "|".join(prefixes) + r")_[a-z_]+\b")
    for where, field_path, text in texts(s):
        for name in sorted(set(pattern.findall(text)) - visible):
            yield Violation("visible_references", where, field_path, f"references `{name}`")


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


def rule_result_budgets(s: Surface) -> Iterator[Violation]:
    """11. each tool's worst-case result (4-byte text at every bound) fits its byte budget."""
    for t in s.tools:
        budget = t.metadata["budget_class"]
        limit = s.budgets.get(budget)
        if limit is None:
            yield Violation("result_budgets", t.name, "budget_class", f"unknown class {budget}")
            continue
        data = msgspec.to_builtins(worst_case(t.data_type))
        state = PageState(None, 0, "digest") if budget == "collection" else None
        # Only a collection has a continuation for the items it leaves out.
        if "items" in data and budget != "collection":
            yield Violation("result_budgets", t.name, "", "a page needs the collection budget")
        if not keeps_identities(t.name, limit, {"data": data}, state):
            reason = f"worst case cannot keep its identities in {limit} bytes"
            yield Violation("result_budgets", t.name, "", reason)


def rule_definition_budgets(s: Surface) -> Iterator[Violation]:
    """11 and 10.1. what a model sees of each tool stays within its compact-JSON byte budget."""
    for t in s.tools:
        limit = s.definition_budgets.get(t.name)
        size = definition_bytes(t)
        if limit is None:
            yield Violation("definition_budgets", t.name, "", f"no budget ({size} bytes)")
        elif size > limit:
            yield Violation("definition_budgets", t.name, "", f"{size} bytes, over {limit}")


def definition_bytes(t: ToolSurface) -> int:
    """UTF-8 bytes of the compact JSON of the tool as tools/list shows it to a model."""
    visible = {
        "name": t.name,
        "title": t.annotations.get("title"),
        "description": t.description,
        "inputSchema": t.input_schema,
        "annotations": t.annotations,
    }
    return len(msgspec.json.encode(visible))


def rule_migrations(s: Surface) -> Iterator[Violation]:
    """12. every old name has a migration mapping or a removal decision."""
    visible = {t.name for t in s.tools}
    for old, m in s.tool_migrations.items():
        if m.tool not in visible:
            yield Violation("migrations", old, "", f"maps to unknown tool `{m.tool}`")
        if not m.removal_gate:
            yield Violation("migrations", old, "", "no removal gate")
    for alias in s.argument_aliases:
        if not alias.canonical or not alias.removal_gate:
            yield Violation("migrations", alias.old, "", "no mapping or removal gate")
        tools = [s.tool(n) for n in alias.tools if n in visible] or list(s.tools)
        if not any(_has_path(t.input_schema, alias.canonical) for t in tools):
            yield Violation("migrations", alias.old, "", f"`{alias.canonical}` is in no schema")


# --- the further checks of the issue ------------------------------------------------------


def rule_flat_roots(s: Surface) -> Iterator[Violation]:
    """Root schemas are closed objects without top-level oneOf/anyOf/allOf."""
    for t in s.tools:
        root = t.input_schema
        if root.get("type") != "object" or root.get("additionalProperties") is not False:
            yield Violation("flat_roots", t.name, "$", "root must be a closed object")
        for key in ("oneOf", "anyOf", "allOf"):
            if key in root:
                yield Violation("flat_roots", t.name, "$", f"top-level {key}")


def rule_field_forms(s: Surface) -> Iterator[Violation]:
    """`*_id` opaque, times `_at`/`_seconds`, booleans named for their true state."""
    for t in s.tools:
        for path, name, prop in walk_properties(t.input_schema):
            kind = _schema_type(prop)
            text = str(prop.get("description", "")).lower()
            if name.endswith("_id") and (
                kind != "string"
                or any(w in text for w in ("name", "handle", "alias", "url", "number"))
            ):
                yield Violation("field_forms", t.name, path, "`*_id` must be one opaque id")
            if ("rfc3339" in text or prop.get("format") == "date-time") and not name.endswith(
                "_at"
            ):
                yield Violation("field_forms", t.name, path, "timestamps end in `_at`")
            if name.endswith("_at") and kind != "string":
                yield Violation("field_forms", t.name, path, "`_at` fields are RFC3339 strings")
            if (
                ("duration" in text or "seconds" in text)
                and kind == "integer"
                and not name.endswith("_seconds")
            ):
                yield Violation("field_forms", t.name, path, "durations end in `_seconds`")
            if kind == "boolean" and NEGATIVE_BOOL.match(name):
                yield Violation("field_forms", t.name, path, "name the true state")


def rule_profile_fields(s: Surface) -> Iterator[Violation]:
    """13.2: task_update's patch carries every stable profile field the contract names."""
    names = {t.name for t in s.tools}
    if "task_update" not in names:
        return
    patch = s.tool("task_update").input_schema.get("properties", {}).get("patch", {})
    for name in PROFILE_FIELDS - set(patch.get("properties", {})):
        yield Violation(
            "profile_fields", "task_update", f"$.patch.{name}", "missing from the patch"
        )


def rule_documented_defaults(s: Surface) -> Iterator[Violation]:
    """Every optional root field states its default; every enum, at any depth, its default and
    what an unknown or future value does (contract 4.2 and 4.4)."""
    for t in s.tools:
        root = t.input_schema
        required = set(root.get("required", []))
        for name, prop in root.get("properties", {}).items():
            text = str(prop.get("description", ""))
            if not text:
                yield Violation("documented_defaults", t.name, f"$.{name}", "no description")
            elif name not in required and "default" not in text.lower():
                yield Violation("documented_defaults", t.name, f"$.{name}", "states no default")
        for path, _, prop in walk_properties(root):
            if not any("enum" in b for b in [prop, *prop.get("anyOf", [])]):
                continue
            text = str(prop.get("description", "")).lower()
            if "default" not in text and "required" not in text:
                yield Violation("documented_defaults", t.name, path, "enum states no default")
            if "unknown value" not in text:
                yield Violation(
                    "documented_defaults", t.name, path, "enum says not what an unknown value does"
                )


RULES: tuple[Callable[[Surface], Iterator[Violation]], ...] = (
    rule_naming,
    rule_snake_case_fields,
    rule_no_deprecated_alias,
    rule_parameters_agree,
    rule_annotations,
    rule_no_hidden_context,
    rule_pagination,
    rule_mutation_semantics,
    rule_owner_and_exposure,
    rule_visible_references,
    rule_result_budgets,
    rule_definition_budgets,
    rule_migrations,
    rule_flat_roots,
    rule_field_forms,
    rule_documented_defaults,
    rule_profile_fields,
)


def lint(surface: Surface) -> list[Violation]:
    return [v for rule in RULES for v in rule(surface)]


def _has_path(schema: dict[str, Any], dotted: str) -> bool:
    node: dict[str, Any] = schema
    for part in dotted.split("."):
        props = node.get("properties", {})
        if part in props:
            node = props[part]
            continue
        found = next((p for _, n, p in walk_properties(node) if n == part), None)
        if found is None:
            return False
        node = found
    return True


# Worst-case sizes from the input bounds the runtime and the bridge enforce, in characters.
_WORST_STRINGS = {
    "title": 200,
    "description": 10_000,
    "summary": 4000,
    "blocker": 500,
    "text": 500,
    "message": 500,
    "name": 200,
    "media_type": 100,
    "label": 50,
    "url": 2048,
    "workspace": 200,
    "message_ref": 200,
    "thread": 200,
    "scope_id": 20,
    "updated_at": 27,
    "created_at": 27,
}
# Strings whose pattern admits ASCII only (ids, slugs, handles, URLs, times, references): one
# byte a character. Every other string is free text, and its worst case is a 4-byte character
# (an emoji) at every position: maxLength characters are 4 * maxLength UTF-8 bytes.
_ASCII_STRINGS = frozenset(
    {
        "channel",
        "scope_id",
        "updated_at",
        "created_at",
        "url",
        "thread",
        "message_ref",
        "assignee",
        "creator",
        "author",
        "holder",
        "status",
        "priority",
        "code",
    }
)
WORST_CHAR = "\N{GRINNING FACE}"  # 4 UTF-8 bytes
_WORST_LISTS = {
    "items": 100,
    "tasks": 50,
    "labels": 20,
    "checklist": 50,
    "urls": 20,
    "attachments": 20,
    "messages": 20,
    "workspaces": 10,
    "failures": 50,
    "changed": 50,
    "unchanged": 50,
    "deleted": 200,
    "promoted": 200,
}
_ITEM_NAMES = {
    "labels": "label",
    "urls": "url",
    "workspaces": "workspace",
    "messages": "message_ref",
}


def worst_case(type_: Any, name: str = "", *, text: str = WORST_CHAR) -> Any:
    """The largest value, in UTF-8 bytes, of a data type that the bounded inputs allow: free
    text is `text` (by default a 4-byte character) at every position."""
    info = (
        msgspec.inspect.type_info(type_) if not isinstance(type_, msgspec.inspect.Type) else type_
    )
    if isinstance(info, msgspec.inspect.Metadata):
        return worst_case(info.type, name, text=text)
    if isinstance(info, msgspec.inspect.StructType):
        values = {f.name: worst_case(f.type, f.name, text=text) for f in info.fields}
        return info.cls(**values)
    if isinstance(info, msgspec.inspect.UnionType):
        options = [x for x in info.types if not isinstance(x, msgspec.inspect.NoneType)]
        return worst_case(options[0], name, text=text) if options else None
    if isinstance(info, msgspec.inspect.ListType):
        count = _WORST_LISTS.get(name, 20)
        item_name = _ITEM_NAMES.get(name, "")
        return [worst_case(info.item_type, item_name, text=text) for _ in range(count)]
    if isinstance(info, msgspec.inspect.StrType):
        size = _WORST_STRINGS.get(name, 64)
        return ("x" if name in _ASCII_STRINGS else text) * size
    if isinstance(info, msgspec.inspect.IntType):
        return 2**53
    if isinstance(info, msgspec.inspect.BoolType):
        return True
    if isinstance(info, msgspec.inspect.FloatType):
        return 1.0e300
    if isinstance(info, msgspec.inspect.DictType):
        return {}
    return None


def main(argv: list[str] | None = None) -> int:
    violations = lint(surface_from_registry())
    as_json = "--json" in (argv if argv is not None else sys.argv[1:])
    if as_json:
        print(json.dumps([v.__dict__ for v in violations], indent=2))
    else:
        for v in violations:
            print(v)
        print(
            f"contract lint: {len(RULES)} rules, {len(REGISTRY)} tools, "
            f"{len(violations)} violation(s)"
        )
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
