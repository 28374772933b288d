"""The hot path: one tool call, read top to bottom.

    receive -> resolve tool -> validate -> inject hidden context -> journal (write-ahead)
      -> forward (one upstream operation; one refresh-and-replay on 401) -> normalize
      -> budget -> journal the outcome (durable) -> answer

Every stage is a journal event. A mutation's upstream request is durable before it is sent and
every outcome is durable before the model sees it; when the journal cannot be written, mutations
fail closed, and an answer whose outcome could not be recorded says so in `meta.journal`
(``{"recorded": false, "reason": ...}``, with ``"in_doubt": true`` for a mutation that was sent).
Whatever happens inside a call ends in one journaled outcome: a result, an error (any unexpected
exception becomes `internal_error`, with a fixed message), a rejection or a cancellation.

Over 600 lines on purpose: the stages above and the per-call journal recorder they share are one
flow a reader follows top to bottom (error codes live in `_errors`, the upstream spelling in
`_dto`, budgets in `_budget`); the body parsing at the end is the seam to split at next.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
import msgspec
import trio

from agentteam_task_bridge.journal import (
    META_CALLBACK,
    META_RUN,
    CallCancelled,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    Event,
    InjectedField,
    Payload,
    TokenRefreshed,
    UpstreamRequest,
    UpstreamResponse,
    tasks_route,
)

from ._answer import Answer
from ._budget import fit
from ._compat import TOOL_MIGRATIONS, Policy, Use, strict_refusal, tool_refusal, translate_arguments
from ._context import CredentialError, Credentials, LaunchContext
from ._cursor import Cursors, NotAPage, PageState, page_answer, page_request
from ._dto import from_upstream
from ._errors import (
    CODES,
    OperationKind,
    ToolError,
    classify_upstream_error,
    internal_error,
    malformed_answer,
    suggest,
    transport_error,
)
from ._exceptions import JournalFailed
from ._lifecycle import Unanswered
from ._registry import TOOLS, ToolSpec
from ._render import render, render_error
from ._screen import Screen, cut
from ._telemetry import Tracing, client_trace, passthrough_headers, screened_trace
from ._upstream import Prepared, Reply, TransportFailure, UpstreamClient, prepare
from ._validate import canonical_arguments, validate

log = logging.getLogger("agentteam.bridge")
_plain = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_MAX_JOURNALED_BODY = 256 * 1024
# Arguments journaled in full up to this size; a larger request the bridge refuses is journaled
# as a prefix and the sha256 of the whole (three 15 MB frames made a 47 MB journal).
_MAX_JOURNALED_ARGUMENTS = 256 * 1024
_CAPPED_PREFIX = 4096
# An upstream body nested deeper than this is malformed (the documented shapes nest ~5 deep);
# checked before any recursive walk of it (conversion, the journal's encoder).
_MAX_BODY_DEPTH = 32
_BRACKETS_ONLY = bytes(range(256)).translate(None, b"[]{}")
_OUTCOMES = frozenset({"call_result", "call_error", "call_rejected", "call_cancelled"})


class JournalPort(Protocol):
    """What the call flow needs of the journal writer."""

    @property
    def healthy(self) -> bool: ...

    async def append(self, event: Event, *, durable: bool = False) -> None: ...


@dataclass
class Session:
    session_id: str
    client_name: str | None = None
    client_version: str | None = None
    calls: int = 0
    # With a door that writes the answers (`serve`'s stdio): the calls whose outcome is
    # journaled and whose answer is not on the wire yet.
    unanswered: Unanswered | None = None


class Bridge:
    """Serves tool calls for one session against one Agent Runtime."""

    def __init__(
        self,
        launch: LaunchContext,
        credentials: Credentials,
        upstream: UpstreamClient,
        journal: JournalPort,
        session: Session,
        compat: Policy = "hint",
        tracing: Tracing | None = None,
        cursors: Cursors | None = None,
    ) -> None:
        self.compat = compat
        # Signs the cursors of the pages it cuts: the installation's key (`serve`), or one of
        # this process only.
        self.cursors = cursors or Cursors.ephemeral()
        self.tracing = tracing
        self.launch = launch
        self.credentials = credentials
        self.upstream = upstream
        self.journal = journal
        self.session = session
        self._route = tasks_route(launch.workspace_id, launch.agent_id)
        self._ids = itertools.count(1)
        self._keys_in_flight: set[tuple[str, ...]] = set()
        # Every token this bridge has sent (and a proxy password): an upstream that echoes one
        # back, whole, cut or re-cased, must not hand it to the model, the journal or a span.
        self.screen = Screen()
        if tracing is not None:
            self.screen.listeners.append(tracing.add_secret)

    async def call(
        self,
        name: str,
        arguments: Any,
        meta: Mapping[str, Any] | None,
        request_id: str | int | None,
    ) -> types.CallToolResult:
        """One tool call, answered as the SDK's result model."""
        return (await self.answer(name, arguments, meta, request_id)).result()

    async def answer(
        self,
        name: str,
        arguments: Any,
        meta: Mapping[str, Any] | None,
        request_id: str | int | None,
    ) -> Answer:
        """One tool call, answered as an `Answer` (the direct stdio path writes its JSON)."""
        started = time.perf_counter()
        call = _Call(self, f"{self.session.session_id}.{next(self._ids)}", name, request_id)
        self.session.calls += 1
        # Trace context with a control character is dropped (and said so), never sent upstream.
        meta, trace_dropped = screened_trace(meta or {})
        args: dict[str, Any] = {}
        notices: list[dict[str, str]] = []
        if self.tracing is not None:
            trace = self.tracing.annotate_call(self.session.session_id)
        else:
            trace = client_trace(meta)
            call.trace_headers = passthrough_headers(meta) if trace else []
        try:
            # MCP treats absent and null arguments as none: journal them as `{}`.
            call.received = CallReceived(
                arguments=await self._journaled_arguments(name, arguments),
                meta_keys=[key[:128] for key in sorted(meta)[:64]],
                jsonrpc_request_id=request_id,
                trace_id=trace[0] if trace else None,
                span_id=trace[1] if trace else None,
                trace_context_dropped=trace_dropped,
            )
            await call.record(call.received)
            spec, arguments = await self._resolve(call, name, arguments, notices)
            try:
                value = validate(spec.input_type, arguments)
            except ToolError as exc:
                raise _Rejected(exc) from None
            args = canonical_arguments(value)
            return await self._forward(call, spec, args, meta, started, notices)
        except _Rejected as rejected:
            error = rejected.error
            await call.record(
                CallRejected(
                    error_code=error.code,
                    message=error.message,
                    field_errors=error.field_errors or {},
                    suggested_action=error.suggested_action,
                    retryable=error.retryable,
                    candidates=error.candidates,
                ),
                durable=True,
            )
            return _error_result(error, notices, call.journal_note())
        except ToolError as error:
            if error.suggested_action is None:
                error.suggested_action = suggest(error, name, args)
            return await self._fail(call, error, started, notices)
        except trio.Cancelled:
            await call.cancelled()
            raise
        except BaseExceptionGroup as group:
            # trio.run_process (the token command) and other nurseries wrap a cancellation.
            if group.subgroup(trio.Cancelled) is not None:
                await call.cancelled()
                raise
            if group.subgroup(Exception) is not group:  # KeyboardInterrupt, SystemExit: not ours
                raise
            return await self._fail(call, _internal_error(call, group), started, notices)
        except Exception as exc:  # the one catch-all: a bug must not cost the outcome
            return await self._fail(call, _internal_error(call, exc), started, notices)

    async def _fail(
        self, call: _Call, error: ToolError, started: float, notices: list[dict[str, str]]
    ) -> Answer:
        """Journal an error outcome durably and answer it (saying so if it was not recorded)."""
        if not call.received_recorded and call.received is None:
            call.received = CallReceived(arguments={}, jsonrpc_request_id=call.request_id)
        await call.record(
            CallError(
                error_code=error.code,
                retryable=error.retryable,
                message=error.message,
                duration_ms=_ms(started),
                field_errors=error.field_errors or {},
                suggested_action=error.suggested_action,
                candidates=error.candidates,
                retry_after_seconds=error.retry_after_seconds,
                reason=error.reason,
            ),
            durable=True,
        )
        return _error_result(error, notices, call.journal_note())

    async def _journaled_arguments(self, name: str, arguments: Any) -> dict[str, Any]:
        """The arguments as journaled: in full, unless too big and refused anyway (then a
        prefix and the digest of the whole)."""
        encoded = _encoded_arguments(arguments)
        if len(encoded) <= _MAX_JOURNALED_ARGUMENTS or await self._would_accept(name, arguments):
            value = _decode(encoded)
            return value if isinstance(value, dict) else {"arguments": value}
        return {
            "capped": {
                "bytes": len(encoded),
                "sha256": hashlib.sha256(encoded).hexdigest(),
                # Screened before the cut: a credential across it goes whole, never a prefix.
                "prefix": self.screen.head(encoded, _CAPPED_PREFIX, utf8=True),
            }
        }

    async def _would_accept(self, name: str, arguments: Any) -> bool:
        """Whether resolution and validation would take these arguments (journals nothing)."""
        try:
            spec, resolved = await self._resolve(_Unjournaled(), name, arguments, [])
            validate(spec.input_type, resolved)
        except (_Rejected, ToolError):
            return False
        return True

    async def _resolve(
        self, call: _Recorder, name: str, arguments: Any, notices: list[dict[str, str]]
    ) -> tuple[ToolSpec, Any]:
        """The canonical tool and argument spellings, applying the compatibility policy."""
        spec = TOOLS.get(name)
        migration = None
        uses: list[Use] = []
        if spec is None:
            migration = TOOL_MIGRATIONS.get(name)
            if migration is None:
                raise _Rejected(
                    ToolError(
                        "unknown_tool",
                        f"No tool named `{name[:64]}`.",
                        field_errors={"$.name": "not a tool of this server"},
                    )
                )
            spec = TOOLS[migration.tool]
            uses.append(Use("tool_name", name, migration.tool))
            arguments = {} if arguments is None else arguments
            if not isinstance(arguments, dict):
                raise _Rejected(
                    ToolError(
                        "invalid_arguments",
                        "Arguments must be a JSON object.",
                        field_errors={"$": "expected an object"},
                    )
                )
        try:
            translated, argument_uses = translate_arguments(spec.name, arguments)
        except ToolError as exc:
            raise _Rejected(exc) from None
        uses += argument_uses
        for use in uses:
            await call.record(
                DeprecatedUsage(
                    use_kind=use.kind,
                    old_name=use.old,
                    replacement=use.replacement,
                    client_name=self.session.client_name,
                    client_version=self.session.client_version,
                    agent_id=self.launch.agent_id,
                )
            )
        if migration is not None:
            try:
                translated = migration.map_arguments(translated)
            except ToolError as exc:
                raise _Rejected(exc) from None
            if self.compat != "forward":
                invalid = None
                if self.compat == "hint":  # a suggestion is a valid call, or there is none
                    try:
                        validate(spec.input_type, translated)
                    except ToolError as exc:
                        invalid = exc
                raise _Rejected(tool_refusal(self.compat, migration, translated, invalid))
            call.rename(spec.name)
        if argument_uses and self.compat == "strict":
            raise _Rejected(strict_refusal(argument_uses))
        notices += [use.notice() for use in uses]
        return spec, translated

    async def _forward(
        self,
        call: _Call,
        spec: ToolSpec,
        args: dict[str, Any],
        meta: Mapping[str, Any],
        started: float,
        notices: list[dict[str, str]],
    ) -> Answer:
        injected, fields = self._inject(spec, args, meta)
        await call.record(ContextInjected(fields=fields))
        key_scope = self._key_scope(spec, args, injected)
        if key_scope is not None and key_scope in self._keys_in_flight:
            raise ToolError(
                "idempotency_in_progress", suggested_action={"tool": spec.name, "arguments": args}
            )
        if spec.mutation and not self.journal.healthy:
            raise ToolError("journal_unavailable")
        kind = spec.operation_kind(keyed=key_scope is not None)
        call.mutation = spec.mutation
        list_state = None
        upstream_args = args
        if spec.paged:
            upstream_args, list_state = page_request(args, self.launch.workspace_id, self.cursors)
        try:
            if key_scope is not None:
                self._keys_in_flight.add(key_scope)
            prepared = prepare(spec, self._route, upstream_args, injected)
            reply, body = await self._exchange(call, spec, prepared, kind)
        finally:
            if key_scope is not None:
                self._keys_in_flight.discard(key_scope)
        if not 200 <= reply.status < 300:
            raise self._without_secrets(
                classify_upstream_error(
                    reply.status,
                    body,
                    kind=kind,
                    retry_after=reply.headers.get("retry-after"),
                    refreshable=self.credentials.source.refreshable,
                )
            )
        try:
            if list_state is not None:
                body, list_state = page_answer(args, body, list_state, self.cursors)
            data, result_meta = self._normalize(spec, body, list_state)
        except (_Unusable, NotAPage):
            raise malformed_answer(kind) from None
        if notices:
            result_meta["deprecation"] = {"uses": notices}
        envelope: dict[str, Any] = {"data": data, "meta": result_meta}
        # Never raises: after a 2xx the answer is the outcome, cut to fit if it must be.
        truncated = fit(
            spec.name,
            spec.budget_bytes,
            envelope,
            list_state=list_state,
            list_arguments=args,
            cursors=self.cursors,
        )
        await call.record(
            CallResult(result=envelope, truncated=truncated, duration_ms=_ms(started)), durable=True
        )
        text = render(spec.name, envelope)
        note = call.journal_note()
        if note is not None:
            # The effect happened, so the answer is the result; but never a plain success.
            envelope.setdefault("meta", {})["journal"] = note
            fit(
                spec.name,
                spec.budget_bytes,
                envelope,
                list_state=list_state,
                list_arguments=args,
                cursors=self.cursors,
            )
            text = render(spec.name, envelope) + "\n" + _unrecorded_line(note)
        return Answer(text, envelope, False, _routing_meta(spec, envelope["data"]))

    def _inject(
        self,
        spec: ToolSpec,
        args: dict[str, Any],
        meta: Mapping[str, Any],
    ) -> tuple[dict[str, str], list[InjectedField]]:
        """Hidden context for the upstream DTO, and its journal record (secrets never)."""
        sources = self.launch.sources
        fields = [
            InjectedField(
                name="workspace_id", source=sources["workspace_id"], value=self.launch.workspace_id
            ),
            InjectedField(name="agent_id", source=sources["agent_id"], value=self.launch.agent_id),
            InjectedField(name="bearer_token", source=sources["bearer_token"], value="[redacted]"),
        ]
        injected: dict[str, str] = {}
        if spec.operation == "keyed_create" and "idempotency_key" in args:
            run, callback = _workflow_ids(meta)
            injected = {"workflowRunId": run, "callbackEffectId": callback}
            fields += [
                InjectedField(
                    name="workflow_run_id", source=f"request _meta {META_RUN}", value=run
                ),
                InjectedField(
                    name="callback_effect_id",
                    source=f"request _meta {META_CALLBACK}",
                    value=callback,
                ),
            ]
        return injected, fields

    def _key_scope(
        self, spec: ToolSpec, args: dict[str, Any], injected: dict[str, str]
    ) -> tuple[str, ...] | None:
        key = args.get("idempotency_key")
        if key is None:
            return None
        return (
            self.launch.workspace_id,
            self.launch.agent_id,
            injected["workflowRunId"],
            injected["callbackEffectId"],
            spec.name,
            key,
        )

    async def _exchange(
        self, call: _Call, spec: ToolSpec, prepared: Prepared, kind: OperationKind
    ) -> tuple[Reply, Any]:
        """The one upstream operation, replayed once after a 401 with a refreshed token;
        the reply and its parsed body."""
        try:
            token = await self.credentials.current()
        except CredentialError as exc:
            raise ToolError("credential_unavailable", f"No bearer token: {exc}.") from None
        self.screen.add(token)
        for attempt in (1, 2):
            request = UpstreamRequest(
                method=prepared.method,
                route=prepared.route,
                body=prepared.journal_body,
                attempt=attempt,
            )
            # Write-ahead: a mutation is on disk before it can have any effect upstream.
            if not await call.record(request, durable=spec.mutation) and spec.mutation:
                raise ToolError("journal_unavailable")
            try:
                reply = await self._send(call, spec, prepared, token)
            except TransportFailure as failure:
                error = transport_error(failure, kind)
                error.reason = failure.reason
                raise error from None
            reply, body, problem = self._screened(reply)
            await call.record(
                UpstreamResponse(
                    status=reply.status,
                    body=self._journal_body(reply, body, problem),
                    headers=reply.headers,
                    duration_ms=round(reply.duration_ms, 3),
                    attempt=attempt,
                )
            )
            if "deprecation" in reply.headers or "sunset" in reply.headers:
                await self._record_deprecated_route(call, spec, reply)
            if reply.status != 401 or attempt == 2:
                return reply, self._parse(reply, kind, body, problem)
            try:
                fresh = await self.credentials.refresh(token)
            except CredentialError as exc:
                raise ToolError("credential_unavailable", f"No fresh token: {exc}.") from None
            if fresh is None:  # a static token cannot be refreshed: no replay
                return reply, self._parse(reply, kind, body, problem)
            await call.record(
                TokenRefreshed(source=self.credentials.source.kind, reason="upstream answered 401")
            )
            token = fresh
            self.screen.add(token)
        raise AssertionError("unreachable")

    async def _send(self, call: _Call, spec: ToolSpec, prepared: Prepared, token: str) -> Reply:
        """One upstream request, in a CLIENT span with trace context when tracing is live."""
        if self.tracing is None:
            return await self.upstream.exchange(prepared, token, call.trace_headers)
        template = spec.upstream.route()
        with self.tracing.upstream(prepared.method, prepared.target(), template) as span:
            try:
                reply = await self.upstream.exchange(prepared, token, span.headers)
            except TransportFailure as failure:
                span.failed(failure.kind)
                raise
            span.answered(reply.status)
            return reply

    def _screened(self, reply: Reply) -> tuple[Reply, Any, str | None]:
        """The reply with its kept headers screened, and its body parsed and screened (see
        `_screen`): before anything converts, cuts or journals what the upstream wrote."""
        if reply.headers:
            reply = Reply(
                reply.status, reply.body, self.screen.headers(reply.headers), reply.duration_ms
            )
        body, problem = _decode_body(reply.body)
        if 200 <= reply.status < 300:
            body = self.screen.answer(reply.body, body)
        else:
            body = self.screen.failure(body)
        return reply, body, problem

    def _journal_body(self, reply: Reply, body: Any, problem: str | None) -> Any:
        """The body as journaled: as parsed (screened), or the head of one too large or not
        parsed, screened whole before it is cut."""
        if len(reply.body) > _MAX_JOURNALED_BODY:
            return {
                "truncated_bytes": len(reply.body),
                "head": self.screen.head(reply.body, _CAPPED_PREFIX),
            }
        if problem is not None:
            return {"unparsed": self.screen.head(reply.body, _CAPPED_PREFIX), "problem": problem}
        return body

    def _without_secrets(self, error: ToolError) -> ToolError:
        """An upstream error with every secret the bridge knows removed from what the upstream
        wrote (message, field_errors, candidates): a token echoed back never reaches the model.
        (The body was screened before it was classified; this is the last look at the result.)
        A secret too short to replace inside text safely costs the upstream's wording instead."""
        redactor = self.screen.redactor
        error.message = redactor.redact_text(error.message)
        if error.field_errors:
            error.field_errors = redactor.redact(error.field_errors)
        if error.candidates:
            error.candidates = redactor.redact(error.candidates)
        text = _plain(error.envelope()).decode()
        if any(secret in text for secret in self.screen.values):
            error.message = CODES[error.code][1]
            error.field_errors = None
            error.candidates = None
        return error

    async def _record_deprecated_route(self, call: _Call, spec: ToolSpec, reply: Reply) -> None:
        """RFC 9745 `Deprecation` / RFC 8594 `Sunset` on an upstream answer."""
        successor = reply.headers.get("link")
        await call.record(
            DeprecatedUsage(
                use_kind="upstream_route",
                old_name=f"{spec.upstream.method} {spec.upstream.route()}",
                replacement=cut(successor, 300) if successor else None,  # screened headers
                client_name=self.session.client_name,
                client_version=self.session.client_version,
                agent_id=self.launch.agent_id,
            )
        )

    def _parse(self, reply: Reply, kind: OperationKind, body: Any, problem: str | None) -> Any:
        """The JSON body (parsed within the depth limit); a 2xx that is not JSON, or nested too
        deeply, is an unusable answer, an error status without one is classified by its status
        alone."""
        if problem is None:
            return body
        if 200 <= reply.status < 300:
            raise malformed_answer(kind)
        return None

    def _normalize(
        self,
        spec: ToolSpec,
        body: Any,
        list_state: PageState | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        meta: dict[str, Any] = {}
        if not isinstance(body, dict):
            raise _Unusable
        body = dict(body)
        next_cursor = body.pop("nextCursor", None)
        try:
            data = from_upstream(body, spec.data_type)  # camelCase in, snake_case out
        except msgspec.ValidationError:
            raise _Unusable from None
        if isinstance(next_cursor, str):
            meta["next_cursor"] = next_cursor
        return data, meta


class _Recorder(Protocol):
    async def record(self, payload: Payload, *, durable: bool = False) -> bool: ...

    def rename(self, tool: str) -> None: ...


class _Unjournaled:
    """A recorder that records nothing (a dry run of resolution)."""

    async def record(self, payload: Payload, *, durable: bool = False) -> bool:
        return True

    def rename(self, tool: str) -> None:
        pass


MAX_WORKFLOW_ID_BYTES = 128  # the runtime's limit on workflowRunId and callbackEffectId


def _workflow_ids(meta: Mapping[str, Any]) -> tuple[str, str]:
    """The workflow run and callback effect of a keyed `task_create`, whole or refused.

    An id over the limit is refused, never cut: two runs whose ids share a prefix must never
    share an idempotency scope. The limit is in UTF-8 bytes, at or under the runtime's own.
    """
    run, callback = meta.get(META_RUN), meta.get(META_CALLBACK)
    if not (isinstance(run, str) and run and isinstance(callback, str) and callback):
        raise _Rejected(
            ToolError(
                "idempotency_key_requires_callback",
                field_errors={"$.idempotency_key": "no active workflow callback in this call"},
            )
        )
    too_long = {
        f"_meta.{key}": f"longer than {MAX_WORKFLOW_ID_BYTES} UTF-8 bytes ({size})"
        for key, value in ((META_RUN, run), (META_CALLBACK, callback))
        if (size := len(value.encode("utf-8", "surrogatepass"))) > MAX_WORKFLOW_ID_BYTES
    }
    if too_long:
        raise _Rejected(
            ToolError(
                "invalid_arguments",
                "The workflow context in the request's `_meta` (set by the client, not the"
                f" model) has an id longer than {MAX_WORKFLOW_ID_BYTES} UTF-8 bytes;"
                " it is refused, never cut.",
                field_errors=too_long,
            )
        )
    return run, callback


class _Call:
    """One call's journal identity; `record` never raises, it reports whether the event landed.

    Once one of its events is lost, the call records nothing more (the journal refuses the rest
    of a call that lost an event, so its story stays a clean prefix) and `journal_note` says so.
    """

    def __init__(self, bridge: Bridge, call_id: str, tool: str, request_id: str | int | None):
        self._bridge = bridge
        self.call_id = call_id
        self.tool = tool
        self.request_id = request_id
        self.trace_headers: list[tuple[bytes, bytes]] = []  # the client's, when tracing is off
        self.received: CallReceived | None = None
        self.received_recorded = False
        self.mutation = False
        self.sent = False  # a mutation's request is durable: its effect may happen
        self.outcome_appended = False
        self.lost: str | None = None  # why an event of this call could not be recorded

    def rename(self, tool: str) -> None:
        self.tool = tool

    async def record(self, payload: Payload, *, durable: bool = False) -> bool:
        if self.lost is not None:
            return False
        kind = payload.kind
        if kind in _OUTCOMES:
            return await self._record_outcome(payload, durable)
        ok = await self._append(payload, durable=durable)
        if ok and kind == "call_received":
            self.received_recorded = True
        elif ok and kind == "upstream_request" and self.mutation:
            self.sent = True
        return ok

    async def _record_outcome(self, payload: Payload, durable: bool) -> bool:
        """The call's one outcome. Shielded: once it is journaled, the answer that says the same
        is returned, so a shutdown can never answer a journaled result as cut short."""
        if self.outcome_appended:
            return False
        self.outcome_appended = True  # before the await: a cancellation must not add one
        with trio.CancelScope(shield=True):
            if not self.received_recorded and self.received is not None:
                # Refused before its first event landed (cancelled in the queue's wait): the
                # call still opens with the request as received.
                if not await self._append(self.received, durable=False):
                    return False
            ok = await self._append(payload, durable=durable)
        unanswered = self._bridge.session.unanswered
        if ok and unanswered is not None and self.request_id is not None:
            if payload.kind != "call_cancelled":  # a cut call is answered as closed, or not
                unanswered.journaled(self.request_id, self.call_id, payload.kind)
        return ok

    async def _append(self, payload: Payload, *, durable: bool) -> bool:
        event = Event(
            session_id=self._bridge.session.session_id,
            call_id=self.call_id,
            mcp_method_name="tools/call",
            gen_ai_tool_name=self.tool[:128],
            jsonrpc_request_id=self.request_id,
            payload=payload,
        )
        try:
            await self._bridge.journal.append(event, durable=durable)
        except JournalFailed as exc:
            log.error("journal write failed (%s): %s", payload.kind, exc.reason)
            self.lost = exc.reason
            return False
        except Exception as exc:  # an event the journal cannot take (a bug): never the text
            log.error("journal write failed (%s): %s", payload.kind, type(exc).__name__)
            self.lost = "io_error"
            return False
        return True

    async def cancelled(self) -> None:
        """Journal the cancellation (shielded: the call's scope is already cancelled)."""
        with trio.CancelScope(shield=True):
            await self.record(CallCancelled(reason="cancelled by the client or shutdown"))

    def journal_note(self) -> dict[str, Any] | None:
        """`meta.journal` for an answer whose outcome the journal lacks, else None."""
        if self.lost is None:
            return None
        note: dict[str, Any] = {"recorded": False, "reason": self.lost}
        if self.sent:
            note["in_doubt"] = True
        return note


class _Unusable(Exception):
    """A 2xx body that is not the tool's documented shape (answered by `malformed_answer`)."""


class _Rejected(Exception):
    """A call refused before any upstream effect (journaled as `call_rejected`)."""

    def __init__(self, error: ToolError) -> None:
        super().__init__(error.code)
        self.error = error


def _routing_meta(spec: ToolSpec, data: dict[str, Any]) -> dict[str, Any] | None:
    """Where the active task is, for the runtime's routing (never hidden context)."""
    task = data.get("task")
    if task is None and spec.receipt_lists_tasks and len(data.get("tasks", [])) == 1:
        task = data["tasks"][0]
    if not isinstance(task, dict) or "scope_id" not in task:
        return None
    return {
        "agentteam/task": {
            "channel": task["channel"],
            "number": task["number"],
            "scope_id": task["scope_id"],
        }
    }


def _error_result(
    error: ToolError, notices: list[dict[str, str]], note: dict[str, Any] | None = None
) -> Answer:
    envelope = error.envelope()
    if notices:
        envelope["meta"] = {"deprecation": {"uses": notices}}
    if note is not None:
        envelope.setdefault("meta", {})["journal"] = note
    return Answer(render_error(envelope), envelope, True, None)


def _decode_body(raw: bytes) -> tuple[Any, str | None]:
    """An upstream body parsed within the depth limit: (value, None), or (None, the problem:
    ``not_json`` for bad JSON or UTF-8, ``too_deep`` past _MAX_BODY_DEPTH)."""
    if not raw:
        return None, None
    try:
        value = _decode(raw)
    except msgspec.DecodeError:
        return None, "not_json"
    except RecursionError:
        return None, "too_deep"
    if not _shallow(raw) and not _depth_within(value, _MAX_BODY_DEPTH):
        return None, "too_deep"
    return value, None


def _shallow(raw: bytes) -> bool:
    """A fast sufficient test that a JSON text nests at most _MAX_BODY_DEPTH deep: its brackets
    alone (quoted ones too) pair up within that many rounds. Bodies it cannot clear are walked."""
    brackets = raw.translate(None, _BRACKETS_ONLY)
    for _ in range(_MAX_BODY_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return not brackets


def _depth_within(value: Any, limit: int) -> bool:
    if not isinstance(value, dict | list):
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return False
                stack.append((child, depth + 1))
    return True


def _encoded_arguments(value: Any) -> bytes:
    try:
        return _plain(value if value is not None else {})
    except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
        return _plain({"unencodable": repr(type(value).__name__)})


def _internal_error(call: _Call, exc: BaseException) -> ToolError:
    """A bug, answered with a fixed message: never the exception's text, which may hold data."""
    where = exc.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    site = f"{where.tb_frame.f_code.co_filename}:{where.tb_lineno}" if where else "?"
    log.error("internal error in call %s: %s at %s", call.call_id, type(exc).__name__, site)
    return internal_error(sent=call.sent)


def _unrecorded_line(note: dict[str, Any]) -> str:
    return (
        f"[journal: this outcome could not be recorded ({note['reason']}); "
        "the change was applied, the audit journal holds it as in doubt]"
        if note.get("in_doubt")
        else f"[journal: this call could not be recorded ({note['reason']})]"
    )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
