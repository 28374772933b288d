"""Provider portability: what the three major providers' tool-calling rules make of each schema.

- **OpenAI strict mode** (what openai-agents' `ensure_strict_json_schema`, LangChain's
  `strict=True` and pydantic-ai do): every object gets `additionalProperties: false` and *every*
  property becomes required, with its type unchanged. A model then has to send each optional
  field; the tool still works only if each such field accepts a value meaning "omitted" (the
  bridge's inputs take `null` as omitted wherever null has no other meaning). A tool that cannot
  must be listed in STRICT_MODE_LIMITS with the reason (docs/clients.md shows it).
- **Gemini function declarations** (google-genai's `JSONSchema`): keywords it refuses
  (`examples`) and references (`$ref`, `$defs`) must not appear.
- **Anthropic tool input rules**: the tool name matches ``^[a-zA-Z0-9_-]{1,64}$`` and the input
  schema is one object at the root, without a root `oneOf`/`anyOf`/`allOf`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from ._surface import Surface, Violation

__all__ = ["STRICT_MODE_LIMITS", "openai_strict", "rule_portability", "strict_blockers"]

GEMINI_REFUSED = ("examples", "$ref", "$defs")
ANTHROPIC_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Tools that cannot work under OpenAI strict conversion, and why (docs/clients.md).
STRICT_MODE_LIMITS: dict[str, str] = {
    "task_update": "patch semantics: an omitted patch field stays unchanged and null clears it, "
    "so no value can mean 'leave this field alone'",
}


def openai_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as OpenAI strict conversion leaves it: every object closed, every property
    required, types unchanged."""
    converted = copy.deepcopy(schema)
    _close(converted)
    return converted


def _close(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _close(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" or "properties" in node:
        node["additionalProperties"] = False
        node["required"] = list(node.get("properties", {}))
    for value in node.values():
        _close(value)


def _accepts_null(prop: dict[str, Any]) -> bool:
    kinds = prop.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_accepts_null(option) for option in prop.get("anyOf", []))


def strict_blockers(schema: dict[str, Any], path: str = "$") -> list[str]:
    """The optional properties (at any depth) strict conversion forces without a null to send:
    each makes a strict client state something it did not mean."""
    found: list[str] = []
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if name not in required and not _accepts_null(prop):
            found.append(here)
        for option in [prop, *prop.get("anyOf", [])]:
            if option.get("type") == "object":
                found += strict_blockers(option, here)
            items = option.get("items")
            if isinstance(items, dict) and items.get("type") == "object":
                found += strict_blockers(items, f"{here}[]")
    return found


def _keywords(node: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key
            inner = f"{path}.{key}" if key != "properties" else path
            yield from _keywords(value, inner)
    elif isinstance(node, list):
        for item in node:
            yield from _keywords(item, path)


def rule_portability(s: Surface) -> Iterator[Violation]:
    """Each tool as OpenAI strict mode, Gemini and Anthropic take it (see the module)."""
    for t in s.tools:
        schema = t.input_schema
        blockers = strict_blockers(schema)
        if blockers and t.name not in STRICT_MODE_LIMITS:
            yield Violation(
                "portability",
                t.name,
                blockers[0],
                f"OpenAI strict mode forces {len(blockers)} optional field(s) with no value "
                "meaning omitted; accept null as omitted, or list the tool in STRICT_MODE_LIMITS "
                "with the reason",
            )
        if not blockers and t.name in STRICT_MODE_LIMITS:
            yield Violation("portability", t.name, "$", "works in strict mode: unlist it")
        for path, key in _keywords(schema):
            if key in GEMINI_REFUSED:
                yield Violation("portability", t.name, path, f"Gemini refuses `{key}`")
        if not ANTHROPIC_NAME.match(t.name):
            yield Violation("portability", t.name, "name", "Anthropic tool names: [a-zA-Z0-9_-]")
        if schema.get("type") != "object" or {"oneOf", "anyOf", "allOf"} & set(schema):
            yield Violation(
                "portability", t.name, "$", "Anthropic: the input schema root is one object"
            )
