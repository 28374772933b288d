"""Bridge cursors (issue 28): a page cut to its budget continues after the last task it gave.

A bridge cursor names the last task it delivered by its sort key, and is signed with the
installation's key: updates, deletes and inserts between pages and another `limit` never skip or
repeat a task, and a forged, edited or expired cursor is `cursor_invalid`. The property test
interleaves random creates, updates and deletes between pages, at random limits, with tasks of
random byte sizes (4-byte text, titles and labels at their maxima) so pages are cut by the
collection budget, not only by `limit`.
"""

from __future__ import annotations

import base64
import json
import os
import random
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentteam_task_bridge.bridge._cursor import (
    CURSOR_PREFIX,
    Cursors,
    PageState,
    list_digest,
    load_cursor_key,
)
from agentteam_task_bridge.runtime import RuntimeConfig, open_runtime

from .bridge_harness import BridgeSession
from .bridge_inprocess import inprocess_session

WIDE = "\U0001f600"  # four UTF-8 bytes
BIG_TITLE = WIDE * 200
BIG_LABELS = [f"{i:02d}" + WIDE * 48 for i in range(20)]
PRIORITIES = ["low", "normal", "high", "urgent"]


async def _create(bridge: BridgeSession, channel: str, task: dict[str, Any]) -> int:
    created = await bridge.ok("task_create", {"channel": channel, "tasks": [task]})
    number: int = created["data"]["tasks"][0]["number"]
    return number


def _task(rng: random.Random, i: int) -> dict[str, Any]:
    """A task of a random size: a few bytes, or titles and labels at their maxima."""
    if rng.random() < 0.75:
        task: dict[str, Any] = {"title": WIDE * rng.randint(190, 199) + f"{i % 10}"}
        task["labels"] = BIG_LABELS[: rng.randint(10, 20)]
    else:
        task = {"title": f"small {i}"}
    task["priority"] = rng.choice(PRIORITIES)
    return task


async def _pages(
    bridge: BridgeSession, arguments: dict[str, Any], rng: random.Random, between: Any
) -> tuple[list[int], int]:
    """Every number the pages return, calling `between` after each page; and how many pages
    the byte budget cut."""
    returned: list[int] = []
    cursor: str | None = None
    cut = 0
    for _ in range(500):  # bounded: a loop that never ends is a failure
        args = {**arguments, "limit": rng.choice([rng.randint(1, 12), *[rng.randint(12, 100)] * 3])}
        if cursor is not None:
            args["cursor"] = cursor
        page = await bridge.ok("task_list", args)
        returned += [item["number"] for item in page["data"]["items"]]
        cut += "$.data.items" in page["meta"].get("truncated_fields", [])
        cursor = page["meta"].get("next_cursor")
        if cursor is None:
            return returned, cut
        await between()
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize(("seed", "sort"), [(1, None), (2, "priority"), (3, None), (4, "number")])
async def test_pages_return_every_task_present_throughout_exactly_once(
    bridge: BridgeSession, seed: int, sort: str | None
) -> None:
    rng = random.Random(seed)
    channel = "eng"
    present: set[int] = set()
    for i in range(rng.randint(40, 60)):
        present.add(await _create(bridge, channel, _task(rng, i)))
    alive = set(present)

    async def between() -> None:
        for _ in range(rng.randint(0, 3)):
            move = rng.random()
            if move < 0.3:
                alive.add(await _create(bridge, channel, _task(rng, 1000)))
            elif move < 0.65 and alive:
                number = rng.choice(sorted(alive))
                patch: dict[str, Any] = {"title": rng.choice([BIG_TITLE, "short"])}
                if rng.random() < 0.5:
                    patch["labels"] = BIG_LABELS[: rng.randint(0, 20)]
                if rng.random() < 0.2:  # leaves the open view: no longer present throughout
                    patch["status"] = "done"
                    alive.discard(number)
                    present.discard(number)
                await bridge.ok(
                    "task_update", {"channel": channel, "number": number, "patch": patch}
                )
            elif alive:
                number = rng.choice(sorted(alive))
                await bridge.ok("task_delete", {"channel": channel, "number": number})
                alive.discard(number)
                present.discard(number)

    arguments: dict[str, Any] = {"channel": channel}
    if sort is not None:
        arguments["sort"] = sort
    returned, cut_pages = await _pages(bridge, arguments, rng, between)
    counts = Counter(returned)
    assert [n for n, c in counts.items() if c > 1] == []  # nothing twice
    assert sorted(present - set(returned)) == []  # nothing present throughout is skipped
    assert cut_pages > 0, (returned, cut_pages)  # the byte budget, not only `limit`, ended pages


async def _big_board(bridge: BridgeSession, count: int) -> None:
    for _ in range(count):
        await _create(bridge, "eng", {"title": BIG_TITLE, "labels": BIG_LABELS})


async def test_an_update_between_pages_skips_nothing(bridge: BridgeSession) -> None:
    # The audit's B24: 31 large tasks, a page cut after #9, #2 moved to done, then the rest.
    await _big_board(bridge, 31)
    first = await bridge.ok("task_list", {"channel": "eng", "limit": 31})
    kept = [item["number"] for item in first["data"]["items"]]
    assert kept == list(range(1, len(kept) + 1)) and len(kept) < 31
    await bridge.ok("task_update", {"channel": "eng", "number": 2, "patch": {"status": "done"}})
    rest = await bridge.ok(
        "task_list", {"channel": "eng", "limit": 31, "cursor": first["meta"]["next_cursor"]}
    )
    assert rest["data"]["items"][0]["number"] == len(kept) + 1


async def test_another_limit_continues_after_the_last_task_given(bridge: BridgeSession) -> None:
    # The audit's B23: a cut page continued with a smaller limit.
    await _big_board(bridge, 31)
    first = await bridge.ok("task_list", {"channel": "eng", "limit": 31})
    last = first["data"]["items"][-1]["number"]
    cursor = first["meta"]["next_cursor"]
    seen = []
    for _ in range(3):
        page = await bridge.ok("task_list", {"channel": "eng", "limit": 3, "cursor": cursor})
        seen += [item["number"] for item in page["data"]["items"]]
        cursor = page["meta"]["next_cursor"]
    assert seen == list(range(last + 1, last + 10))


def _edited(cursor: str, change: dict[str, Any]) -> str:
    body, _, mac = cursor[len(CURSOR_PREFIX) :].rpartition(".")
    state = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    state.update(change)
    raw = base64.urlsafe_b64encode(json.dumps(state).encode()).rstrip(b"=").decode()
    return CURSOR_PREFIX + raw + "." + mac


async def test_a_forged_or_edited_cursor_is_invalid(bridge: BridgeSession) -> None:
    await _big_board(bridge, 12)
    first = await bridge.ok("task_list", {"channel": "eng", "limit": 12})
    cursor: str = first["meta"]["next_cursor"]
    assert cursor.startswith(CURSOR_PREFIX)
    unsigned = base64.urlsafe_b64encode(b'{"d":"x","s":1,"u":null}').decode().rstrip("=")
    forged = [
        _edited(cursor, {"k": [1]}),
        _edited(cursor, {"n": 0}),
        _edited(cursor, {"e": 2**40}),
        _edited(cursor, {"s": True}),
        cursor[:-1] + ("0" if cursor[-1] != "0" else "1"),
        cursor.rpartition(".")[0],
        CURSOR_PREFIX + unsigned,  # the unsigned cursors of earlier versions
        CURSOR_PREFIX + "é.00",
    ]
    for bad in forged:
        error = await bridge.fails(
            "task_list", {"channel": "eng", "limit": 12, "cursor": bad}, code="cursor_invalid"
        )
        assert error["field_errors"] == {"$.cursor": error["field_errors"]["$.cursor"]}
        again = error["suggested_action"]
        assert again == {"tool": "task_list", "arguments": {"channel": "eng", "limit": 12}}
    await bridge.fails(
        "task_list",
        {"channel": "eng", "status": "done", "cursor": cursor},
        code="cursor_mismatch",
    )


def test_an_expired_cursor_is_invalid() -> None:
    now = [1_000_000.0]
    cursors = Cursors(b"k" * 32, clock=lambda: now[0])
    state = PageState(None, "digest")
    cursor = cursors.issue(state, [{"number": 3}])
    opened, delivered = cursors.open(cursor, "digest", "number")
    assert (opened.after, delivered) == ((3,), 1)
    now[0] += 24 * 3600 + 1
    with pytest.raises(Exception, match="cursor") as caught:
        cursors.open(cursor, "digest", "number")
    assert getattr(caught.value, "code", None) == "cursor_invalid"
    other = Cursors(b"o" * 32, clock=lambda: now[0])
    with pytest.raises(Exception) as caught:
        other.open(Cursors(b"k" * 32).issue(state, [{"number": 3}]), "digest", "number")
    assert getattr(caught.value, "code", None) == "cursor_invalid"


def test_the_cursor_key_is_owner_only_and_kept(tmp_path: Path) -> None:
    directory = tmp_path / "config" / "agentteam-bridge"
    old = os.umask(0)
    try:
        key = load_cursor_key(directory)
    finally:
        os.umask(old)
    assert stat.S_IMODE((directory / "cursor.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert load_cursor_key(directory) == key and len(key) == 32
    (directory / "cursor.key").chmod(0o644)
    with pytest.raises(ValueError, match="readable by other users; run `chmod 600"):
        load_cursor_key(directory)
    (directory / "cursor.key").chmod(0o600)
    (directory / "cursor.key").write_text("not hex\n")
    with pytest.raises(ValueError, match="does not hold 32 bytes"):
        load_cursor_key(directory)


async def test_a_cursor_outlives_the_session_that_issued_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with open_runtime(RuntimeConfig()) as runtime:
        async with inprocess_session(runtime, path) as first:
            await _big_board(first, 12)
            page = await first.ok("task_list", {"channel": "eng", "limit": 12})
        last = page["data"]["items"][-1]["number"]
        async with inprocess_session(runtime, path) as second:
            rest = await second.ok(
                "task_list", {"channel": "eng", "limit": 12, "cursor": page["meta"]["next_cursor"]}
            )
    assert rest["data"]["items"][0]["number"] == last + 1


@pytest.mark.wire
async def test_serve_signs_cursors_with_the_installations_key(
    bridge: BridgeSession, tmp_path: Path
) -> None:
    await _big_board(bridge, 12)
    page = await bridge.ok("task_list", {"channel": "eng", "limit": 12})
    last = page["data"]["items"][-1]["number"]
    key = tmp_path / "config" / "agentteam-bridge" / "cursor.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    cursors = Cursors(load_cursor_key(key.parent))
    digest = list_digest({"channel": "eng"}, bridge.runtime.workspace_id)
    opened, _ = cursors.open(page["meta"]["next_cursor"], digest, "number")
    assert opened.after == (last,)
    rest = await bridge.ok(
        "task_list", {"channel": "eng", "limit": 12, "cursor": page["meta"]["next_cursor"]}
    )
    assert rest["data"]["items"][0]["number"] == last + 1


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "gone")


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def _binary(path: Path) -> None:
    path.write_bytes(b"\xff\xfe" + bytes(range(62)))
    path.chmod(0o600)


def _empty(path: Path) -> None:
    path.touch(mode=0o600)
    path.chmod(0o600)


def _oversized(path: Path) -> None:
    path.write_text(os.urandom(32).hex() * 20_000)  # 1.3 MB of hex digits
    path.chmod(0o600)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_dangling, "is a link to nothing"),
        (_fifo, "is not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "is not a regular file"),
        (lambda p: p.symlink_to("/dev/null"), "is not a regular file"),
        (_binary, "does not hold 32 bytes"),
        (_oversized, "does not hold 32 bytes"),
        (_empty, "does not hold 32 bytes"),
    ],
    ids=["dangling-link", "fifo", "dev-zero", "dev-null", "binary", "1.3MB", "empty"],
)
def test_a_cursor_key_file_that_is_not_a_key_is_refused_at_once(
    tmp_path: Path, make: Any, says: str
) -> None:
    """Whatever stands at `cursor.key` (a link to nothing, a FIFO, a device, bytes that are not
    text, a huge file), the start is refused in one line naming the file: no hang, no recursion,
    no endless read, and nothing of the file's content in the message."""
    directory = tmp_path / "cfg"
    directory.mkdir(mode=0o700)
    path = directory / "cursor.key"
    make(path)
    with pytest.raises(ValueError) as caught:
        load_cursor_key(directory)
    message = str(caught.value)
    assert says in message and str(path) in message, message
    assert "0x" not in message and "\\x" not in message
    assert [p.name for p in directory.iterdir()] == ["cursor.key"]  # no draft left behind


def test_a_cursor_key_reached_through_a_link_to_an_owner_only_file_is_used(
    tmp_path: Path,
) -> None:
    """A key kept elsewhere (a dotfiles checkout) and linked into place is still the key."""
    directory = tmp_path / "cfg"
    directory.mkdir(mode=0o700)
    secret = os.urandom(32)
    real = tmp_path / "dotfiles.key"
    real.write_text(secret.hex() + "\n")
    real.chmod(0o600)
    (directory / "cursor.key").symlink_to(real)
    assert load_cursor_key(directory) == secret


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_cursor_key_file_of_another_user_is_refused(tmp_path: Path) -> None:
    """A key path in a shared folder: a key file another user put there, owner-only (to them)
    and readable by root, is theirs to read, so they could forge cursors: refused."""
    directory = tmp_path / "cfg"
    directory.mkdir(mode=0o700)
    path = directory / "cursor.key"
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(ValueError, match="belongs to another user"):
        load_cursor_key(directory)
