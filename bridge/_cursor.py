"""Bridge cursors (contract 6.3): where a page the bridge cut continues, by identity, signed.

A bridge cursor names the upstream page it continues (the upstream cursor that fetched it; none
for a first page) and the last item delivered from it by its sort key: ``number``;
``updated_at, number``; ``priority rank, number``. For ``relevance``, whose rank the items do not
show, it names the numbers delivered from that page instead. Resuming fetches that upstream page
again, with room for the items already delivered, and drops every item at or before the key (or
delivered already): updates, deletes and inserts between pages, and another ``limit``, never skip
or repeat a task that stays in the view.

    bt1.<base64url JSON {"d", "u", "k" | "seen", "n", "e"}>.<32 hex of HMAC-SHA256>

The MAC is keyed by the installation's secret (``cursor.key``, 32 random bytes in hex, owner-only
beside the journal signing key), so a cursor outlives the session that issued it; ``d`` binds it
to the workspace and the list arguments but the cursor and the limit (``cursor_mismatch``
elsewhere), ``e`` is its expiry (CURSOR_TTL_SECONDS after issue). A forged, edited or expired
cursor is ``cursor_invalid``. A cursor without the prefix is the upstream's own: it passes
through untouched and the upstream judges it.

Every cursor the bridge hands out is one the model can send back (the inputs' ``cursor``, 1-2048
characters) and wrap again: an upstream ``nextCursor`` that is present must be 1 to
``MAX_UPSTREAM_CURSOR`` printable ASCII characters other than space, ``"`` and ``\\``
(``upstream_cursor``); anything else (a number, ``""``, control characters, 100 KB) makes the page
``NotAPage`` (``upstream_malformed``), never a cursor over the answer's budget nor the silent end
of the list.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from . import _inputs as inp
from ._errors import ToolError
from ._exceptions import BridgeError
from ._paths import loose_mode, make_private_dir

CURSOR_PREFIX = "bt1."
MAX_UPSTREAM_CURSOR = 1024  # wrapped in a bridge cursor, still within the inputs' 2048
_UPSTREAM_CURSOR = re.compile(rf"[!#-\[\]-~]{{1,{MAX_UPSTREAM_CURSOR}}}")
CURSOR_TTL_SECONDS = 24 * 3600
KEY_FILE = "cursor.key"
_KEY_BYTES = 32
_MAC_HEX = 32
_encode = msgspec.json.Encoder(order="sorted").encode
# The runtime's order of priorities (docs/runtime.md): none ranks lowest.
_PRIORITY_RANK: dict[Any, int] = {None: 0, "low": 1, "normal": 2, "high": 3, "urgent": 4}
Key = tuple[Any, ...]


class PageState(NamedTuple):
    """Where a list page comes from, to continue it after a cut.

    `upstream_cursor` fetched the upstream page; `after` is the sort key of the last item
    already delivered from it (None: nothing yet), `seen` the numbers delivered from it under
    `relevance`; `dropped` how many items of this fetch were delivered before (set once the
    page is read); `digest` what its cursors are bound to; `sort` the effective sort.
    """

    upstream_cursor: str | None
    digest: str
    sort: str = "number"
    after: Key | None = None
    seen: tuple[int, ...] = ()
    dropped: int = 0


def list_digest(arguments: dict[str, Any], workspace: str = "") -> str:
    """What a bridge cursor is bound to: the workspace and every list argument but the cursor
    and the limit."""
    scope = {k: v for k, v in arguments.items() if k not in ("cursor", "limit")}
    return hashlib.sha256(_encode({"w": workspace, "a": scope})).hexdigest()[:16]


def effective_sort(arguments: dict[str, Any]) -> str:
    """The sort of a canonical task_list call (a default folded away is the query's)."""
    sort = arguments.get("sort")
    if isinstance(sort, str):
        return sort
    return "relevance" if arguments.get("query") else "number"


def sort_key(item: Any, sort: str) -> Key | None:
    """An item's place in the page order (snake_case or upstream camelCase); None if unreadable."""
    if not isinstance(item, dict):
        return None
    number = item.get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    if sort == "updated":
        updated = item.get("updated_at", item.get("updatedAt"))
        return (updated, number) if isinstance(updated, str) else None
    if sort == "priority":
        rank = _PRIORITY_RANK.get(item.get("priority"), 0)
        return (rank, number)
    return (number,)


def comes_after(key: Key, last: Key, sort: str) -> bool:
    """Whether an item of sort key `key` is after the item of `last` in the page order."""
    if sort == "updated":  # newest first, then the higher number
        return bool(key < last)
    if sort == "priority":  # highest rank first, then the lower number
        return bool(key[0] < last[0] or (key[0] == last[0] and key[1] > last[1]))
    return bool(key > last)  # number (a relevance page is never compared: see `seen`)


def undelivered(state: PageState, items: list[Any]) -> list[Any]:
    """The items of a re-fetched upstream page not delivered before (a malformed item is kept,
    for the conversion to refuse)."""
    if state.sort == "relevance":
        seen = set(state.seen)
        return [i for i in items if not (isinstance(i, dict) and i.get("number") in seen)]
    if state.after is None:
        return items
    last = state.after
    kept = []
    for item in items:
        key = sort_key(item, state.sort)
        if key is None or comes_after(key, last, state.sort):
            kept.append(item)
    return kept


class Cursors:
    """Issues and opens the bridge cursors of one installation (one secret)."""

    def __init__(self, secret: bytes, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._clock = clock

    @classmethod
    def ephemeral(cls) -> Cursors:
        """Cursors valid for this process only (tests, tools that check sizes)."""
        return cls(secrets.token_bytes(_KEY_BYTES))

    def issue(self, state: PageState, delivered: Sequence[Any], upstream: str | None = None) -> str:
        """The cursor after the `delivered` items of `state`'s page (or of the page `upstream`
        fetches next, when given)."""
        body: dict[str, Any] = {
            "d": state.digest,
            "u": state.upstream_cursor if upstream is None else upstream,
            "e": int(self._clock()) + CURSOR_TTL_SECONDS,
        }
        if state.sort == "relevance":
            numbers = [i["number"] for i in delivered if isinstance(i, dict)]
            body["seen"] = sorted({*state.seen, *numbers})
        else:
            after = sort_key(delivered[-1], state.sort) if delivered else state.after
            body["k"] = list(after) if after else None
        body["n"] = state.dropped + len(delivered) if upstream is None else 0
        raw = base64.urlsafe_b64encode(_encode(body)).rstrip(b"=")
        return CURSOR_PREFIX + raw.decode() + "." + self._mac(raw)

    def open(self, cursor: str, digest: str, sort: str) -> tuple[PageState, int]:
        """The page state a bridge cursor continues, and how many items of its upstream page
        were delivered already (room to fetch); raises `cursor_invalid` / `cursor_mismatch`."""
        invalid = self.invalid()
        body, _, mac = cursor[len(CURSOR_PREFIX) :].rpartition(".")
        if not cursor.isascii() or not hmac.compare_digest(mac, self._mac(body.encode())):
            raise invalid
        try:
            state = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            expiry, upstream, count = state["e"], state["u"], state["n"]
            bound = state["d"]
        except (ValueError, KeyError, TypeError, msgspec.DecodeError):
            raise invalid from None
        if not isinstance(expiry, int) or expiry < self._clock():
            raise invalid
        if bound != digest:
            raise ToolError(
                "cursor_mismatch",
                field_errors={"$.cursor": "issued for another query or filter set"},
            )
        key = state.get("k")
        seen = state.get("seen") or ()
        page = PageState(
            upstream,
            digest,
            sort,
            after=tuple(key) if key else None,
            seen=tuple(seen),
        )
        return page, count

    def _mac(self, body: bytes, prefix: str = CURSOR_PREFIX) -> str:
        mac = hmac.new(self._secret, prefix.encode() + body, hashlib.sha256)
        return mac.hexdigest()[:_MAC_HEX]

    def seal(self, prefix: str, body: dict[str, Any]) -> str:
        """Another kind of bridge cursor (`prefix`, e.g. `_detail`'s): `body` with an expiry,
        signed with the same key; the prefix is signed too, so no kind passes for another."""
        payload = {**body, "e": int(self._clock()) + CURSOR_TTL_SECONDS}
        raw = base64.urlsafe_b64encode(_encode(payload)).rstrip(b"=")
        return prefix + raw.decode() + "." + self._mac(raw, prefix)

    def open_sealed(self, prefix: str, cursor: str) -> dict[str, Any]:
        """The body of a cursor from `seal(prefix, ...)`; raises `cursor_invalid` for one that
        is forged, edited, expired or of another kind."""
        body, _, mac = cursor[len(prefix) :].rpartition(".")
        if (
            not cursor.startswith(prefix)
            or not cursor.isascii()
            or not hmac.compare_digest(mac, self._mac(body.encode(), prefix))
        ):
            raise self.invalid()
        try:
            state = msgspec.json.decode(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, msgspec.DecodeError):
            raise self.invalid() from None
        if not isinstance(state, dict):
            raise self.invalid()
        expiry = state.get("e")
        if not isinstance(expiry, int) or expiry < self._clock():
            raise self.invalid()
        return state

    @staticmethod
    def invalid() -> ToolError:
        """The answer to a cursor this bridge did not issue, or issued and then saw edited."""
        return ToolError(
            "cursor_invalid",
            "The cursor is not one this bridge issued, was edited, or has expired; start again "
            "without a cursor.",
            field_errors={
                "$.cursor": "not a valid cursor from this tool (forged, edited or expired)"
            },
        )


class NotAPage(BridgeError, ValueError):
    """An upstream list answer without a list of items: nothing a cursor can continue."""


def page_request(
    args: dict[str, Any], workspace: str, cursors: Cursors
) -> tuple[dict[str, Any], PageState]:
    """The upstream arguments of a list call and where its page continues: a bridge cursor
    opened (its upstream page fetched again, with room for the items given from it already),
    an upstream cursor passed through."""
    state = PageState(None, list_digest(args, workspace), effective_sort(args))
    upstream_args = dict(args)
    cursor = upstream_args.pop("cursor", None)
    delivered = 0
    if isinstance(cursor, str) and cursor.startswith(CURSOR_PREFIX):
        state, delivered = cursors.open(cursor, state.digest, state.sort)
    elif isinstance(cursor, str):
        state = state._replace(upstream_cursor=cursor)
    if state.upstream_cursor is not None:
        upstream_args["cursor"] = state.upstream_cursor
    limit = args.get("limit", inp.DEFAULT_LIMIT)
    upstream_args["limit"] = min(inp.MAX_LIMIT, limit + delivered)
    return upstream_args, state


def upstream_cursor(value: Any) -> str | None:
    """An upstream answer's `nextCursor` (None: absent or null, the last page); raises NotAPage
    for one the bridge could not hand back (see the module's docstring)."""
    if value is None:
        return None
    if not isinstance(value, str) or _UPSTREAM_CURSOR.fullmatch(value) is None:
        raise NotAPage
    return value


def page_answer(
    args: dict[str, Any], body: Any, state: PageState, cursors: Cursors
) -> tuple[dict[str, Any], PageState]:
    """The upstream page without the items given before, at most `limit` of them, and its
    `nextCursor`: the upstream's own when the rest of its page is given whole, else a bridge
    cursor; raises NotAPage for a body without a list of items."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise NotAPage
    items: list[Any] = body["items"]
    fresh = undelivered(state, items)
    state = state._replace(dropped=len(items) - len(fresh))
    limit = args.get("limit", inp.DEFAULT_LIMIT)
    page = {**body, "items": fresh[:limit]}
    upstream_next = upstream_cursor(body.get("nextCursor"))
    if len(fresh) > limit:
        page["nextCursor"] = cursors.issue(state, fresh[:limit])
    elif not fresh and upstream_next is not None and (state.after or state.seen):
        # Every item of this fetch was given before: go on from the upstream's next page.
        page["nextCursor"] = cursors.issue(state, [], upstream=upstream_next)
    return page, state


def load_cursor_key(directory: Path) -> bytes:
    """The installation's cursor secret in `directory` (0700), created 0600 if absent; raises
    ValueError, saying what to do, when the file is not owner-only or does not hold it."""
    path = directory / KEY_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        make_private_dir(directory)
        secret = secrets.token_bytes(_KEY_BYTES)
        # Written whole under a private name, then linked into place: a bridge starting at the
        # same moment reads a complete key or none, and the first link wins.
        draft = directory / f".{KEY_FILE}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w") as file:
                os.fchmod(file.fileno(), 0o600)
                file.write(secret.hex() + "\n")
                file.flush()
                os.fsync(file.fileno())
            os.link(draft, path)
        except FileExistsError:  # another bridge created it first: use theirs
            return load_cursor_key(directory)
        finally:
            draft.unlink(missing_ok=True)
        return secret
    fix = loose_mode(path, directory=False)
    if fix is not None:  # refused, not tightened, as the signing key is
        raise ValueError(f"the cursor key file {path} is readable by other users; run `{fix}`")
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        secret = b""
    if len(secret) != _KEY_BYTES:
        raise ValueError(
            f"the cursor key file {path} does not hold 32 bytes in hex; move it away and a new "
            "key is created"
        )
    return secret
