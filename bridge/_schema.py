"""JSON Schemas for MCP, generated from the msgspec types and flattened for every runtime.

msgspec emits `$ref`/`$defs`; several MCP runtimes resolve neither, so references are inlined.
Struct titles are dropped and a description repeated inside an `anyOf` branch is removed (the
property already carries it), which keeps the persistent tool context small.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ._outputs import ErrorBody, Meta


def input_schema(type_: type[msgspec.Struct]) -> dict[str, Any]:
    return _flatten(msgspec.json.schema(type_))


def output_schema(name: str, data: type[msgspec.Struct]) -> dict[str, Any]:
    """The flat result envelope: optional `data`, `meta` and `error`, so errors validate too."""
    envelope = msgspec.defstruct(
        name,
        [
            ("data", data | UnsetType, UNSET),
            ("meta", Meta | UnsetType, UNSET),
            ("error", ErrorBody | UnsetType, UNSET),
        ],
        frozen=True,
    )
    return _flatten(msgspec.json.schema(envelope))


def _flatten(schema: dict[str, Any]) -> dict[str, Any]:
    defs: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any, parent_described: bool = False) -> Any:
        if isinstance(node, list):
            return [resolve(item, parent_described) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return resolve({**target, **extra}, parent_described)
        out: dict[str, Any] = {}
        described = "description" in node
        for key, value in node.items():
            if key == "title" and isinstance(value, str) and "properties" in node:
                continue
            if key == "description" and parent_described:
                continue
            if key == "required" and value == []:
                continue
            if key == "anyOf":
                out[key] = [resolve(branch, described) for branch in value]
            elif key == "properties":
                out[key] = {name: resolve(prop) for name, prop in value.items()}
            else:
                out[key] = resolve(value)
        return out

    root = {k: v for k, v in schema.items() if k != "$defs"}
    flat: dict[str, Any] = resolve(root)
    return flat
