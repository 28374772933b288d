"""Bridge cursors (contract 6.3): where a list continues, by identity, signed.

Every ``next_cursor`` of a list page is a bridge cursor. It names the upstream page it continues
(the upstream cursor that fetches it; none for a first page) and the last item delivered by its
sort key: ``number``; ``updated_at, number``; ``priority rank, number``. For ``relevance``, whose
rank the items do not show, it names the numbers delivered from that page instead (``s``: 7 bytes
each, big-endian, base64url). Resuming fetches that upstream page again, with room for the items
already delivered, and drops every item at or before the key (or delivered already). When the
page is given to its end, the cursor names the upstream's ``nextCursor`` and keeps the key (or,
under ``relevance``, the numbers of the page just given), so an item the upstream repeats on its
next page, or pushes onto it, is not given twice.

The guarantee: a task that stays in the view with its sort key unchanged is given exactly once,
whatever is deleted, inserted or updated between pages (other tasks' ranks, priorities and
``updated_at`` included), whatever ``limit`` each page asks, whether a page is cut by ``limit``
or by the byte budget, however many items the upstream gives per page. A task whose own key
changes between pages takes its new place: given again if it moved to where the pages have not
reached, not given if it moved to where they have passed (``number`` never changes; a task
updated under ``updated`` moves to the front). Under ``relevance`` the key is the upstream's
search rank, which it may change on any write, and the items do not show it: the bridge keeps
the numbers it gave from an upstream page (and carries them to the next page), so its cuts never
skip, and it never repeats while those numbers not yet passed fit the cursor
(``relevance_window``: 38 with the longest upstream cursor, MAX_LIMIT with one under 450
characters, as the runtime's are); past that, inserts ranked before the tasks given may bring
some of them back.

Size: every cursor handed out is at most MAX_CURSOR (2048, the inputs' ``maxLength``) characters,
for any upstream cursor of 1-MAX_UPSTREAM_CURSOR characters and any task number 1..2^53: under
``relevance`` the upstream page is fetched at most ``relevance_window(u)`` items long, the most
numbers a cursor naming ``u`` can hold, so the numbers delivered from the page always fit (older
ones are dropped first) and each page still gives at least one item (progress); resuming one
upstream page again and again never grows its cursor past that bound.

Loops: an upstream whose ``nextCursor`` leads back to a cursor of the same walk (Brent's cycle
detection over a digest of the upstream cursors, ``t``/``p``/``c``) makes the page ``NotAPage``
(``upstream_malformed``) instead of pages that never end.

    bt1.<base64url JSON {"d", "u", "k" | "s", "n", "e", "t", "p", "c"}>.<32 hex of HMAC-SHA256>

The MAC is keyed by the installation's secret (``cursor.key``, 32 random bytes in hex, owner-only
beside the journal signing key), so a cursor outlives the session that issued it; ``d`` binds it
to the workspace and the list arguments but the cursor and the limit (``cursor_mismatch``
elsewhere), ``e`` is its expiry (CURSOR_TTL_SECONDS after issue). A forged, edited or expired
cursor is ``cursor_invalid``. A cursor without the prefix is the upstream's own (handed out
by earlier versions): one the bridge could have handed out passes through untouched and the
upstream judges it, any other is ``cursor_invalid``.

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
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from agentteam_task_bridge import journal

from . import _inputs as inp
from ._errors import ToolError
from ._exceptions import BridgeError
from ._paths import make_private_dir

CURSOR_PREFIX = "bt1."
MAX_CURSOR = 2048  # the inputs' `cursor` maxLength: no cursor the bridge hands out is longer
MAX_UPSTREAM_CURSOR = 1024  # wrapped in a bridge cursor, still within MAX_CURSOR
_UPSTREAM_CURSOR = re.compile(rf"[!#-\[\]-~]{{1,{MAX_UPSTREAM_CURSOR}}}")
CURSOR_TTL_SECONDS = 24 * 3600
KEY_FILE = "cursor.key"
_KEY_BYTES = 32
_MAC_HEX = 32
_SEEN_BYTES = 7  # a number delivered under relevance: 1..2**53 < 2**56
_MAX_NUMBER = 2**53
_LOOP_HEX = 12  # the digest of an upstream cursor in the loop check
_MAX_POWER = 2**52  # Brent's power stops doubling (never reached: a bound on the cursor's size)
_encode = msgspec.json.Encoder(order="sorted").encode
# The runtime's order of priorities (docs/runtime.md): none ranks lowest.
_PRIORITY_RANK: dict[Any, int] = {None: 0, "low": 1, "normal": 2, "high": 3, "urgent": 4}
Key = tuple[Any, ...]


class PageState(NamedTuple):
    """Where a list page comes from, to continue it after a cut.

    `upstream_cursor` fetched the upstream page; `after` is the sort key of the last item
    already delivered from it (None: nothing yet), `seen` the numbers delivered from it under
    `relevance`; `dropped` how many items of this fetch were delivered before (set once the
    page is read); `digest` what its cursors are bound to; `sort` the effective sort; `loop`
    the cycle check's state over the upstream cursors of this walk (digest of the saved one,
    power, steps; None: none yet).
    """

    upstream_cursor: str | None
    digest: str
    sort: str = "number"
    after: Key | None = None
    seen: tuple[int, ...] = ()
    dropped: int = 0
    loop: tuple[str, int, int] | None = None


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
        priority = item.get("priority")
        if priority is not None and not isinstance(priority, str):
            return None  # a list or an object is no priority (nor a key of _PRIORITY_RANK)
        return (_PRIORITY_RANK.get(priority, 0), number)
    return (number,)


def comes_after(key: Key, last: Key, sort: str) -> bool:
    """Whether an item of sort key `key` is after the item of `last` in the page order."""
    if sort == "updated":  # newest first, then the higher number
        return bool(key < last)
    if sort == "priority":  # highest rank first, then the lower number
        return bool(key[0] < last[0] or (key[0] == last[0] and key[1] > last[1]))
    return bool(key > last)  # number (a relevance page is never compared: see `seen`)


def _number(item: Any) -> int:
    """A relevance item's number, which its cursor names; raises NotAPage if it has none."""
    number = item.get("number") if isinstance(item, dict) else None
    if type(number) is not int or not 1 <= number <= _MAX_NUMBER:
        raise NotAPage
    return number


def undelivered(state: PageState, items: list[Any]) -> list[Any]:
    """The items of a re-fetched upstream page not delivered before (a malformed item is kept,
    for the conversion to refuse; under `relevance` it is NotAPage)."""
    if state.sort == "relevance":
        seen = set(state.seen)
        return [i for i in items if _number(i) not in seen]
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
        if state.sort == "relevance":  # the latest that fit: this page's are the last
            numbers = [i["number"] for i in delivered if isinstance(i, dict)]
            seen = list(dict.fromkeys([*state.seen, *numbers]))
            body["s"] = _pack(seen[-relevance_window(body["u"]) :])
        else:
            after = sort_key(delivered[-1], state.sort) if delivered else state.after
            body["k"] = list(after) if after else None
        # The count only widens the next fetch, which MAX_LIMIT bounds: so does the count.
        body["n"] = min(inp.MAX_LIMIT, state.dropped + len(delivered)) if upstream is None else 0
        if state.loop is not None:
            body["t"], body["p"], body["c"] = state.loop
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
        try:
            seen = _unpack(state["s"]) if "s" in state else tuple(state.get("seen") or ())
        except (ValueError, TypeError):
            raise invalid from None
        loop = (state["t"], state["p"], state["c"]) if "t" in state else None
        page = PageState(
            upstream,
            digest,
            sort,
            after=tuple(key) if key else None,
            seen=seen,
            loop=loop,
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


def relevance_window(upstream: str | None) -> int:
    """How many items of the upstream page `upstream` fetches a relevance cursor can name as
    delivered: the most whose cursor, at the widest numbers and counters, is within MAX_CURSOR
    (at least one; 38 for the longest upstream cursor, MAX_LIMIT for the runtime's)."""
    widest = {
        "c": _MAX_NUMBER,
        "d": "0" * 16,
        "e": 10**12,
        "n": inp.MAX_LIMIT,
        "p": _MAX_NUMBER,
        "s": "",
        "t": "0" * _LOOP_HEX,
        "u": upstream,
    }
    base = len(_encode(widest))
    room = MAX_CURSOR - len(CURSOR_PREFIX) - 1 - _MAC_HEX
    for count in range(inp.MAX_LIMIT, 1, -1):
        if _b64_len(base + _b64_len(count * _SEEN_BYTES)) <= room:
            return count
    return 1


def _b64_len(size: int) -> int:
    """Characters of `size` bytes in unpadded base64."""
    return (4 * size + 2) // 3


def _pack(numbers: Sequence[int]) -> str:
    """Task numbers as one base64url string, 7 bytes each."""
    raw = b"".join(n.to_bytes(_SEEN_BYTES, "big") for n in numbers)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unpack(text: Any) -> tuple[int, ...]:
    """The numbers of a `_pack` string; raises ValueError or TypeError if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) % _SEEN_BYTES:
        raise ValueError("not whole numbers")
    return tuple(
        int.from_bytes(raw[i : i + _SEEN_BYTES], "big") for i in range(0, len(raw), _SEEN_BYTES)
    )


def page_request(
    args: dict[str, Any], workspace: str, cursors: Cursors
) -> tuple[dict[str, Any], PageState]:
    """The upstream arguments of a list call and where its page continues: a bridge cursor
    opened (its upstream page fetched again, with room for the items given from it already),
    an upstream cursor passed through (one the bridge could have handed out, else
    `cursor_invalid`). Under `relevance` the page asked is at most `relevance_window` long."""
    state = PageState(None, list_digest(args, workspace), effective_sort(args))
    upstream_args = dict(args)
    cursor = upstream_args.pop("cursor", None)
    delivered = 0
    if isinstance(cursor, str) and cursor.startswith(CURSOR_PREFIX):
        state, delivered = cursors.open(cursor, state.digest, state.sort)
    elif isinstance(cursor, str):
        if _UPSTREAM_CURSOR.fullmatch(cursor) is None:  # not one any page could have named
            raise cursors.invalid()
        state = state._replace(upstream_cursor=cursor)
    if state.upstream_cursor is not None:
        upstream_args["cursor"] = state.upstream_cursor
    limit = args.get("limit", inp.DEFAULT_LIMIT)
    asked = min(inp.MAX_LIMIT, limit + delivered)
    if state.sort == "relevance":
        asked = min(asked, relevance_window(state.upstream_cursor))
    upstream_args["limit"] = asked
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
    `nextCursor`: a bridge cursor, on the same upstream page after a cut, else on the
    upstream's next; raises NotAPage for a body without a list of items, a relevance page
    longer than its cursor could follow, or an upstream `nextCursor` that loops."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise NotAPage
    items: list[Any] = body["items"]
    upstream_next = upstream_cursor(body.get("nextCursor"))
    if state.sort == "relevance":
        if len(items) > relevance_window(state.upstream_cursor):  # more than was asked
            raise NotAPage
        # The numbers given that are on the page go last, so a cursor that must drop some
        # drops the others first (deleted, or pushed on by inserts, the upstream's to pass).
        on_page = {_number(i) for i in items}
        gone = [n for n in state.seen if n not in on_page]
        state = state._replace(seen=(*gone, *(n for n in state.seen if n in on_page)))
    fresh = undelivered(state, items)
    state = state._replace(dropped=len(items) - len(fresh))
    limit = args.get("limit", inp.DEFAULT_LIMIT)
    page = {k: v for k, v in body.items() if k != "nextCursor"}
    page["items"] = fresh[:limit]
    if len(fresh) > limit:
        page["nextCursor"] = cursors.issue(state, fresh[:limit])
    elif upstream_next is not None:
        page["nextCursor"] = _onward(state, items, fresh, upstream_next, cursors)
    return page, state


def _onward(
    state: PageState, items: list[Any], fresh: list[Any], upstream_next: str, cursors: Cursors
) -> str:
    """The cursor of the upstream's next page once this one is given to its end: past the
    last item given (under `relevance`: without this page's numbers, the last that fit)."""
    onward = state._replace(loop=_step(state.loop, state.upstream_cursor, upstream_next))
    if state.sort != "relevance":
        return cursors.issue(onward, fresh, upstream=upstream_next)
    # This page's numbers (against an upstream repeating them), then the ones given from it
    # before but not on it now, last, so they are kept first: inserts pushed them onward.
    numbers = dict.fromkeys(_number(i) for i in items)
    pushed = [n for n in state.seen if n not in numbers]
    return cursors.issue(onward._replace(seen=(*numbers, *pushed)), [], upstream=upstream_next)


def _step(
    loop: tuple[str, int, int] | None, current: str | None, onward: str
) -> tuple[str, int, int]:
    """One step of Brent's cycle detection over the upstream cursors of a walk: the state after
    moving from `current` to `onward`; raises NotAPage when `onward` was seen (a loop)."""
    saved, power, steps = loop if loop is not None else (_loop_digest(current), 1, 0)
    hare = _loop_digest(onward)
    if hmac.compare_digest(hare, saved):
        raise NotAPage
    steps += 1
    if steps >= power:  # move the saved cursor here, look twice as far
        saved, power, steps = hare, min(2 * power, _MAX_POWER), 0
    return saved, power, steps


def _loop_digest(upstream: str | None) -> str:
    return hashlib.sha256((upstream or "").encode()).hexdigest()[:_LOOP_HEX]


def load_cursor_key(directory: Path, *, create: bool = True) -> bytes:
    """The installation's cursor secret in `directory` (0700), created 0600 if absent; raises
    ValueError, saying what to do, when the file is not owner-only or does not hold it.

    Whatever stands at the name is refused at once in one line naming it, never read past
    _KEY_FILE_LIMIT bytes nor quoted: a link to nothing, a FIFO or a device (no hang, no endless
    read), bytes that are not hex. A link to an owner-only regular file is followed."""
    path = directory / KEY_FILE
    try:
        text = _read_key_file(path)
    except FileNotFoundError:
        if os.path.lexists(path):  # a link whose target is missing: creating would loop
            raise ValueError(
                f"the cursor key file {path} is a link to nothing; remove it and a new key "
                "is created"
            ) from None
        if not create:
            raise
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
            return load_cursor_key(directory, create=False)
        finally:
            draft.unlink(missing_ok=True)
        return secret
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


_KEY_FILE_LIMIT = 4096  # a key file is 65 bytes; more is not a key, and is not read on


def _read_key_file(path: Path) -> str:
    """The text of the key file at `path` (a regular file of this user's, owner-only; links
    followed), at most _KEY_FILE_LIMIT bytes of it ("" when it is not ASCII: no key); raises
    FileNotFoundError, ValueError (another user's, not owner-only, not a regular file) or
    OSError."""
    info, data = journal.read_small(path, _KEY_FILE_LIMIT)  # a FIFO does not block it
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"the cursor key file {path} is not a regular file; remove it and a new key is created"
        )
    if info.st_uid != os.geteuid():  # its owner could read it, and forge cursors
        raise ValueError(
            f"the cursor key file {path} belongs to another user; remove it and a new key "
            "is created"
        )
    if info.st_mode & 0o077:  # refused, not tightened, as the signing key is
        raise ValueError(
            f"the cursor key file {path} is readable by other users; run `chmod 600 {path}`"
        )
    if len(data) > _KEY_FILE_LIMIT or not data.isascii():
        return ""
    return data.decode()
