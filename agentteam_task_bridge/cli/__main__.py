"""`python -m agentteam_task_bridge.cli`: the `agentteam-bridge` command."""

from . import main

raise SystemExit(main())
