"""The import contract between our packages (tools/import_contract.py), on this repository and on
a small tree that breaks each rule once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.import_contract import ROOT, check

NS = "agentteam_task_bridge"
PACKAGES = ("bridge", "journal", "replay", "runtime")
BARE = "a bare name loads a second copy"
# (file, source, the rule broken or None when the import is allowed)
CASES: list[tuple[str, str, str | None]] = [
    ("journal/_a.py", f"from {NS} import bridge\n", "journal imports nothing of ours"),
    ("journal/_b.py", f"def f() -> None:\n    from {NS}.replay import verify\n", "journal imports"),
    ("runtime/_a.py", f"from {NS}.bridge import TOOLS\n", "runtime imports nothing of ours"),
    ("runtime/_b.py", f"import {NS}.journal\n", "runtime imports nothing of ours"),
    ("bridge/_a.py", f"from {NS} import replay\n", "never imports the offline auditor"),
    ("bridge/_b.py", f"from {NS}.replay._verify import verify\n", "never imports the offline"),
    ("bridge/_c.py", f"from {NS}.runtime import open_runtime\n", "only in bridge._embedded"),
    ("bridge/_embedded.py", f"from {NS}.runtime import open_runtime\n", None),
    ("bridge/_d.py", f"from . import _a\nfrom ._a import x\nfrom {NS} import journal\n", None),
    ("bridge/_e.py", "from .. import journal\n", None),
    ("bridge/_f.py", "from ..replay import verify\n", "never imports the offline auditor"),
    ("replay/_a.py", f"from {NS}.bridge._call import Bridge\n", "use the public names"),
    ("replay/_b.py", f"from {NS}.bridge import _registry\n", "use the public names"),
    ("replay/_c.py", f"def f() -> None:\n    import {NS}.bridge._paths\n", "use the public names"),
    (
        "replay/_d.py",
        f"from {NS} import bridge\nfrom {NS}.bridge import Bridge, __version__\n",
        None,
    ),
    ("replay/_e.py", "import journal\n", BARE),
    ("replay/_f.py", "from bridge import Bridge\n", BARE),
    ("tools/a.py", f"from {NS}.bridge._errors import CODES\n", "use the public names"),
    ("tools/b.py", "import runtime._tokens\n", BARE),
    (f"{NS}/cli/_a.py", f"from {NS}.bridge import _cli\n", "use the public names"),
    (f"{NS}/cli/_b.py", f"from {NS} import replay, runtime\nfrom {NS}.bridge import serve\n", None),
    ("tests/test_a.py", f"from {NS}.bridge._call import Bridge\n", "public names of bridge"),
    # Every package's public face, not only bridge's; a reach into a private part needs a reason.
    ("tests/test_bridge_a.py", f"from {NS}.bridge._call import Bridge\n", None),
    ("tests/test_journal_a.py", f"from {NS}.replay._render import x\n", "public names of replay"),
    ("replay/_g.py", f"from {NS}.journal._tlog import Leaf\n", "public names of journal"),
    ("bridge/_g.py", f"from {NS}.journal import _tlog\n", "public names of journal"),
    ("tools/c.py", f"from {NS}.replay._render import x\n", "public names of replay"),
    ("tools/bench/a.py", f"from {NS}.replay._render import x\n", None),
    (f"{NS}/cli/_c.py", f"from {NS}.journal._core import x\n", "public names of journal"),
    ("tests/test_b.py", "def f() -> None:\n    import replay\n", BARE),
    ("tests/test_c.py", "from journal import open_reader\n", BARE),
]


def _tree(root: Path) -> None:
    """The repository's shape: the top-level folders and the namespace's links to them."""
    (root / NS / "cli").mkdir(parents=True)
    (root / NS / "__init__.py").write_text("")
    (root / NS / "cli" / "__init__.py").write_text("")
    for package in (*PACKAGES, "tools", "tests"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    (root / "tools" / "bench").mkdir()
    for package in PACKAGES:
        (root / NS / package).symlink_to(Path("..") / package)


def test_this_repository_keeps_the_import_contract() -> None:
    assert [str(v) for v in check(ROOT)] == []


@pytest.mark.parametrize(("file", "source", "rule"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_refuses_its_import(
    tmp_path: Path, file: str, source: str, rule: str | None
) -> None:
    _tree(tmp_path)
    (tmp_path / file).write_text(source)
    found = check(tmp_path)
    if rule is None:
        assert found == []
    else:
        assert len(found) == 1 and rule in found[0].rule and found[0].path == file, found


def test_the_command_names_each_violation_and_fails(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "bridge" / "_server.py").write_text(f"import os\n\nfrom {NS} import replay\n")
    done = subprocess.run(
        [sys.executable, "-m", "tools.import_contract", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"bridge/_server.py:3: imports {NS}.replay: the server never imports the offline auditor"
    ]
