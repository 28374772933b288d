"""The bridge's exceptions, under one root (as httpx's ``HTTPError``)::

    BridgeError                   what the bridge raises on purpose (a bug raises anything else)
     ├── ConfigError              the launch configuration is incomplete or wrong; says what to set
     ├── NetworkConfigError       a proxy or CA setting that cannot be used (also a ValueError)
     ├── CredentialError          the configured token source gave no token
     ├── JournalFailed            the journal failed; ``stage``: at ``open``, a ``write``, or the
     │                            ``session_end`` (the session ran, its end is not journaled)
     ├── ToolError                a classified failure, answered to the model (bridge._errors)
     ├── TransportFailure         no HTTP answer from upstream (bridge._http11)
     ├── OutOfOrder               an event the call grammar does not allow there (a bug in the
     │                            call flow, caught at once: bridge._call_record)
     └── NotAPage                 an upstream list answer with no list (also a ValueError)

"The journal failed" has one name here: the journal package's ``journal.JournalUnavailable``
becomes a ``JournalFailed`` at the bridge's journal port (:mod:`bridge._journaling`), and the
command line tells the stages apart by ``stage`` (exit 2 at ``open``, 1 after the session).
Each class is defined beside the code that raises it; this module holds the root and the
journal's failure, and imports nothing of the bridge.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BridgeError", "JournalFailed", "JournalStage"]

JournalStage = Literal["open", "write", "session_end"]


class BridgeError(Exception):
    """The root of every exception the bridge raises on purpose."""


class JournalFailed(BridgeError):
    """The journal failed. ``reason`` (a write's: ``disk_full``, ``locked``, ``io_error``...)
    says why; ``stage`` when: at ``open`` (the message names the path, why, and what to change),
    a ``write`` whose event did not land, or the ``session_end`` that could not be journaled."""

    def __init__(
        self, message: str, reason: str = "io_error", *, stage: JournalStage = "write"
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.stage: JournalStage = stage
