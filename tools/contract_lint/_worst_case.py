"""The worst case of a result: the largest value, in UTF-8 bytes, the bounded inputs allow.

Free text is a 4-byte character (an emoji) at every position of its bound; ids, slugs, URLs and
times are ASCII. ``result_budgets`` checks that each tool's worst case keeps its identities in
its byte budget.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["WORST_CHAR", "worst_case"]

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
