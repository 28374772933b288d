"""Every "section N.N" the code cites resolves in docs/contract.md, the contract's rules in this
project's words (the normative text is not in the repository)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"\b[Ss]ections? (\d+(?:\.\d+)?(?:(?:, | and )\d+(?:\.\d+)?)*)")
FOLDERS = ("bridge", "journal", "replay", "runtime", "agentteam_task_bridge/cli", "tools")


def _headings() -> set[str]:
    text = (ROOT / "docs" / "contract.md").read_text()
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.MULTILINE))


def _citations() -> list[tuple[str, str]]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for match in CITED.finditer(path.read_text()):
                for number in re.split(r", | and ", match.group(1)):
                    found.append((f"{folder}/{path.name}", number))
    return found


def test_every_section_the_code_cites_is_in_docs_contract_md() -> None:
    headings = _headings()
    citations = _citations()
    assert len(citations) >= 20
    missing = sorted({(where, n) for where, n in citations if n not in headings})
    assert missing == []


def test_the_headings_are_numbered_as_the_contract_numbers_them() -> None:
    headings = _headings()
    assert {"4", "4.2", "5.4", "7.2", "8.2", "8.3", "9.1", "11", "12", "13", "13.1"} <= headings
    for heading in headings:
        if "." in heading:
            assert heading.split(".")[0] in headings, heading  # a subsection under its section
