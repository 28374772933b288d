"""The `agentteam-bridge` command: an application of ``bridge``, ``runtime``, ``journal`` and
``replay``, kept apart so that the server imports neither the replay auditor nor (beyond
``serve --embedded``) the reference runtime.

``main(argv)`` runs it (``python -m agentteam_task_bridge.cli``); ``build_parser()`` is its
argument parser.
"""

from ._cli import build_parser, main

__all__ = ["build_parser", "main"]
