"""Secrets and isolation: canaries never leak, no other credential is used, model input never
changes the hidden context.

``canary_run`` drives a bridge holding a token file (and a decoy token for another agent in
``AGENTTEAM_TOKEN``, which must never be used) through successes, refusals, hidden-context
attempts in arguments and ``_meta``, upstream faults and a 401 with a refreshed file;
``foreign_token_run`` launches bridges whose only credential belongs to another agent or another
workspace. ``leaks`` scans files as raw bytes (the journal database, its ``-wal``/``-shm``
files, the exported checkpoint, the bridge's stderr) and texts (every answer the client
received, as JSON) for each canary, and says where one was found. ``injected_context`` reads
what the bridge says it injected, call by call, to prove model input never changed it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from agentteam_task_bridge import journal

from .audit import JournalAudit, audit_journal, read_journal
from .stand import Stand
from .wire import RawBridge


def journal_files(path: Path) -> list[Path]:
    """The journal database and every file beside it that holds its bytes."""
    names = ("", "-wal", "-shm", ".checkpoint.json")
    return [p for p in (path.with_name(path.name + n) for n in names) if p.exists()]


def leaks(
    canaries: Mapping[str, str], files: Iterable[Path], answers: Iterable[dict[str, Any]] = ()
) -> list[str]:
    """'<canary> in <where>' for every occurrence found (empty when nothing leaked)."""
    found = []
    blobs = [(str(path), path.read_bytes()) for path in files]
    blobs += [("an answer", msgspec.json.encode(answer)) for answer in answers]
    for label, canary in canaries.items():
        needle = canary.encode()
        escaped = msgspec.json.encode(canary)[1:-1]  # as it would sit inside a JSON string
        found += [
            f"{label} in {where}" for where, blob in blobs if needle in blob or escaped in blob
        ]
    return found


def injected_context(path: Path) -> list[dict[str, Any]]:
    """Per call, the hidden context the bridge injected: {field name: value}."""
    out = []
    with journal.open_reader(path) as reader:
        for record in reader.events(kind="context_injected"):
            if isinstance(record.payload, journal.ContextInjected):
                out.append({f.name: f.value for f in record.payload.fields})
    return out


OTHER_AGENT = "agt_helper"
HIDDEN_ATTEMPTS: list[dict[str, Any]] = [
    {"channel": "general", "workspace_id": "ws_other"},
    {"channel": "general", "agentId": OTHER_AGENT},
    {"channel": "general", "filters": {"token": "{decoy}"}},
    {"channel": "general", "Authorization": "Bearer {decoy}"},
    {"channel": "general", "query": "x", "callback_effect_id": "cb"},
]


async def _traffic(stand: Stand, raw: RawBridge, token_file: Path, decoy: str) -> list[str]:
    """Successes, refusals, hidden-context attempts and upstream faults; the codes seen."""
    codes: list[str] = []

    async def call(name: str, arguments: dict[str, Any], meta: Any = None) -> dict[str, Any]:
        answer = await raw.call(name, arguments, meta=meta)
        structured: dict[str, Any] = answer["result"]["structuredContent"]
        codes.append(structured["error"]["code"] if answer["result"]["isError"] else "ok")
        return structured

    created = await call("task_create", {"channel": "general", "tasks": [{"title": "rel-s1"}]})
    number = created["data"]["tasks"][0]["number"]
    await call("task_get", {"channel": "general", "number": number})
    await call("task_get", {"channel": "general", "number": 99_999})
    await call("task_list", {"channel": "nope"})
    for attempt in HIDDEN_ATTEMPTS:
        filled = {
            k: (v.replace("{decoy}", decoy) if isinstance(v, str) else v)
            for k, v in attempt.items()
        }
        await call("task_list", filled)
    meta = {"agentteam/workspace_id": "ws_other", "agentteam/agent_id": OTHER_AGENT}
    await call("task_create", {"channel": "general", "tasks": [{"title": "rel-s2"}]}, meta)
    for kind, extra in (("status", {"status": 500}), ("malformed", {}), ("drop", {})):
        stand.arm(kind, "get", **extra)
        await call("task_get", {"channel": "general", "number": number})
    # A refused token, then a fresh one in the file: the bridge re-reads it once and replays.
    await trio.Path(token_file).write_text(stand.runtime.mint_token() + "\n")
    stand.arm("unauthorized", "update")
    await call(
        "task_update", {"channel": "general", "number": number, "patch": {"title": "rel-s3"}}
    )
    return codes


@dataclass
class CanaryReport:
    codes: list[str]
    owners: set[tuple[str, str]]  # (workspace, creator) of every task in the runtime
    injected: list[dict[str, Any]]
    leaks: list[str]
    audit: JournalAudit


def _owners(runtime_db: Path) -> set[tuple[str, str]]:
    db = sqlite3.connect(f"file:{runtime_db}?mode=ro", uri=True)
    try:
        return {
            (str(w), str(c)) for w, c in db.execute("SELECT workspace_id, creator_id FROM tasks")
        }
    finally:
        db.close()


async def canary_run(stand: Stand, journal_path: Path) -> CanaryReport:
    token_file = journal_path.with_name("token")
    first = stand.runtime.mint_token()
    await trio.Path(token_file).write_text(first + "\n")
    decoy = stand.runtime.mint_token(OTHER_AGENT)  # must never be used, nor leak
    env = stand.env(
        AGENTTEAM_TOKEN_COMMAND="", AGENTTEAM_TOKEN_FILE=str(token_file), AGENTTEAM_TOKEN=decoy
    )
    async with stand.bridge(journal_path, env=env, client_name="secrets") as raw:
        codes = await _traffic(stand, raw, token_file, decoy)
    second = (await trio.Path(token_file).read_text()).strip()
    canaries = {"the token": first, "the refreshed token": second, "the decoy token": decoy}
    files = [*journal_files(journal_path), raw.stderr_path]
    return CanaryReport(
        codes=codes,
        owners=_owners(stand.runtime_db),
        injected=injected_context(journal_path),
        leaks=leaks(canaries, files, raw.transcript.answers.values()),
        audit=audit_journal(journal_path, answers={"secrets": raw.transcript.answers}),
    )


@dataclass
class ForeignReport:
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # label -> errors
    leaks: list[str] = field(default_factory=list)
    tasks_created: int = 0
    kinds: list[list[str]] = field(default_factory=list)
    audit: JournalAudit | None = None


async def foreign_token_run(stand: Stand, journal_path: Path) -> ForeignReport:
    """Bridges whose only credential is another agent's or another workspace's token."""
    store = stand.runtime.store
    store.add_workspace("ws_other", "Other")
    store.add_member("ws_other", "agt_far", "@far-agent", "agent", "Far")
    tokens = {
        "another agent's token": stand.runtime.mint_token(OTHER_AGENT),
        "another workspace's token": stand.runtime.mint_token("agt_far", workspace_id="ws_other"),
    }
    report = ForeignReport()
    before = len(_owners(stand.runtime_db))
    for label, token in tokens.items():
        env = stand.env(AGENTTEAM_TOKEN_COMMAND="", AGENTTEAM_TOKEN=token)
        async with stand.bridge(journal_path, env=env, client_name=label) as raw:
            errors = []
            for name, arguments in (
                ("task_list", {"channel": "general"}),
                ("task_list", {"channel": "eng", "limit": 1}),
                ("task_create", {"channel": "general", "tasks": [{"title": "rel-never"}]}),
            ):
                answer = await raw.call(name, arguments)
                errors.append(answer["result"]["structuredContent"].get("error", {}))
            report.answers[label] = errors
        report.leaks += leaks({label: token}, [*journal_files(journal_path), raw.stderr_path])
    report.tasks_created = len(_owners(stand.runtime_db)) - before
    report.kinds = [trace.kinds for trace in read_journal(journal_path).calls.values()]
    report.audit = audit_journal(journal_path)
    return report
