"""The further checks of the issue beside section 12: flat roots, field forms, the profile
fields of ``task_update``, and documented defaults (contract 4.2, 4.4 and 13.2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._surface import Surface, Violation, schema_type, walk_properties

__all__ = [
    "rule_documented_defaults",
    "rule_field_forms",
    "rule_flat_roots",
    "rule_profile_fields",
]

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
NEGATIVE_BOOL = re.compile(r"^(no|not|disable|disabled|skip|without)_")


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
            kind = schema_type(prop)
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
