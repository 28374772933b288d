"""`python -m agentteam_task_bridge.cli`: the `agentteam-bridge` command."""

from ._cli import main

raise SystemExit(main())
