"""``python -m tools.reliability``: the reliability and security suite at length."""

from ._cli import main

raise SystemExit(main())
