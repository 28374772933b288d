"""`python -m agentteam_cli`: the `agentteam-bridge` command."""

from ._cli import main

raise SystemExit(main())
