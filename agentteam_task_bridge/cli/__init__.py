"""The `agentteam-bridge` command: an application of ``bridge``, ``runtime``, ``journal`` and
``replay``, kept apart so that the server imports neither the replay auditor nor (beyond
``serve --embedded``) the reference runtime.

``main(argv)`` runs it (``python -m agentteam_task_bridge.cli``); ``build_parser()`` is its
argument parser. Importing this package imports neither: for ``serve``, `main` holds the stop
signals before the imports (a few tenths of a second), so that a client ending the session
while the bridge still starts ends it cleanly (``bridge._lifecycle.note_early_signals``
continues what was held).
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

__all__ = ["build_parser", "main"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Held:
    """A stop signal's handler until `serve` takes over: it notes the signal's name."""

    def __init__(self) -> None:
        self.received: list[str] = []  # continued by `bridge._lifecycle.note_early_signals`

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """`agentteam-bridge ARGS`: the exit status."""
    if (sys.argv[1:] if argv is None else argv)[:1] == ["serve"]:
        held = _Held()
        for signum in _STOP_SIGNALS:
            signal.signal(signum, held)
    from ._cli import main as run

    return run(argv)


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    from ._cli import build_parser as build

    return build()
