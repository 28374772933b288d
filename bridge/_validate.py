"""Validation of the complete intent before any side effect (contract sections 4 and 7.1).

Schema rules come from the tool's msgspec input type; branch rules that a flat root schema
cannot express (section 4.2) are checked here, each naming the JSON path at fault. A refused
enum value names the accepted values. A valid input is then normalized: defaults written out are
folded away (`_inputs.SPELLED_DEFAULTS`) and a `null` that means "omitted" is left out
(`_inputs.NULL_MEANS_OMITTED`), so equivalent spellings are one canonical request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

import msgspec

from agentteam_task_bridge import journal

from . import _inputs as inp
from ._errors import ToolError

_MAX_DEPTH = 16
_MISSING = re.compile(r"^Object missing required field `(?P<f>[^`]+)`")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<f>[^`]+)`")
_BAD_ENUM = re.compile(r"^Invalid enum value (?P<v>.*)$", re.DOTALL)
_INSTANT = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_ECHO_CHARS = 40
_T = TypeVar("_T")


def validate(input_type: type[msgspec.Struct], arguments: Any) -> msgspec.Struct:
    """Parse model arguments into the tool's input type, or raise a classified ToolError."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(
            "invalid_arguments",
            "Arguments must be a JSON object.",
            field_errors={"$": "expected an object"},
        )
    hidden = _hidden_fields(arguments, "$", 0)
    if hidden:
        raise ToolError(
            "hidden_context_field",
            "Workspace, agent, workflow run and credentials are supplied by the bridge; "
            "remove these arguments.",
            field_errors={path: "hidden context is not model input" for path in hidden[:10]},
        )
    try:
        value = msgspec.convert(arguments, input_type, strict=True)
    except msgspec.ValidationError as exc:
        path, reason = _path_and_reason(str(exc))
        reason = _with_enum_values(input_type, path, reason)
        raise ToolError(
            "invalid_arguments", f"{reason} - at `{path}`", field_errors={path: reason}
        ) from None
    value = fold_defaults(value)
    rule = BRANCH_RULES.get(input_type)
    if rule is not None:
        errors = rule(value)
        if errors:
            path, reason = next(iter(errors.items()))
            raise ToolError("invalid_arguments", f"{reason} - at `{path}`", field_errors=errors)
    return value


def _hidden_fields(node: Any, path: str, depth: int) -> list[str]:
    if depth > _MAX_DEPTH:
        raise ToolError(
            "invalid_arguments",
            "Arguments are nested too deeply.",
            field_errors={path: f"nested deeper than {_MAX_DEPTH} levels"},
        )
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}"
            if isinstance(key, str) and journal.is_hidden_name(key):
                found.append(child)
            found += _hidden_fields(value, child, depth + 1)
    elif isinstance(node, list):
        for i, item in enumerate(node[:100]):
            found += _hidden_fields(item, f"{path}[{i}]", depth + 1)
    return found


def _path_and_reason(message: str) -> tuple[str, str]:
    reason, _, where = message.partition(" - at `")
    path = where.rstrip("`") if where else "$"
    for pattern, text in ((_MISSING, "required"), (_UNKNOWN, "unknown field")):
        found = pattern.match(reason)
        if found:
            return f"{path}.{found['f']}", text
    return path, reason


def _with_enum_values(input_type: type[msgspec.Struct], path: str, reason: str) -> str:
    """A reason at an enum field, completed with the values it accepts (contract 4.4)."""
    accepted = _enum_at(_type_info(input_type), path)
    if accepted is None:
        return reason
    values, nullable = accepted
    listed = ", ".join(f"`{v}`" for v in values) + (", or null" if nullable else "")
    refused = _BAD_ENUM.match(reason)
    if refused:
        value = refused["v"]
        if len(value) > _ECHO_CHARS:
            value = value[:_ECHO_CHARS] + "..."
        return f"{value} is not an accepted value; use one of {listed}"
    return f"{reason}; use one of {listed}"


@functools.cache
def _type_info(input_type: type[msgspec.Struct]) -> msgspec.inspect.Type:
    """The input type as msgspec.inspect sees it: built once (it translates the whole type)."""
    return msgspec.inspect.type_info(input_type)


def _enum_at(info: msgspec.inspect.Type, path: str) -> tuple[tuple[Any, ...], bool] | None:
    """The values (and nullability) of the enum field at a `$.a[0].b` path, if it is one."""
    node = info
    for step in _STEP.finditer(path[1:]):
        node = _concrete(node)
        if step[1] is not None and isinstance(node, msgspec.inspect.StructType):
            fields = {f.encode_name: f.type for f in node.fields}
            if step[1] not in fields:
                return None
            node = fields[step[1]]
        elif step[2] is not None and isinstance(node, msgspec.inspect.ListType):
            node = node.item_type
        else:
            return None
    while isinstance(node, msgspec.inspect.Metadata):
        node = node.type
    options = node.types if isinstance(node, msgspec.inspect.UnionType) else (node,)
    nullable = any(isinstance(o, msgspec.inspect.NoneType) for o in options)
    for option in options:
        while isinstance(option, msgspec.inspect.Metadata):
            option = option.type
        if isinstance(option, msgspec.inspect.LiteralType):
            return tuple(option.values), nullable
    return None


def _concrete(node: msgspec.inspect.Type) -> msgspec.inspect.Type:
    """The struct or list inside metadata and an optional union."""
    while True:
        if isinstance(node, msgspec.inspect.Metadata):
            node = node.type
        elif isinstance(node, msgspec.inspect.UnionType):
            inner = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
            if len(inner) != 1:
                return node
            node = inner[0]
        else:
            return node


def fold_defaults(value: _T) -> _T:
    """The value with every spelled-out default left out (UNSET), at every depth, and `null`
    read as the field left out where it means that (`_inputs.NULL_MEANS_OMITTED`)."""
    if isinstance(value, list):
        return cast(_T, [fold_defaults(item) for item in value])
    if not isinstance(value, msgspec.Struct):
        return value
    defaults = inp.SPELLED_DEFAULTS.get(type(value), {})
    empty_is_null = inp.EMPTY_MEANS_NULL.get(type(value), ())
    null_is_omitted = type(value) in inp.NULL_MEANS_OMITTED
    changes: dict[str, Any] = {}
    for name, default in _field_defaults(type(value)):
        current = original = getattr(value, name)
        if current is None and null_is_omitted:
            current = default
        elif isinstance(current, msgspec.Struct) or (
            isinstance(current, list) and current and isinstance(current[0], msgspec.Struct)
        ):
            current = fold_defaults(current)
        if name in defaults and current == defaults[name]:
            current = msgspec.UNSET
        elif name in empty_is_null and current == "":
            current = None
        if current is not original and current != original:
            changes[name] = current
    if isinstance(value, inp.TaskListInput):
        changes.update(_fold_list_defaults(value))
    return msgspec.structs.replace(value, **changes) if changes else value


@functools.cache
def _field_defaults(struct: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    """(name, default) of each field of an input type: what a `null` there stands for."""
    return tuple((f.name, f.default) for f in msgspec.structs.fields(struct))


def _fold_list_defaults(v: inp.TaskListInput) -> dict[str, Any]:
    """task_list's defaults that depend on the query: a blank query browses."""
    changes: dict[str, Any] = {}
    searching = isinstance(v.query, str) and bool(v.query.strip())
    if isinstance(v.query, str) and not searching:
        changes["query"] = msgspec.UNSET
    if v.sort == ("relevance" if searching else "number"):
        changes["sort"] = msgspec.UNSET
    return changes


# --- branch rules ------------------------------------------------------------------------


def _list_rules(v: inp.TaskListInput) -> dict[str, str]:
    errors: dict[str, str] = {}
    searching = isinstance(v.query, str) and bool(v.query.strip())
    if v.status == "all" and not searching:
        errors["$.status"] = "`all` is accepted only with a non-empty `query`"
    if v.sort == "relevance" and not searching:
        errors["$.sort"] = "`relevance` is accepted only with a non-empty `query`"
    return errors


def _create_rules(v: inp.TaskCreateInput) -> dict[str, str]:
    errors: dict[str, str] = {}
    has_channel = v.channel is not msgspec.UNSET
    has_scope = v.parent_task_scope is not msgspec.UNSET
    if has_channel and has_scope:
        errors["$.parent_task_scope"] = "mutually exclusive with `channel`"
    elif not has_channel and not has_scope:
        errors["$.channel"] = "required unless `parent_task_scope` is given"
    if has_scope and v.parent is not msgspec.UNSET:
        errors["$.parent"] = "cannot be combined with `parent_task_scope`"
    for i, task in enumerate(v.tasks):
        if not task.title.strip():
            errors[f"$.tasks[{i}].title"] = "must not be blank"
    if len(v.tasks) > 1:
        for i, task in enumerate(v.tasks):
            extra = [
                f
                for f in task.__struct_fields__
                if f != "title" and getattr(task, f) is not msgspec.UNSET
            ]
            if extra:
                errors[f"$.tasks[{i}].{extra[0]}"] = (
                    "several tasks are title-only; create a rich task on its own"
                )
    if isinstance(v.idempotency_key, str):
        key = v.idempotency_key.strip()
        if not key:
            errors["$.idempotency_key"] = "must not be blank"
        elif len(key.encode()) > inp.MAX_KEY_BYTES:
            errors["$.idempotency_key"] = f"at most {inp.MAX_KEY_BYTES} UTF-8 bytes"
    return errors


def _update_rules(v: inp.TaskUpdateInput) -> dict[str, str]:
    if all(getattr(v.patch, f) is msgspec.UNSET for f in v.patch.__struct_fields__):
        return {"$.patch": "empty; set at least one field"}
    if isinstance(v.patch.title, str) and not v.patch.title.strip():
        return {"$.patch.title": "must not be blank"}
    if isinstance(v.expected_updated_at, str) and not real_instant(v.expected_updated_at):
        return {
            "$.expected_updated_at": "not a real instant (no such date or time); pass the "
            "task's `updated_at` as read"
        }
    return {}


def real_instant(text: str) -> bool:
    """Whether an RFC 3339 UTC timestamp (the schema's pattern) names a real date and time:
    `2026-02-30T00:00:00Z` and `2026-13-45T99:99:99Z` match the pattern but do not."""
    found = _INSTANT.match(text)
    if found is None:
        return False
    try:
        year, month, day, hour, minute, second = (int(part) for part in found.groups())
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


def _claim_rules(v: inp.TaskSetClaimInput) -> dict[str, str]:
    seen: set[int] = set()
    for i, n in enumerate(v.numbers):
        if n in seen:
            return {f"$.numbers[{i}]": f"task {n} appears twice"}
        seen.add(n)
    return {}


def _checkpoint_rules(v: inp.TaskCheckpointInput) -> dict[str, str]:
    return {} if v.summary.strip() else {"$.summary": "must not be blank"}


BRANCH_RULES: dict[type[Any], Callable[[Any], dict[str, str]]] = {
    inp.TaskListInput: _list_rules,
    inp.TaskCreateInput: _create_rules,
    inp.TaskUpdateInput: _update_rules,
    inp.TaskSetClaimInput: _claim_rules,
    inp.TaskCheckpointInput: _checkpoint_rules,
}


def canonical_arguments(value: msgspec.Struct) -> dict[str, Any]:
    """A value from `validate` (defaults folded) as builtins, UNSET omitted, trimmed as documented.

    This is what goes upstream, what a key's receipt digest is computed over and what a list
    cursor is bound to: one request has one canonical form, however its defaults were spelled.
    """
    args: dict[str, Any] = msgspec.to_builtins(value)
    if isinstance(args.get("idempotency_key"), str):
        args["idempotency_key"] = args["idempotency_key"].strip()
    if isinstance(value, inp.TaskCheckpointInput):
        args["summary"] = args["summary"].strip()
    return args
