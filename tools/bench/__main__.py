"""``python -m tools.bench``: every benchmark, one table."""

from ._cli import main

raise SystemExit(main())
