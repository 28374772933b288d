"""Compatibility and deprecation (contract section 11): the migration table and its policies.

Old tool names and old argument spellings are never in `tools/list` or a schema; they live here,
each mapped to its canonical form with a documented removal gate. Every use is journaled as
deprecated usage. The `--compat` policy decides the answer:

    policy    old argument spelling                  old tool name
    strict    refused as unknown, names the field    unknown tool (fails closed), names the
                                                     replacement
    hint      translated; notice in `meta`           not executed: `suggested_action` holds the
                                                     replacement and fully mapped arguments
                                                     (only when they are a valid call; else
                                                     `field_errors` say what is missing)
    forward   translated; notice in `meta`           executed through the mapping; notice in `meta`

Names in no table fail closed in every policy. An old name whose mapping fixes an argument
(`task_claim` fixes `claimed: true`) refuses, in every policy, a call stating the opposite, as
`invalid_arguments` naming the field: a mapping or a suggestion never changes what was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import ToolError

Policy = Literal["strict", "hint", "forward"]
POLICIES: tuple[Policy, ...] = ("strict", "hint", "forward")
GATE_DAYS = 30
REMOVAL_GATE = f"no use in the deprecation telemetry for {GATE_DAYS} consecutive days"


@dataclass(frozen=True)
class ToolMigration:
    """An old tool name, the canonical tool it became, and how its arguments map."""

    old_name: str
    tool: str
    fixed: dict[str, Any] = field(default_factory=dict)
    reshape: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    removal_gate: str = REMOVAL_GATE

    def map_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The canonical tool's arguments; raises `invalid_arguments` when the call states the
        opposite of what the old name fixes (`task_claim` with `claimed: false`): a mapping
        never changes what the caller asked for."""
        mapped = self.reshape(dict(arguments)) if self.reshape else dict(arguments)
        opposed = {
            f"$.{name}": f"`{self.old_name}` always sets `{name}` to {_json(value)}; call "
            f"`{self.tool}` with the `{name}` you mean"
            for name, value in self.fixed.items()
            if name in mapped and not _same(mapped[name], value)
        }
        if opposed:
            raise ToolError(
                "invalid_arguments",
                f"`{self.old_name}` contradicts its own arguments; nothing was done.",
                field_errors=opposed,
            )
        mapped.update(self.fixed)
        return mapped


def _same(given: Any, fixed: Any) -> bool:
    """The same JSON value (`1` is not `true`)."""
    return type(given) is type(fixed) and bool(given == fixed)


def _json(value: Any) -> str:
    return "true" if value is True else "false" if value is False else repr(value)


@dataclass(frozen=True)
class ArgumentAlias:
    """An old spelling of a model-facing field; `tools` empty means every tool."""

    old: str
    canonical: str
    tools: tuple[str, ...] = ()
    removal_gate: str = REMOVAL_GATE


def _one_number(arguments: dict[str, Any]) -> dict[str, Any]:
    if "number" in arguments and "numbers" not in arguments:
        arguments["numbers"] = [arguments.pop("number")]
    return arguments


TOOL_MIGRATIONS: dict[str, ToolMigration] = {
    m.old_name: m
    for m in (
        ToolMigration("list_tasks", "task_list"),
        ToolMigration("task_search", "task_list"),
        ToolMigration("get_task", "task_get"),
        ToolMigration("create_tasks", "task_create"),
        ToolMigration("update_task", "task_update"),
        ToolMigration("task_claim", "task_set_claim", fixed={"claimed": True}, reshape=_one_number),
        ToolMigration(
            "task_release", "task_set_claim", fixed={"claimed": False}, reshape=_one_number
        ),
        ToolMigration("task_add_checkpoint", "task_checkpoint"),
    )
}

# The camelCase upstream DTO names a model may still send, at any depth.
_CAMEL = {
    "includeSubtasks": "include_subtasks",
    "parentTaskScope": "parent_task_scope",
    "scopeId": "scope_id",
    "idempotencyKey": "idempotency_key",
    "subtaskMode": "subtask_mode",
    "expectedUpdatedAt": "expected_updated_at",
    "mediaType": "media_type",
    "sizeBytes": "size_bytes",
}
# task_update's old flat profile fields, now inside `patch`. Frozen: a patch field added later
# (`thread`, `messages`, `workspaces`) never had a flat spelling, so it is no alias.
PATCH_FIELDS: tuple[str, ...] = (
    "title",
    "description",
    "status",
    "priority",
    "labels",
    "assignee",
    "checklist",
    "urls",
    "attachments",
    "blocker",
    "parent",
)
ARGUMENT_ALIASES: tuple[ArgumentAlias, ...] = (
    *(ArgumentAlias(old, new) for old, new in _CAMEL.items()),
    *(ArgumentAlias(name, f"patch.{name}", tools=("task_update",)) for name in PATCH_FIELDS),
)
# The tools whose flat PATCH_FIELDS fold into `patch`, read from the aliases above.
_FOLDS_INTO_PATCH: frozenset[str] = frozenset(
    tool
    for alias in ARGUMENT_ALIASES
    if alias.canonical.startswith("patch.")
    for tool in alias.tools
)


@dataclass(frozen=True)
class Use:
    """One deprecated use found in a call: what kind, the old name, its replacement."""

    kind: Literal["tool_name", "argument"]
    old: str
    replacement: str

    def notice(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "old": self.old,
            "replacement": self.replacement,
            "removal_gate": REMOVAL_GATE,
        }


def translate_arguments(tool: str, arguments: Any) -> tuple[Any, list[Use]]:
    """Canonical spellings for old ones; the uses found, by JSON path of the old name."""
    if not isinstance(arguments, dict):
        return arguments, []
    uses: list[Use] = []
    translated = _rename(arguments, "$", uses)
    if tool in _FOLDS_INTO_PATCH:
        flat = [k for k in PATCH_FIELDS if k in translated]
        if flat:
            patch = translated.get("patch")
            patch = dict(patch) if isinstance(patch, dict) else {}
            for name in flat:
                if name in patch:
                    raise ToolError(
                        "invalid_arguments",
                        field_errors={f"$.{name}": f"given both flat and as `patch.{name}`"},
                    )
                patch[name] = translated.pop(name)
                uses.append(Use("argument", f"$.{name}", f"$.patch.{name}"))
            translated["patch"] = patch
    return translated, uses


def _rename(node: Any, path: str, uses: list[Use]) -> Any:
    if isinstance(node, list):
        return [_rename(item, f"{path}[{i}]", uses) for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        canonical = _CAMEL.get(key, key) if isinstance(key, str) else key
        if canonical != key:
            if canonical in node:
                raise ToolError(
                    "invalid_arguments",
                    field_errors={f"{path}.{key}": f"given both as `{key}` and `{canonical}`"},
                )
            uses.append(Use("argument", f"{path}.{key}", f"{path}.{canonical}"))
        out[canonical] = _rename(value, f"{path}.{canonical}", uses)
    return out


def strict_refusal(uses: list[Use]) -> ToolError:
    return ToolError(
        "invalid_arguments",
        "Deprecated argument spellings are refused.",
        field_errors={u.old: f"unknown field; use `{u.replacement[2:]}`" for u in uses},
    )


def tool_refusal(
    policy: Policy,
    migration: ToolMigration,
    mapped: dict[str, Any],
    invalid: ToolError | None = None,
) -> ToolError:
    """The answer to an old tool name under `strict` or `hint`; `invalid` is why the mapped
    arguments are no valid call of the replacement (then nothing is suggested)."""
    if invalid is not None:  # still the old name's answer, without a call that would fail
        return ToolError(
            "deprecated_tool",
            f"`{migration.old_name}` is deprecated; call `{migration.tool}`, whose arguments "
            f"these are not: {invalid.message}",
            field_errors=invalid.field_errors,
        )
    if policy == "strict":
        return ToolError(
            "unknown_tool",
            f"No tool named `{migration.old_name}`; use `{migration.tool}`.",
            field_errors={"$.name": f"removed; use `{migration.tool}`"},
        )
    return ToolError(
        "deprecated_tool",
        f"`{migration.old_name}` is deprecated; call `{migration.tool}` with the suggested "
        "arguments.",
        suggested_action={"tool": migration.tool, "arguments": mapped},
    )
