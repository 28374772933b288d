"""The import contract between our packages, checked from the source (no import is executed).

    journal        imports nothing of ours (not even the contract module's users)
    runtime        imports nothing of ours: it is the far side of the wire
    bridge         imports journal; runtime only in bridge/_embedded.py (`serve --embedded`);
                   never replay, agentteam_cli or tools
    everyone else  uses ``bridge``'s public face: no ``bridge._x`` module outside ``bridge/``

Every ``import`` and ``from ... import`` counts, also inside functions and under
``TYPE_CHECKING``. Tests are not checked (they may test internals). ``python -m
tools.import_contract [ROOT]`` prints one line per violation and exits 1 when there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (importing package, imported package) pairs that are refused, with the rule's reason.
_REFUSED: dict[tuple[str, str], str] = {
    ("runtime", "bridge"): "runtime imports nothing of ours",
    ("runtime", "journal"): "runtime imports nothing of ours",
    ("runtime", "replay"): "runtime imports nothing of ours",
    ("runtime", "agentteam_cli"): "runtime imports nothing of ours",
    ("bridge", "replay"): "the server never imports the offline auditor",
    ("bridge", "agentteam_cli"): "the command line is built over the bridge, not under it",
}
_EMBEDDED = "bridge._embedded"  # the one bridge module that starts the reference runtime
_SKIPPED = frozenset({"tests", "build", "dist", ".venv", ".venv-lowest"})


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.imported}: {self.rule}"


def our_packages(root: Path) -> frozenset[str]:
    """Top-level directories of ``root`` that are Python packages (tools/ included)."""
    return frozenset(
        p.name for p in root.iterdir() if (p / "__init__.py").is_file() and p.name not in _SKIPPED
    )


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(module: str, is_package: bool, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of everything a module imports, ``from x import y`` as
    ``x.y`` (y may be a submodule, as in ``from bridge import _call``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _rule(importer: str, imported: str, ours: frozenset[str]) -> str | None:
    mine, theirs = importer.split(".")[0], imported.split(".")[0]
    if theirs not in ours or mine == theirs:
        return None
    if mine == "journal":
        return "journal imports nothing of ours"
    refused = _REFUSED.get((mine, theirs))
    if refused is not None:
        return refused
    if (mine, theirs) == ("bridge", "runtime") and importer != _EMBEDDED:
        return f"bridge starts the runtime only in {_EMBEDDED} (serve --embedded)"
    parts = imported.split(".")
    if (
        theirs == "bridge"
        and len(parts) > 1
        and parts[1].startswith("_")
        and parts[1] != "__version__"
    ):
        return "outside bridge/, use the public names of bridge/__init__.py"
    return None


def check(root: Path = ROOT) -> list[Violation]:
    """Every import in ``root``'s packages that breaks the contract, in path order."""
    ours = our_packages(root)
    found: list[Violation] = []
    for package in sorted(ours):
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(root, path)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for line, imported in _imported(module, path.name == "__init__.py", tree):
                rule = _rule(module, imported, ours)
                if rule is not None:
                    relative = path.relative_to(root).as_posix()
                    found.append(Violation(relative, line, imported, rule))
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else ROOT
    violations = check(root)
    for v in violations:
        print(v)
    if not violations:
        print(f"import_contract: {', '.join(sorted(our_packages(root)))} keep the contract")
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
