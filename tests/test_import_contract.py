"""The import contract between our packages (tools/import_contract.py), on this repository and on
a small tree that breaks each rule once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.import_contract import ROOT, check

# (file, source, the rule broken or None when the import is allowed)
CASES: list[tuple[str, str, str | None]] = [
    ("journal/_a.py", "import bridge\n", "journal imports nothing of ours"),
    ("journal/_b.py", "def f() -> None:\n    from replay import verify\n", "journal imports"),
    ("runtime/_a.py", "from bridge import TOOLS\n", "runtime imports nothing of ours"),
    ("runtime/_b.py", "import journal\n", "runtime imports nothing of ours"),
    ("bridge/_a.py", "import replay\n", "never imports the offline auditor"),
    ("bridge/_b.py", "from replay._verify import verify\n", "never imports the offline auditor"),
    ("bridge/_c.py", "from runtime import open_runtime\n", "only in bridge._embedded"),
    ("bridge/_embedded.py", "from runtime import open_runtime\n", None),
    ("bridge/_d.py", "from . import _a\nfrom ._a import x\nimport journal\n", None),
    ("replay/_a.py", "from bridge._call import Bridge\n", "use the public names"),
    ("replay/_b.py", "from bridge import _registry\n", "use the public names"),
    ("replay/_c.py", "def f() -> None:\n    import bridge._paths\n", "use the public names"),
    ("replay/_d.py", "import bridge\nfrom bridge import Bridge, __version__\n", None),
    ("tools/a.py", "from bridge._errors import CODES\n", "use the public names"),
    ("agentteam_cli/_a.py", "from bridge import _cli\n", "use the public names"),
    ("agentteam_cli/_b.py", "import replay\nimport runtime\nfrom bridge import serve\n", None),
]


def test_this_repository_keeps_the_import_contract() -> None:
    assert [str(v) for v in check(ROOT)] == []


@pytest.mark.parametrize(("file", "source", "rule"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_refuses_its_import(
    tmp_path: Path, file: str, source: str, rule: str | None
) -> None:
    for package in ("agentteam_cli", "bridge", "journal", "replay", "runtime", "tools"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / file).write_text(source)
    found = check(tmp_path)
    if rule is None:
        assert found == []
    else:
        assert len(found) == 1 and rule in found[0].rule and found[0].path == file, found


def test_the_command_names_each_violation_and_fails(tmp_path: Path) -> None:
    for package in ("bridge", "replay"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "bridge" / "_server.py").write_text("import os\n\nimport replay\n")
    done = subprocess.run(
        [sys.executable, "-m", "tools.import_contract", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "bridge/_server.py:3: imports replay: the server never imports the offline auditor"
    ]
