"""The twelve checks of contract section 12, each a function of a :class:`Surface`.

A rule yields a :class:`Violation` per broken point, naming the rule, the tool and the field;
the rules' numbers are the contract's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge import PageState, keeps_identities

from ._surface import Surface, ToolSurface, Violation, schema_type, texts, walk_properties
from ._worst_case import worst_case

__all__ = [
    "definition_bytes",
    "rule_annotations",
    "rule_class_fits_operation",
    "rule_definition_budgets",
    "rule_migrations",
    "rule_mutation_semantics",
    "rule_naming",
    "rule_no_deprecated_alias",
    "rule_no_hidden_context",
    "rule_owner_and_exposure",
    "rule_pagination",
    "rule_parameters_agree",
    "rule_result_budgets",
    "rule_snake_case_fields",
    "rule_visible_references",
]

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
PAGINATION_FORBIDDEN = frozenset(
    {"page", "page_number", "offset", "has_more", "nextCursor", "next_page", "page_size", "hasMore"}
)
# Declared idempotency kinds (`ToolSpec.idempotency`, before the colon) that repeat harmlessly.
IDEMPOTENT_KINDS = frozenset({"natural", "desired_state"})


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
            if schema_type(props[name]) != kind:
                yield Violation(
                    "parameters_agree",
                    t.name,
                    f"$.{name}",
                    f"type {schema_type(props[name])} differs from {kind}",
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


# The last route segment of an upstream operation that deletes or irreversibly changes data, and
# of one that only reads (a GET is a read whatever its route).
DESTRUCTIVE_VERBS = frozenset({"delete", "remove", "purge", "destroy", "erase", "archive"})
READ_VERBS = frozenset({"get", "list", "search", "read", "lookup"})


def expected_class(upstream: dict[str, Any]) -> str:
    """The permission class an upstream operation calls for, judged from the operation alone."""
    verb = str(upstream.get("route", "")).rstrip("/").rsplit("/", 1)[-1].lower()
    if verb in DESTRUCTIVE_VERBS or upstream.get("method") == "DELETE":
        return "destructive_mutation"
    if upstream.get("method") in ("GET", "HEAD") or verb in READ_VERBS:
        return "read_only"
    return "agent_mutation"


def rule_class_fits_operation(s: Surface) -> Iterator[Violation]:
    """5b. the declared permission class fits the upstream operation, not only the annotations:
    a delete is destructive, a read read-only, any other change at least an agent mutation."""
    for t in s.tools:
        declared = t.metadata["permission_class"]
        expected = expected_class(t.metadata["upstream"])
        fits = (
            declared == expected
            if expected != "agent_mutation"
            else declared in ("agent_mutation", "destructive_mutation")
        )
        if not fits:
            upstream = t.metadata["upstream"]
            yield Violation(
                "class_fits_operation",
                t.name,
                "permission_class",
                f"`{declared}` for {upstream['method']} {upstream['route']}, which calls for "
                f"`{expected}`",
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


def rule_result_budgets(s: Surface) -> Iterator[Violation]:
    """11. each tool's worst-case result (4-byte text at every bound) fits its byte budget."""
    for t in s.tools:
        budget = t.metadata["budget_class"]
        limit = s.budgets.get(budget)
        if limit is None:
            yield Violation("result_budgets", t.name, "budget_class", f"unknown class {budget}")
            continue
        data = msgspec.to_builtins(worst_case(t.data_type))
        state = PageState(None, "digest") if budget == "collection" else None
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
