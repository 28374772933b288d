"""The import contract between our packages, checked from the source (no import is executed).

Our packages are the subpackages of ``agentteam_task_bridge`` (named below without that prefix)
and the repository's ``tools``:

    journal        imports nothing of ours (not even the contract module's users)
    runtime        imports nothing of ours: it is the far side of the wire
    bridge         imports journal; runtime only in bridge/_embedded.py (`serve --embedded`);
                   never replay, cli or tools
    everyone else  uses each package's public face (its ``__init__``): no ``pkg._x`` module
                   outside ``pkg/`` (tools and tests included), but where ``REACHES`` names the
                   importer and the private module with the reason (a package's own tests,
                   a benchmark timing a part, a test oracle)
    everyone       imports them through the namespace (``agentteam_task_bridge.journal``), never
                   by a bare top-level name (``import journal``): from the repository's root the
                   bare name loads a second copy of every module (its classes are not the
                   namespace's, so ``except`` misses them), and installed it is PyPI's
                   ``journal``.

Every ``import`` and ``from ... import`` counts, also inside functions and under
``TYPE_CHECKING``. ``python -m tools.import_contract [ROOT]`` prints one line per violation and
exits 1 when there is any.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "agentteam_task_bridge"
# (importing package, imported package) pairs that are refused, with the rule's reason.
_REFUSED: dict[tuple[str, str], str] = {
    ("runtime", "bridge"): "runtime imports nothing of ours",
    ("runtime", "journal"): "runtime imports nothing of ours",
    ("runtime", "replay"): "runtime imports nothing of ours",
    ("runtime", "cli"): "runtime imports nothing of ours",
    ("bridge", "replay"): "the server never imports the offline auditor",
    ("bridge", "cli"): "the command line is built over the bridge, not under it",
}
# Who may reach into another package's private modules, and why: (importer path glob, private
# module glob, reason). "{pkg}" stands for each package: its own tests test its parts.
REACHES: list[tuple[str, str, str]] = [
    ("tests/test_{pkg}_*.py", "{pkg}._*", "a package's own tests test its private parts"),
    ("tests/bridge_inprocess.py", "bridge._*", "the in-process bridge fixture runs its parts"),
    ("tests/fleet_helpers.py", "journal._*", "rewrites a journal's leaves as the writer does"),
    ("tests/journal_helpers/__init__.py", "journal._*", "makes a file as schema 9 made it"),
    ("tests/replay_helpers.py", "replay._cli", "runs the replay command line in-process"),
    ("tests/test_secret*.py", "*._*", "secret screening is checked part by part"),
    (
        "tests/test_bridge_secret_formats.py",
        "journal._redact",
        "the journal's rules are the oracle",
    ),
    ("tests/test_cli_*.py", "replay._cli_parser", "the command lines share one parser's rules"),
    ("tests/test_contract_lint.py", "bridge._*", "the lint reads the registry's private tables"),
    ("tests/test_demo.py", "cli._*", "the demo's parts, run in-process"),
    ("tests/test_fleet_*.py", "replay._*", "the fleet is replay's: reports, store, witness"),
    ("tests/test_inventory.py", "bridge._*", "the inventory is generated from private tables"),
    ("tests/test_readme.py", "*._cli*", "the README's commands run in-process"),
    ("tests/test_replay_*.py", "runtime._create", "an upstream create built as the runtime does"),
    ("tests/test_replay_rerun.py", "bridge._call", "rerun drives the bridge's call path"),
    ("tools/bench/*.py", "replay._*", "benchmarks time replay's parts one by one"),
    ("agentteam_task_bridge/cli/_cli.py", "runtime._local", "the local runtime's command"),
]
_EMBEDDED = "bridge._embedded"  # the one bridge module that starts the reference runtime
_BARE = f"import it as {NAMESPACE}.{{name}}: a bare name loads a second copy of our modules"


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.imported}: {self.rule}"


def our_packages(root: Path) -> frozenset[str]:
    """The namespace's subpackages in ``root`` (``tools`` is checked but imported by no one)."""
    namespace = root / NAMESPACE
    if not namespace.is_dir():
        return frozenset()
    return frozenset(p.name for p in namespace.iterdir() if (p / "__init__.py").is_file())


def _sources(root: Path) -> Iterator[tuple[str, Path, str]]:
    """(module name, file, path to print) of every file checked: the namespace's subpackages
    (printed by their real folder, ``bridge/_call.py``), then tools/ and tests/."""
    for package in sorted(our_packages(root)):
        folder = root / NAMESPACE / package
        for path in sorted(folder.rglob("*.py")):
            shown = path.resolve().relative_to(root.resolve())
            module = ".".join((NAMESPACE, package, *path.relative_to(folder).with_suffix("").parts))
            yield module.removesuffix(".__init__"), path, shown.as_posix()
    for top in ("tools", "tests"):
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            yield ".".join(parts).removesuffix(".__init__"), path, path.relative_to(root).as_posix()


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


def reach_reason(shown: str, private: str) -> str | None:
    """Why the file at ``shown`` may import the private module ``private`` (``pkg._x``), or
    None when it may not."""
    package = private.split(".")[0]
    for importer, imported, reason in REACHES:
        if fnmatch.fnmatch(shown, importer.format(pkg=package)) and fnmatch.fnmatch(
            private, imported.format(pkg=package)
        ):
            return reason
    return None


def _rule(importer: str, imported: str, ours: frozenset[str], shown: str = "") -> str | None:
    top = imported.split(".")[0]
    if top in ours:
        return _BARE.format(name=top)
    if top != NAMESPACE:
        return None
    importer = importer.removeprefix(f"{NAMESPACE}.")
    imported = imported.removeprefix(f"{NAMESPACE}.")
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
    private = len(parts) > 1 and parts[1].startswith("_") and not parts[1].startswith("__")
    if private and reach_reason(shown, ".".join(parts[:2])) is None:
        return f"outside {theirs}/, use the public names of {theirs}/__init__.py"
    return None


def check(root: Path = ROOT) -> list[Violation]:
    """Every import in ``root``'s packages, tools and tests that breaks the contract."""
    ours = our_packages(root)
    found: list[Violation] = []
    for module, path, shown in _sources(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for line, imported in _imported(module, path.name == "__init__.py", tree):
            rule = _rule(module, imported, ours, shown)
            if rule is not None:
                found.append(Violation(shown, line, imported, rule))
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
