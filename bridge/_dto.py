"""The upstream DTO of a model-facing Struct: the same fields, spelled in camelCase on the wire.

msgspec's ``rename="camel"`` does the spelling: ``upstream_type(TaskGetData)`` is a Struct with
TaskGetData's fields (nested Structs twinned too) that decodes ``{"scopeId": ...}``. An upstream
answer is converted into the twin (which validates it) and read back by attribute, whose names
are the model's, so no key of a typed answer is renamed by hand::

    from_upstream({"task": {"scopeId": ...}}, TaskGetData)  # -> {"task": {"scope_id": ...}}

(``msgspec.convert(dto, T, from_attributes=True)`` would read it too, but it refuses a field left
UNSET, which an optional upstream field is.)
"""

from __future__ import annotations

import re
import types
from functools import cache, lru_cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from . import _inputs, _outputs

__all__ = ["from_upstream", "model_text", "snake", "snake_keys", "snake_path", "upstream_type"]

_QUOTED_CAMEL = re.compile(r"`([a-z]+(?:[A-Z][a-z0-9]*)+)`")
# What redaction put in a name (`[REDACTED]`, `[REDACTED:sha256:<hex>]`): kept as it is by `snake`.
_MARKER = re.compile(r"(\[REDACTED(?::sha256:[0-9a-f]{12})?\])")
_CAMEL_WORD = re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")


@cache
def upstream_type(model: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """The camelCase twin of a Struct (built once per type)."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in msgspec.structs.fields(model):
        kind = _twin(f.type)
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, kind, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, kind))
    config = model.__struct_config__
    return msgspec.defstruct(
        model.__name__ + "Upstream",
        fields,
        rename="camel",
        kw_only=True,
        frozen=config.frozen,
        omit_defaults=config.omit_defaults,
    )


def from_upstream(body: Any, model: type[msgspec.Struct]) -> Any:
    """An upstream answer (camelCase builtins) as the model-facing builtins of ``model``;
    msgspec.ValidationError when it is not that shape."""
    return _by_attribute(msgspec.convert(body, upstream_type(model), strict=True))


def _by_attribute(value: Any) -> Any:
    """A twin as builtins keyed by its attribute (model-facing) names; UNSET fields omitted, as
    ``msgspec.to_builtins`` does."""
    if isinstance(value, msgspec.Struct):
        out = {}
        for name in value.__struct_fields__:
            field = getattr(value, name)
            if field is not msgspec.UNSET:
                out[name] = _by_attribute(field)
        return out
    if isinstance(value, list):
        return [_by_attribute(v) for v in value]
    return value


def _twin(kind: Any) -> Any:
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return upstream_type(kind)
    origin = get_origin(kind)
    if origin is None or origin is Literal:
        return kind
    args = get_args(kind)
    if origin is Annotated:
        return Annotated[(_twin(args[0]), *kind.__metadata__)]
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_twin(a) for a in args)]  # noqa: UP007
    return origin[tuple(_twin(a) for a in args)]


# What has no type to convert into (an upstream error's message, `fieldErrors` paths and
# `candidates`) is renamed here, for the model.


def model_text(text: str) -> str:
    """Upstream text names DTO fields in camelCase; the model knows them in snake_case."""
    text = _QUOTED_CAMEL.sub(lambda m: f"`{snake(m.group(1))}`", text)
    names = _upstream_names()
    return _CAMEL_WORD.sub(lambda m: snake(m[0]) if m[0] in names else m[0], text)


@lru_cache(maxsize=1)
def _upstream_names() -> frozenset[str]:
    """Every camelCase name of the upstream DTOs (the tools' input and output types, renamed),
    and of the hidden context and error envelope the runtime speaks."""
    names = {"workspaceId", "agentId", "workflowRunId", "callbackEffectId", "fieldErrors"}
    names |= {"retryAfterSeconds", "currentUpdatedAt", "nextCursor", "scopeId", "updatedAt"}
    for module in (_inputs, _outputs):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, msgspec.Struct):
                wire = msgspec.structs.fields(upstream_type(value))
                names |= {f.encode_name for f in wire if f.encode_name != f.name}
    return frozenset(names)


def snake_keys(value: Any) -> Any:
    """Rename every key of an upstream builtins tree from camelCase to snake_case."""
    if isinstance(value, dict):
        return {snake(str(k)): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value


@lru_cache(maxsize=1024)
def snake(name: str) -> str:
    """`scopeId` -> `scope_id` (upstream DTO names to model-facing names; the few there are
    repeat in every answer, hence the cache)."""
    if "[REDACTED" in name:  # a screened upstream name: the markers stay readable
        pieces = _MARKER.split(name)
        return "".join(p if i % 2 else snake(p) for i, p in enumerate(pieces))
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_")
            out.append(ch.lower())
        else:
            out.append(ch)
    return "".join(out)


def snake_path(path: str) -> str:
    """`$.parentTaskScope.scopeId` -> `$.parent_task_scope.scope_id`."""
    return ".".join(snake(part) for part in path.split("."))
