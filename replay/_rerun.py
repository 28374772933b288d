"""``rerun``: re-drive recorded calls through today's bridge code and diff with what was recorded.

Each recorded call is sent to a :class:`bridge.Bridge` built from its session
(``session_started``: API URL, workspace, agent, client, compat policy; the injected sources of
``context_injected``), with the same arguments, JSON-RPC id and ``_meta`` (the run and callback
ids come from the recorded injection; other ``_meta`` values are not journaled and are sent as
``"<unrecorded>"``). The bridge journals into memory (``bridge.testing.MemoryJournal``); today's
events are compared with the recorded ones: the story (event kinds), the injected context, the
upstream requests (method, route, body) and the outcome (result envelope and truncation, or error
code, message and retryability; durations are ignored).

Upstream, by default, is a ``bridge.testing.ScriptedTransport`` that answers from the recorded
responses of that call: a request matches a recorded one on method, route and canonical body (for
``GET``, the query built from the recorded DTO), first exactly, then after the normalization of
:mod:`replay._diff`; each recorded answer is used once, in order. A recorded transport failure
(no response) is raised again as the same failure kind (the retry-table row the recorded error
message names: refused, dropped or timed out before sending, timed out after, reset) with the
recorded reason, so it gives the recorded code, message and reason. A request that matches
nothing is answered ``502 replay_unmatched`` and shows as a difference. Tokens are
``replay-token-N`` from a refreshable source of the recorded kind, so a recorded
401-refresh-replay replays the same way.

With ``against`` (a live Agent Runtime URL), requests go there instead, with the credential of
the environment (``AGENTTEAM_TOKEN_COMMAND``, ``_FILE`` or ``AGENTTEAM_TOKEN``); mutations are
sent only with ``allow_mutations``, and differences are computed after normalization.

Skipped, with the reason: calls without a recorded outcome (in doubt, incomplete), cancelled
calls, and outcomes that depend on the bridge's state at the time (an idempotency key in flight,
the journal or the credential unavailable).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, Unpack

import msgspec

from agentteam_task_bridge import bridge
from agentteam_task_bridge.journal import (
    META_CALLBACK,
    META_RUN,
    CallError,
    CallRejected,
    CallResult,
    ContextInjected,
    Payload,
    Redactor,
    UpstreamRequest,
    UpstreamResponse,
)

if TYPE_CHECKING:
    pass  # at run time `bridge.testing` resolves on first use (bridge.__getattr__)

from ._diff import Difference, diff, normalize
from ._source import Progress, ReplayInputError, open_journals
from ._story import CallStory, SessionInfo, iter_stories

__all__ = ["RerunCall", "RerunResult", "rerun", "rerun_async"]

UNRECORDED: Final = "<unrecorded>"
STATE_DEPENDENT: Final = frozenset(
    {"idempotency_in_progress", "journal_unavailable", "credential_unavailable", "internal_error"}
)
_OPEN_SESSIONS: Final = 8
_REDACTOR: Final = Redactor()

Verdict = Literal["same", "differs", "skipped"]


class RerunCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call re-driven: same, differs (where), or skipped (why)."""

    journal_id: str
    call_id: str
    session_id: str
    tool: str | None
    seq: int
    verdict: Verdict
    recorded: str | None = None
    today: str | None = None
    reason: str | None = None
    differences: list[Difference] = []


class RerunResult(msgspec.Struct, frozen=True, kw_only=True):
    """Counts, and every call that differs or was skipped (all calls with ``include_same``)."""

    mode: Literal["recorded", "live"]
    against: str | None
    same: int
    differs: int
    skipped: int
    calls: list[RerunCall]

    @property
    def ok(self) -> bool:
        return self.differs == 0


class RerunOptions(TypedDict, total=False):
    """Which recorded calls to re-drive, and how (:func:`rerun_async` says what each means)."""

    against: str | None
    allow_mutations: bool
    call_ids: Sequence[str]
    tool: str | None
    session: str | None
    include_same: bool
    env: Mapping[str, str] | None
    progress: Progress | None


def rerun(paths: Sequence[str | Path], **options: Unpack[RerunOptions]) -> RerunResult:
    """Blocking twin of :func:`rerun_async` (runs its own trio loop)."""
    import trio  # here, not at the top: the other replay commands never need it (~80 ms)

    return trio.run(partial(rerun_async, paths, **options))


async def rerun_async(paths: Sequence[str | Path], **options: Unpack[RerunOptions]) -> RerunResult:
    """Re-drive the recorded calls (all, or those selected) and diff today's with the recorded.

    ``against``: a live API URL (None: the recorded answers); ``allow_mutations``: re-drive
    mutations against it too; ``call_ids`` / ``tool`` / ``session``: only those calls;
    ``include_same``: list the calls that did not change too; ``env``: the environment the
    live drivers read (default os.environ); ``progress``: told of the records read.
    """
    against, env = options.get("against"), options.get("env")
    tool, session = options.get("tool"), options.get("session")
    allow_mutations = options.get("allow_mutations", False)
    include_same = options.get("include_same", False)
    call_ids, progress = options.get("call_ids", ()), options.get("progress")
    wanted = set(call_ids)
    counts = {"same": 0, "differs": 0, "skipped": 0}
    listed: list[RerunCall] = []
    drivers = _Drivers(against, os.environ if env is None else env)
    try:
        with open_journals(paths) as journals:
            for story in iter_stories(journals.records(progress)):
                if wanted and story.call_id not in wanted:
                    continue
                if tool is not None and tool not in (story.tool, story.requested_tool):
                    continue
                if session is not None and story.session_id != session:
                    continue
                outcome = await _rerun_one(story, drivers, allow_mutations)
                counts[outcome.verdict] += 1
                if include_same or outcome.verdict != "same":
                    listed.append(outcome)
    finally:
        await drivers.aclose()
    return RerunResult(
        mode="live" if against else "recorded",
        against=against,
        same=counts["same"],
        differs=counts["differs"],
        skipped=counts["skipped"],
        calls=listed,
    )


# --- one call ---------------------------------------------------------------------------


def _skip_reason(story: CallStory, live: bool, allow_mutations: bool) -> str | None:
    if story.received is None:
        return "no call_received recorded"
    outcome = story.outcome
    if outcome is None:
        return f"no recorded outcome ({story.status})"
    if outcome.kind == "call_cancelled":
        return "cancelled"
    if story.error_code in STATE_DEPENDENT:
        return f"{story.error_code} depends on the bridge's state at the time"
    if any("truncated_bytes" in _as_dict(r.body) for r in story.responses):
        return "a recorded response was too large to be journaled whole"
    if live and story.mutation and not allow_mutations:
        return "a mutation: pass --allow-mutations to send it to a live runtime"
    return None


async def _rerun_one(story: CallStory, drivers: _Drivers, allow_mutations: bool) -> RerunCall:
    base = RerunCall(
        journal_id=story.journal_id,
        call_id=story.call_id,
        session_id=story.session_id,
        tool=story.tool,
        seq=story.records[0].seq,
        verdict="skipped",
    )
    reason = _skip_reason(story, drivers.live, allow_mutations)
    if reason is not None:
        return msgspec.structs.replace(base, reason=reason)
    driver = await drivers.for_story(story)
    today = await driver.call(story)
    recorded_payloads = _payloads(story)
    recorded = _image(recorded_payloads)
    # Today's events pass through the journal's redaction, as the recorded ones did.
    current = _REDACTOR.redact(msgspec.to_builtins(_image(today)))
    if drivers.live:
        recorded, current = normalize(recorded), normalize(current)
    differences = diff(recorded, current)
    return msgspec.structs.replace(
        base,
        verdict="differs" if differences else "same",
        recorded=_outcome_label(recorded_payloads),
        today=_outcome_label(today),
        differences=differences,
    )


def _payloads(story: CallStory) -> list[Payload]:
    return [r.payload for r in story.records if not isinstance(r.payload, dict)]


def _image(payloads: list[Payload]) -> dict[str, Any]:
    """What is compared of a call's story: kinds, injection, upstream requests, outcome."""
    image: dict[str, Any] = {"kinds": [p.kind for p in payloads], "upstream": []}
    for p in payloads:
        if isinstance(p, ContextInjected):
            image["injected"] = [msgspec.to_builtins(f) for f in p.fields]
        elif isinstance(p, UpstreamRequest):
            image["upstream"].append(
                {"method": p.method, "route": p.route, "body": p.body, "attempt": p.attempt}
            )
        elif isinstance(p, UpstreamResponse):
            image["upstream"].append({"status": p.status})
        elif isinstance(p, CallResult):
            image["outcome"] = {"result": p.result, "truncated": p.truncated}
        elif isinstance(p, CallError):
            image["outcome"] = {
                "error_code": p.error_code,
                "message": p.message,
                "retryable": p.retryable,
            }
            if p.reason is not None:
                image["outcome"]["reason"] = p.reason
        elif isinstance(p, CallRejected):
            image["outcome"] = {
                "rejected": p.error_code,
                "message": p.message,
                "field_errors": dict(p.field_errors),
            }
    return image


def _outcome_label(payloads: list[Payload]) -> str | None:
    for p in reversed(payloads):
        if isinstance(p, CallResult):
            return "result"
        if isinstance(p, CallError | CallRejected):
            return p.error_code
    return None


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --- the bridge of one recorded session -------------------------------------------------


@dataclass
class _Recorded:
    """The recorded upstream exchanges of the call being re-driven, consumed in order."""

    exchanges: list[tuple[UpstreamRequest, UpstreamResponse | None]] = field(default_factory=list)
    # What a request without a recorded response gets: the recorded failure, same kind and reason.
    failure: bridge.testing.Fail = field(
        default_factory=lambda: bridge.testing.Fail("dropped_after_send")
    )

    def answer(self, request: bridge.testing.Sent) -> bridge.testing.Recorded | bridge.testing.Fail:
        today = _REDACTOR.redact(_request_key(request))
        for loose in (False, True):
            for i, (req, resp) in enumerate(self.exchanges):
                if _recorded_key(req, loose) == (normalize(today) if loose else today):
                    del self.exchanges[i]
                    return self.failure if resp is None else _response(resp)
        return bridge.testing.Recorded(
            502,
            msgspec.json.encode(
                {
                    "error": {
                        "code": "replay_unmatched",
                        "message": "No recorded upstream answer matches this request.",
                    }
                }
            ),
            {"content-type": "application/json"},
        )


def _request_key(request: bridge.testing.Sent) -> Any:
    if request.method == "GET":
        body: Any = request.query
    else:
        try:
            body = msgspec.json.decode(request.body) if request.body else None
        except msgspec.DecodeError:
            body = (request.body or b"").decode("utf-8", "replace")
    return [request.method, request.path, body]


def _recorded_key(req: UpstreamRequest, loose: bool) -> Any:
    body = req.body
    if req.method == "GET" and isinstance(body, dict):
        body = {k: _query_value(v) for k, v in body.items()}
    key = [req.method, req.route, body]
    return normalize(key) if loose else key


def _query_value(value: Any) -> str:
    # How the bridge puts a DTO value in a query string (bridge/_upstream.py).
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)


def _response(resp: UpstreamResponse) -> bridge.testing.Recorded:
    body = resp.body
    if isinstance(body, dict) and set(body) == {"unparsed"}:
        content = str(body["unparsed"]).encode()
    else:
        content = b"" if body is None else msgspec.json.encode(body)
    return bridge.testing.Recorded(resp.status, content, dict(resp.headers))


def _failure(story: CallStory) -> bridge.testing.Fail:
    """The recorded transport failure: the row its message was written for (by its code for a
    message of another wording), with the recorded reason."""
    outcome = story.outcome
    payload = outcome.payload if outcome is not None else None
    message = payload.message if isinstance(payload, CallError) else ""
    reason = payload.reason if isinstance(payload, CallError) else None
    kind = bridge.testing.transport_row(message)
    if kind is None:
        kind = _BY_CODE.get(story.error_code or "", "dropped_after_send")
    return bridge.testing.Fail(kind, reason)


_BY_CODE: Final[dict[str, bridge.testing.FailureKind]] = {
    "upstream_unreachable": "connect_refused",
    "upstream_timeout": "timeout_after_send",
}


class _Driver:
    """One recorded session's bridge, its in-memory journal and (recorded) upstream."""

    def __init__(
        self,
        driven: bridge.Bridge,
        journal: bridge.testing.MemoryJournal,
        tokens: bridge.testing.ScriptedTokens,
        recorded: _Recorded | None,
        sources: dict[str, str],
    ) -> None:
        self.bridge = driven
        self.journal = journal
        self.tokens = tokens
        self.recorded = recorded
        self.sources = sources  # the launch's, updated from each call's recorded injection

    async def call(self, story: CallStory) -> list[Payload]:
        received = story.received
        assert received is not None
        self.sources.update(_sources(story))
        self.tokens.kind = self.sources["bearer_token"]
        if self.recorded is not None:
            self.recorded.exchanges = _exchanges(story)
            self.recorded.failure = _failure(story)
        self.journal.clear()
        first = story.records[0]
        request_id: str | int | None = received.jsonrpc_request_id
        if request_id is None:
            request_id = first.jsonrpc_request_id
        await self.bridge.call(
            story.requested_tool or "", received.arguments, _meta(story), request_id
        )
        return [e.payload for e, _ in self.journal.events]


def _exchanges(story: CallStory) -> list[tuple[UpstreamRequest, UpstreamResponse | None]]:
    pairs: list[tuple[UpstreamRequest, UpstreamResponse | None]] = []
    for r in story.records:
        if isinstance(r.payload, UpstreamRequest):
            pairs.append((r.payload, None))
        elif isinstance(r.payload, UpstreamResponse) and pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], r.payload)
    return pairs


def _meta(story: CallStory) -> dict[str, Any]:
    received = story.received
    keys = received.meta_keys if received is not None else []
    injected = story.injected
    recorded = {
        META_RUN: injected.get("workflow_run_id"),
        META_CALLBACK: injected.get("callback_effect_id"),
    }
    return {k: recorded.get(k) or UNRECORDED for k in keys}


class _Drivers:
    """A bridge per recorded session (a few kept open), for recorded or live upstreams."""

    def __init__(self, against: str | None, env: Mapping[str, str]) -> None:
        self.against = against
        self.live = against is not None
        self.env = env
        self._open: OrderedDict[tuple[str, str], tuple[_Driver, bridge.UpstreamClient]] = (
            OrderedDict()
        )
        self._credentials: dict[tuple[str, str], bridge.Credentials] = {}

    async def for_story(self, story: CallStory) -> _Driver:
        key = (story.journal_id, story.session_id)
        found = self._open.get(key)
        if found is not None:
            self._open.move_to_end(key)
            return found[0]
        driver, upstream = self._build(story)
        self._open[key] = (driver, upstream)
        if len(self._open) > _OPEN_SESSIONS:
            _, (_, old) = self._open.popitem(last=False)
            await old.aclose()
        return driver

    def _build(self, story: CallStory) -> tuple[_Driver, bridge.UpstreamClient]:
        info = story.session or SessionInfo(
            journal_id=story.journal_id, session_id=story.session_id, seq=0, started_at=""
        )
        injected = story.injected
        sources = {
            "api_url": "replay",
            "workspace_id": "replay",
            "agent_id": "replay",
            "bearer_token": "replay",
            **_sources(story),
        }
        workspace = info.workspace_id or injected.get("workspace_id") or UNRECORDED
        agent = info.agent_id or injected.get("agent_id") or UNRECORDED
        # Refreshable stand-ins of the recorded source kind; never a real credential.
        tokens = bridge.testing.ScriptedTokens(
            lambda n: f"replay-token-{n}", kind=sources["bearer_token"]
        )
        recorded: _Recorded | None = None
        if self.against is None:
            recorded = _Recorded()
            transport = bridge.testing.ScriptedTransport(recorded.answer)
            upstream = bridge.UpstreamClient(
                info.api_url or "http://replay.invalid", transport=transport
            )
            credentials = bridge.Credentials(tokens)
        else:
            upstream = bridge.UpstreamClient(self.against, env=self.env)  # proxies and CAs as serve
            credentials = self._live_credentials(workspace, agent)
        launch = bridge.LaunchContext(
            info.api_url or self.against or "http://replay.invalid",
            workspace,
            agent,
            tokens,
            sources,
        )
        journal = bridge.testing.MemoryJournal()
        session = bridge.Session(
            session_id=story.session_id,
            client_name=info.client_name,
            client_version=info.client_version,
        )
        compat = _compat_policy(info.compat_policy)
        driven = bridge.Bridge(launch, credentials, upstream, journal, session, compat=compat)
        return _Driver(driven, journal, tokens, recorded, sources), upstream

    def _live_credentials(self, workspace: str, agent: str) -> bridge.Credentials:
        found = self._credentials.get((workspace, agent))
        if found is not None:
            return found
        env = {
            **self.env,
            "AGENTTEAM_WORKSPACE_ID": workspace,
            "AGENTTEAM_AGENT_ID": agent,
        }
        try:
            launch = bridge.load_launch_context(env, api_url=self.against)
        except bridge.ConfigError as exc:
            raise ReplayInputError(f"rerun --against: {exc}") from None
        credentials = self._credentials[(workspace, agent)] = bridge.Credentials(
            launch.token_source
        )
        return credentials

    async def aclose(self) -> None:
        for _, upstream in self._open.values():
            await upstream.aclose()
        self._open.clear()


def _compat_policy(recorded: str | None) -> bridge.CompatPolicy:
    """The session's recorded compat policy; ``hint`` (serve's default) when unrecorded."""
    if recorded == "strict":
        return "strict"
    if recorded == "forward":
        return "forward"
    return "hint"


def _sources(story: CallStory) -> dict[str, str]:
    """Where the recorded call's hidden context came from (empty when it was not injected)."""
    record = story.first("context_injected")
    if record is None or not isinstance(record.payload, ContextInjected):
        return {}
    names = ("workspace_id", "agent_id", "bearer_token")
    return {f.name: f.source for f in record.payload.fields if f.name in names}
