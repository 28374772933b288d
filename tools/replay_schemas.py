"""Published JSON Schemas of `agentteam-replay --json`: `docs/replay-json/<command>.schema.json`.

Each schema is generated from the result type the command's function returns (msgspec's schema
of the Struct, JSON Schema 2020-12), plus the ``ok`` verdict that ``--json`` puts first where a
result has one. `python -m tools.replay_schemas` rewrites them; `--check` fails when one differs
from what the code generates, so the published shapes can never drift from the types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from agentteam_task_bridge import replay
from tools._generated import write_or_check

DIRECTORY = Path(__file__).resolve().parent.parent / "docs" / "replay-json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Each `agentteam-replay` command and the type its `--json` output encodes.
RESULTS: dict[str, type[msgspec.Struct]] = {
    "verify": replay.VerifyResult,
    "calls": replay.CallList,
    "show": replay.CallDetail,
    "idempotency": replay.IdempotencyResult,
    "deprecations": replay.DeprecationReport,
    "audit": replay.AuditReport,
    "report": replay.Report,
    "rerun": replay.RerunResult,
    "export": replay.ExportResult,
    "key": replay.KeyInfo,
    "ship": replay.ShipReport,
    "prune": replay.PruneReport,
    "erase": replay.EraseReport,
    "witness": replay.CosignReport,
    "store-maintain": replay.ScrubReport,
}


def schema(command: str) -> dict[str, Any]:
    result = RESULTS[command]
    generated = msgspec.json.schema(result)
    defs = generated.pop("$defs")
    root = defs.pop(result.__name__)
    if isinstance(getattr(result, "ok", None), property):
        root["properties"] = {
            "ok": {"type": "boolean", "description": "the command's verdict"},
            **root["properties"],
        }
        root["required"] = ["ok", *root.get("required", [])]
    return {
        "$schema": DIALECT,
        "title": f"agentteam-replay {command} --json",
        **{k: v for k, v in root.items() if k != "title"},
        **({"$defs": defs} if defs else {}),
    }


def render() -> dict[Path, str]:
    return {
        DIRECTORY / f"{command}.schema.json": json.dumps(schema(command), indent=2) + "\n"
        for command in RESULTS
    }


def main(argv: list[str] | None = None) -> int:
    return write_or_check("replay_schemas", render(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
