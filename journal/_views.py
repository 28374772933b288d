"""The journal file's SQLite views: what Datasette and ``sqlite3`` users read instead of events.

Each is created by the migrations (``journal._schema``) and re-created when a later migration
changes one. ``calls`` is one definition with the fleet store's PostgreSQL view
(``journal._call_view``); the others read payload members with ``json_extract``.
"""

from __future__ import annotations

from typing import Final

from ._call_view import calls_view

__all__ = ["VIEWS"]

VIEWS: Final[dict[str, str]] = {
    # One row per call: its outcome, duration and upstream traffic. One definition with the
    # fleet store's (journal._call_view): duration_ms is the outcome's own, not replay's bridge_ms.
    "calls": calls_view("sqlite"),
    # Every failure: error results, rejections, and upstream responses of 400 or more.
    "errors": """
SELECT
  seq, ts_wall, session_id, call_id, gen_ai_tool_name, kind, error_type,
  http_response_status_code,
  json_extract(payload, '$.message') AS message,
  json_extract(payload, '$.retryable') AS retryable,
  duration_ms
FROM events
WHERE kind IN ('call_error', 'call_rejected')
   OR (kind = 'upstream_response' AND http_response_status_code >= 400)
ORDER BY seq""",
    # Who still uses deprecated names: which name, which replacement, which client and agent.
    "deprecated_usages": """
SELECT
  seq, ts_wall, session_id, call_id, gen_ai_tool_name,
  json_extract(payload, '$.use_kind') AS use_kind,
  json_extract(payload, '$.old_name') AS old_name,
  json_extract(payload, '$.replacement') AS replacement,
  json_extract(payload, '$.client_name') AS client_name,
  json_extract(payload, '$.client_version') AS client_version,
  json_extract(payload, '$.agent_id') AS agent_id
FROM events
WHERE kind = 'deprecated_usage'
ORDER BY seq""",
    # One row per hidden-context field the bridge injected: what, from where, which value.
    "injected_context": """
SELECT
  e.seq, e.ts_wall, e.session_id, e.call_id, e.gen_ai_tool_name,
  json_extract(f.value, '$.name') AS name,
  json_extract(f.value, '$.source') AS source,
  json_extract(f.value, '$.value') AS value
FROM events e, json_each(e.payload, '$.fields') f
WHERE e.kind = 'context_injected'
ORDER BY e.seq, f.key""",
    # One row per session: client, protocol, policy, and how it ended. The client and protocol
    # come from the session's handshake (kind set 7), else from its start (older journals).
    "sessions": """
SELECT
  s.session_id,
  s.seq AS started_seq,
  s.ts_wall AS started_at,
  coalesce(json_extract(h.payload, '$.client_name'), json_extract(s.payload, '$.client_name'))
    AS client_name,
  coalesce(
    json_extract(h.payload, '$.client_version'), json_extract(s.payload, '$.client_version')
  ) AS client_version,
  coalesce(
    json_extract(h.payload, '$.protocol_version'), json_extract(s.payload, '$.protocol_version')
  ) AS protocol_version,
  json_extract(s.payload, '$.bridge_version') AS bridge_version,
  json_extract(s.payload, '$.compat_policy') AS compat_policy,
  json_extract(s.payload, '$.agent_id') AS agent_id,
  x.ts_wall AS ended_at,
  json_extract(x.payload, '$.reason') AS end_reason,
  json_extract(x.payload, '$.calls') AS calls
FROM events s
LEFT JOIN events x ON x.session_id = s.session_id AND x.kind = 'session_ended'
LEFT JOIN events h ON h.session_id = s.session_id AND h.kind = 'session_handshake'
WHERE s.kind = 'session_started'
ORDER BY s.seq""",
}
