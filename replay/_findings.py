"""What every check reports: a broken rule, at the journal and sequence number where it shows."""

from __future__ import annotations

import msgspec

__all__ = ["Finding"]


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One broken rule. ``seq`` is None when it concerns no single event (e.g. a checkpoint
    that names another journal); ``call_id`` names the call when the rule is about one."""

    journal_id: str | None
    seq: int | None
    rule: str
    detail: str
    call_id: str | None = None

    @property
    def where(self) -> str:
        journal = (self.journal_id or "?")[:8]
        return f"{journal}:{self.seq}" if self.seq is not None else journal
