"""Files generated from code: written by a tool, or checked against what the code would write.

``tools.inventory``, ``tools.errors_doc`` and ``tools.replay_schemas`` each render their files
and hand them to :func:`write_or_check`, so "out of date" means the same thing everywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(tool: str, files: Mapping[Path, str], argv: Sequence[str] | None = None) -> int:
    """Write ``files`` (path -> text), or with ``--check`` in ``argv`` compare them; 0 or 1.

    Prints one line: which files were written or are current (stdout), or which are out of date
    and the command that regenerates them (stderr, exit status 1).
    """
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    names = ", ".join(_name(path) for path in files)
    if not check:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        print(f"{tool}: {names} written")
        return 0
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if stale:
        listed = ", ".join(_name(path) for path in stale)
        print(f"{tool}: {listed} out of date; run `python -m tools.{tool}`", file=sys.stderr)
        return 1
    print(f"{tool}: {names} current")
    return 0


def _name(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
