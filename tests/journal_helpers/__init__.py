"""Shared material for the journal tests: a key, one sample event per kind, small openers."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import (
    AnswerUndelivered,
    CallCancelled,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Event,
    InjectedField,
    JournalGap,
    KeyRotated,
    Payload,
    PayloadErased,
    PrunedSegment,
    SegmentsPruned,
    SegmentStarted,
    SessionEnded,
    SessionHandshake,
    SessionStarted,
    TokenRefreshed,
    UpstreamRequest,
    UpstreamResponse,
)

KEY: Final = bytes(range(32))  # an Ed25519 seed: the writer signs as agentteam-bridge/seed
VKEY: Final = journal.SigningKey("agentteam-bridge/seed", KEY).verifier  # its public half
SESSION: Final = "session-1"

SAMPLE_PAYLOADS: Final[dict[str, Payload]] = {
    "session_started": SessionStarted(
        bridge_version="0.1.0",
        compat_policy="hint",
        client_name="claude-code",
        client_version="2.1.0",
        protocol_version="2025-11-25",
        workspace_id="ws-1",
        agent_id="agent-1",
        api_url="http://127.0.0.1:8765",
    ),
    "session_ended": SessionEnded(reason="stdin closed", calls=3),
    "call_received": CallReceived(
        arguments={"channel": "eng", "title": "Write the journal ✓", "labels": ["a", "b"]},
        meta_keys=["agentteam/workflow_run_id"],
        jsonrpc_request_id=7,
    ),
    "call_rejected": CallRejected(
        error_code="invalid_arguments",
        message="title is required",
        field_errors={"$.title": "required"},
    ),
    "context_injected": ContextInjected(
        fields=[
            InjectedField(name="workspace_id", source="env:AGENTTEAM_WORKSPACE_ID", value="ws-1"),
            InjectedField(name="agent_id", source="env:AGENTTEAM_AGENT_ID", value="agent-1"),
        ]
    ),
    "upstream_request": UpstreamRequest(
        method="POST",
        route="/api/v1/workspaces/ws-1/agents/agent-1/runtime/tasks",
        body={"channel": "eng", "title": "Write the journal ✓"},
        headers={"content-type": "application/json"},
        attempt=1,
    ),
    "upstream_response": UpstreamResponse(
        status=409,
        body={"error": {"code": "conflict"}},
        headers={"content-type": "application/json"},
        duration_ms=3.25,
    ),
    "token_refreshed": TokenRefreshed(source="command", reason="401 from upstream"),
    "deprecated_usage": DeprecatedUsage(
        use_kind="tool_name",
        old_name="create_tasks",
        replacement="task_create",
        client_name="cursor",
        client_version="1.0",
        agent_id="agent-1",
    ),
    "call_result": CallResult(result={"data": {"number": 4}, "meta": {}}, duration_ms=5.5),
    "call_error": CallError(
        error_code="task_conflict", retryable=False, message="stale", duration_ms=4.0
    ),
    "call_cancelled": CallCancelled(reason="client cancelled"),
    "journal_gap": JournalGap(
        reason="disk_full",
        detail="SQLITE_FULL",
        since="2026-12-03T17:00:00.000000Z",
        seconds=1.5,
        probes=3,
        events_lost=2,
        events_refused=1,
        calls=["s1.4"],
    ),
    # Names KEY itself, so the checkpoints signed after it are signed by the key in force.
    "key_rotated": KeyRotated(
        vkey=VKEY.to_text(),
        fingerprint=VKEY.fingerprint,
        previous=journal.SigningKey("example/old", bytes(32)).verifier.to_text(),
    ),
    "segment_started": SegmentStarted(
        segment=2,
        reason="size",
        previous_file="journal-1.db",
        previous_seq=12,
        previous_hash="ab" * 32,
    ),
    "segments_pruned": SegmentsPruned(
        segments=[
            PrunedSegment(file="journal-1.db", first_seq=1, last_seq=12, last_hash="ab" * 32)
        ],
        store="postgresql://ship@db.example/fleet",
        held_seq=40,
        witnessed_seq=40,
        witnessed_hash="cd" * 32,
        older_than_days=30.0,
    ),
    "answer_undelivered": AnswerUndelivered(
        call_id="s1.3", outcome="call_result", reason="stdout_closed"
    ),
    "session_handshake": SessionHandshake(
        client_name="claude-code", client_version="2.1.197", protocol_version="2025-11-25"
    ),
    "payload_erased": PayloadErased(
        seqs=[3, 4], selector="call", reason="data subject request", actor="ops@host"
    ),
}
assert set(SAMPLE_PAYLOADS) == set(journal.KINDS)


def event(kind: str, *, call_id: str | None = "call-1", tool: str | None = "task_create") -> Event:
    """The sample event of a kind, in one call of one session."""
    session_level = kind in (
        "session_started",
        "session_ended",
        "journal_gap",
        "key_rotated",
        "segment_started",
        "segments_pruned",
        "answer_undelivered",
        "session_handshake",
        "payload_erased",
    )
    return Event(
        session_id=SESSION,
        call_id=None if session_level else call_id,
        mcp_method_name=None if session_level else "tools/call",
        gen_ai_tool_name=None if session_level else tool,
        jsonrpc_request_id=None if session_level else 7,
        payload=SAMPLE_PAYLOADS[kind],
    )


def all_kinds() -> list[Event]:
    """One event of every kind, in a plausible order."""
    return [event(kind) for kind in journal.KINDS]


def write_journal(path: Path, events: list[Event], **options: object) -> journal.SyncWriter:
    """Write events with the sync writer and close it (returns the closed writer)."""
    with journal.open_sync_writer(path, key=KEY, **options) as writer:  # type: ignore[arg-type]
        writer.append_many(events)
    return writer


def event_leaves_file(path: Path, journal_id: str = "leaves-journal") -> Path:
    """An empty v2 journal file as schemas 6 to 9 made it (before migration 0010): its leaf
    columns in the side table ``event_leaves``, which every writer continuing it keeps (the
    meta rows are those ``ensure_identity`` wrote then)."""
    from sqlite_utils import Database

    from agentteam_task_bridge.journal._canonical import format_wall
    from agentteam_task_bridge.journal._schema import create_private_file, migrations

    os.close(create_private_file(path))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrations().apply(Database(conn), stop_before="0010_leaf_columns")
        conn.executemany(
            "INSERT INTO journal_meta (key, value) VALUES (?, ?)",
            [
                ("journal_id", journal_id),
                ("created_at", format_wall(datetime.now(UTC))),
                ("canonical_encoding", "sorted-key compact JSON, sha256 chain, v1"),
                ("merkle_log", "rfc6962"),
            ],
        )
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        assert version == 9
    finally:
        conn.close()
    return path
