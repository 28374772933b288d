"""The store strips an idempotency key of what Python's ``str.strip()`` removes; the list it
is given stops at ``WHITESPACE_LAST`` (the start of every command builds it). No code point
after it may be whitespace under this Python's Unicode database."""

from __future__ import annotations

import sys

from agentteam_task_bridge.replay._fleet_calls import WHITESPACE_LAST


def test_no_code_point_after_the_last_one_listed_is_whitespace() -> None:
    after = [c for c in range(WHITESPACE_LAST + 1, sys.maxunicode + 1) if chr(c).isspace()]
    assert after == []
    assert chr(WHITESPACE_LAST).isspace()
