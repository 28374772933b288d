"""Credentials a model writes into a task never reach the journal; the model gets them back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentteam_task_bridge.journal._redact import secret_marker

from .bridge_harness import open_bridge
from .test_journal_redaction import FORMATS


def _journal_bytes(path: Path) -> bytes:
    """Every file the journal is made of: the database, its WAL, the exported checkpoint."""
    files = [p for p in path.parent.iterdir() if p.name.startswith(path.name) and p.is_file()]
    assert path in files
    return b"".join(p.read_bytes() for p in files)


async def test_credentials_in_titles_and_descriptions_reach_the_journal_only_as_digests(
    file_runtime: Any, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    results = []
    async with open_bridge(file_runtime.bridge_env(), path, runtime=file_runtime) as bridge:
        for kind, (first, second) in sorted(FORMATS.items()):
            title = f"{kind}: {first}" if len(first) <= 150 else kind
            description = f"the model pasted {first} and also {second} here"
            created = await bridge.ok(
                "task_create",
                {"channel": "general", "tasks": [{"title": title, "description": description}]},
            )
            number = created["data"]["tasks"][0]["number"]
            task = await bridge.ok("task_get", {"channel": "general", "number": number})
            results.append((first, second, created, task))
    # The model's own data comes back to it whole: only the journal is redacted.
    for first, second, created, task in results:
        assert task["data"]["task"]["description"] == (
            f"the model pasted {first} and also {second} here"
        )
        assert first in str(created) or len(first) > 150
    data = _journal_bytes(path)  # the session is over: everything it wrote is there
    for kind, (first, second) in FORMATS.items():
        for value in (first, second):
            # Not the value, nor any long piece of it (a private key's body lines).
            pieces = [value, *(line for line in value.splitlines() if len(line) >= 16)]
            assert not [p for p in pieces if p.encode() in data], kind
        digests = {secret_marker(first), secret_marker(second)}
        assert len(digests) == 2 and all(d.encode() in data for d in digests), kind
    assert re.search(rb"\[REDACTED:sha256:[0-9a-f]{12}\]", data)
