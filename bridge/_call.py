"""The hot path: one tool call, a pipeline of stages read top to bottom.

    receive -> admit (resolve tool, validate, hidden context) -> forward (journal the context,
      write-ahead request, one upstream operation; one refresh-and-replay on 401) -> result
      (normalize, budget, journal the outcome durably) -> answer

Each stage returns a value: ``_admit`` the admitted call or the refusal that ends it, ``_forward``
the answer or the failure that ends it; ``_refuse`` journals such an end and answers it. The
journal's kind for an end is the stage's, read from the call's position in the call grammar
(:mod:`bridge._call_record`): before ``context_injected`` a refusal is ``call_rejected``, after it
``call_error``; a cancellation anywhere is ``call_cancelled``; any unexpected exception becomes
``internal_error`` (a fixed message) of the stage it happened in. So whatever happens inside a
call ends in one journaled outcome, in an order the auditor accepts.

Every stage is a journal event. A mutation's upstream request is durable before it is sent and
every outcome is durable before the model sees it; when the journal cannot be written, mutations
fail closed, and an answer whose outcome could not be recorded says so in `meta.journal`
(``{"recorded": false, "reason": ...}``, with ``"in_doubt": true`` for a mutation that was sent).
Error codes live in `_errors`, the upstream spelling in `_dto`, budgets in `_budget`, bodies in
`_call_body`, the per-call journal record in `_call_record`.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import msgspec
import trio

from agentteam_task_bridge.journal import (
    META_CALLBACK,
    META_RUN,
    CallError,
    CallReceived,
    CallRejected,
    CallResult,
    ContextInjected,
    DeprecatedUsage,
    InjectedField,
    tasks_route,
)

from ._answer import Answer
from ._call_body import encoded_arguments
from ._call_record import CallRecord, JournalPort, Recorder, Unjournaled, journal_unavailable
from ._call_upstream import CAPPED_PREFIX, UpstreamStage
from ._compat import TOOL_MIGRATIONS, Policy, Use, strict_refusal, tool_refusal, translate_arguments
from ._context import Credentials, LaunchContext
from ._cursor import Cursors, NotAPage, PageState, page_answer, page_request, upstream_cursor
from ._detail import DetailState, continue_detail, detail_request, fit_answer
from ._dto import from_upstream
from ._errors import OperationKind, ToolError, internal_error, suggest
from ._exceptions import JournalFailed
from ._lifecycle import Unanswered
from ._metrics import Metrics
from ._registry import TOOLS, ToolSpec
from ._render import render, render_error
from ._screen import Screen
from ._telemetry import Tracing, client_trace, passthrough_headers, screened_trace
from ._upstream import UpstreamClient, prepare
from ._upstream_errors import classify_upstream_error, malformed_answer
from ._validate import canonical_arguments, validate

__all__ = ["Bridge", "JournalFailed", "JournalPort", "Session"]

log = logging.getLogger("agentteam.bridge")
_plain = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
# Arguments journaled in full up to this size; a larger request the bridge refuses is journaled
# as a prefix and the sha256 of the whole (three 15 MB frames made a 47 MB journal).
_MAX_JOURNALED_ARGUMENTS = 256 * 1024


@dataclass
class Session:
    session_id: str
    client_name: str | None = None
    client_version: str | None = None
    calls: int = 0
    # With a door that writes the answers (`serve`'s stdio): the calls whose outcome is
    # journaled and whose answer is not on the wire yet.
    unanswered: Unanswered | None = None


@dataclass(slots=True)
class Admitted:
    """A call the bridge will forward: its tool, canonical arguments and hidden context."""

    spec: ToolSpec
    args: dict[str, Any]
    injected: dict[str, str]  # for the upstream DTO
    fields: list[InjectedField]  # what the journal says was injected (secrets never)
    key_scope: tuple[str, ...] | None  # an idempotency key's scope
    kind: OperationKind
    notices: list[dict[str, str]]


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
        metrics: Metrics | None = None,
    ) -> None:
        self.compat = compat
        # Signs the cursors of the pages it cuts: the installation's key (`serve`), or one of
        # this process only.
        self.cursors = cursors or Cursors.ephemeral()
        self.tracing = tracing
        self.metrics = metrics  # told each call's outcome (`CallRecord._record_outcome`)
        self.launch = launch
        self.upstream = upstream
        self.journal = journal
        self.session = session
        self._route = tasks_route(launch.workspace_id, launch.agent_id)
        self._ids = itertools.count(1)
        self._keys_in_flight: set[tuple[str, ...]] = set()
        # Every token this bridge has sent (and a proxy password): an upstream that echoes one
        # back, whole, cut or re-cased, must not hand it to the model, the journal or a span.
        self.screen = Screen()
        self.screen.hide(launch.workspace_id, launch.agent_id)
        if tracing is not None:
            self.screen.listeners.append(tracing.add_secret)
        self._stage = UpstreamStage(
            upstream, credentials, self.screen, tracing, session, launch.agent_id
        )

    @property
    def credentials(self) -> Credentials:
        return self._stage.credentials

    @credentials.setter
    def credentials(self, credentials: Credentials) -> None:
        self._stage.credentials = credentials

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
        session = self.session
        session.calls += 1
        call = CallRecord(
            self.journal,
            session.session_id,
            f"{session.session_id}.{next(self._ids)}",
            name,
            request_id,
            session.unanswered,
            self.metrics,
            started,
        )
        notices: list[dict[str, str]] = []
        try:
            screened = await self._receive(call, name, arguments, meta or {})
            admitted = await self._admit(call, name, arguments, screened, notices)
            if isinstance(admitted, ToolError):
                return await self._refuse(call, admitted, notices, started)
            answered = await self._forward(call, admitted, started)
            if isinstance(answered, ToolError):
                return await self._refuse(call, answered, notices, started, name, admitted.args)
            return answered
        except Exception as exc:  # the one catch-all: a bug must not cost the outcome
            return await self._refuse(call, _internal_error(call, exc), notices, started)
        except BaseException as exc:
            # trio.run_process (the token command) and other nurseries wrap a cancellation;
            # KeyboardInterrupt and SystemExit are not ours.
            if isinstance(exc, trio.Cancelled) or (
                isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None
            ):
                await call.cancelled()
            raise

    async def _receive(
        self, call: CallRecord, name: str, arguments: Any, meta: Mapping[str, Any]
    ) -> Mapping[str, Any]:
        """Journal the request as received; the `_meta` with unusable trace context dropped."""
        # Trace context with a control character is dropped (and said so), never sent upstream.
        meta, trace_dropped = screened_trace(meta)
        if self.tracing is not None:
            trace = self.tracing.annotate_call(self.session.session_id)
        else:
            trace = client_trace(meta)
            call.trace_headers = passthrough_headers(meta) if trace else []
        # MCP treats absent and null arguments as none: journal them as `{}`.
        call.received = CallReceived(
            arguments=await self._journaled_arguments(name, arguments),
            meta_keys=[key[:128] for key in sorted(meta)[:64]],
            jsonrpc_request_id=call.request_id,
            trace_id=trace[0] if trace else None,
            span_id=trace[1] if trace else None,
            trace_context_dropped=trace_dropped,
        )
        await call.record(call.received)
        return meta

    async def _admit(
        self,
        call: CallRecord,
        name: str,
        arguments: Any,
        meta: Mapping[str, Any],
        notices: list[dict[str, str]],
    ) -> Admitted | ToolError:
        """The call as it will be forwarded, or why it is refused (before any upstream effect)."""
        try:
            spec, arguments = await self._resolve(call, name, arguments, notices)
            args = canonical_arguments(validate(spec.input_type, arguments))
            injected, fields = self._inject(spec, args, meta)
        except ToolError as refusal:
            return refusal
        key_scope = self._key_scope(spec, args, injected)
        kind = spec.operation_kind(keyed=key_scope is not None)
        return Admitted(spec, args, injected, fields, key_scope, kind, notices)

    async def _refuse(
        self,
        call: CallRecord,
        error: ToolError,
        notices: list[dict[str, str]],
        started: float,
        name: str = "",
        args: dict[str, Any] | None = None,
    ) -> Answer:
        """Journal the end of a call that has no result durably, as its stage's outcome (see
        module), and answer it (saying so if it was not recorded)."""
        if call.admitting:
            outcome: CallRejected | CallError = CallRejected(
                error_code=error.code,
                message=error.message,
                field_errors=error.field_errors or {},
                suggested_action=error.suggested_action,
                retryable=error.retryable,
                candidates=error.candidates,
            )
        else:
            if error.suggested_action is None:
                error.suggested_action = suggest(error, name, args or {})
            outcome = CallError(
                error_code=error.code,
                retryable=error.retryable,
                message=error.message,
                duration_ms=_ms(started),
                field_errors=error.field_errors or {},
                suggested_action=error.suggested_action,
                candidates=error.candidates,
                retry_after_seconds=error.retry_after_seconds,
                reason=error.reason,
            )
        await call.record(outcome, durable=True)
        return _error_result(error, notices, call.journal_note())

    async def _forward(
        self, call: CallRecord, admitted: Admitted, started: float
    ) -> Answer | ToolError:
        """Journal the injected context, then the one upstream operation: the answer, or the
        failure that ends the call."""
        spec, args, key_scope = admitted.spec, admitted.args, admitted.key_scope
        await call.record(ContextInjected(fields=admitted.fields))
        try:
            if key_scope is not None and key_scope in self._keys_in_flight:
                raise ToolError(
                    "idempotency_in_progress",
                    suggested_action={"tool": spec.name, "arguments": args},
                )
            if spec.mutation and not self.journal.healthy:
                raise journal_unavailable(self.journal.failure_reason)
            call.mutation = spec.mutation
            list_state = None
            detail_state = None
            upstream_args = args
            if spec.paged:
                upstream_args, list_state = page_request(
                    args, self.launch.workspace_id, self.cursors
                )
            elif spec.sectioned:
                upstream_args, detail_state = detail_request(
                    args, self.launch.workspace_id, self.cursors
                )
            try:
                if key_scope is not None:
                    self._keys_in_flight.add(key_scope)
                prepared = prepare(spec, self._route, upstream_args, admitted.injected)
                reply, body = await self._stage.exchange(call, spec, prepared, admitted.kind)
            finally:
                if key_scope is not None:
                    self._keys_in_flight.discard(key_scope)
            if not 200 <= reply.status < 300:
                raise self._stage.without_secrets(
                    classify_upstream_error(
                        reply.status,
                        body,
                        kind=admitted.kind,
                        retry_after=reply.headers.get("retry-after"),
                        refreshable=self.credentials.source.refreshable,
                    )
                )
            return await self._result(call, admitted, body, list_state, detail_state, started)
        except ToolError as failure:
            return failure

    async def _result(
        self,
        call: CallRecord,
        admitted: Admitted,
        body: Any,
        list_state: PageState | None,
        detail_state: DetailState | None,
        started: float,
    ) -> Answer:
        """A 2xx answer normalized, fitted to the budget and journaled durably: the answer."""
        spec, args, notices = admitted.spec, admitted.args, admitted.notices
        try:
            if list_state is not None:
                body, list_state = page_answer(args, body, list_state, self.cursors)
            data, result_meta = self._normalize(spec, body, list_state)
        except (_Unusable, NotAPage):
            raise malformed_answer(admitted.kind) from None
        if detail_state is not None:
            continue_detail(data, result_meta, detail_state)
        if notices:
            result_meta["deprecation"] = {"uses": notices}
        envelope: dict[str, Any] = {"data": data, "meta": result_meta}
        # Never raises: after a 2xx the answer is the outcome, cut to fit if it must be.
        truncated = fit_answer(
            spec.name, spec.budget_bytes, envelope, args, list_state, detail_state, self.cursors
        )
        await call.record(
            CallResult(result=envelope, truncated=truncated, duration_ms=_ms(started)), durable=True
        )
        text = render(spec.name, envelope)
        note = call.journal_note()
        if note is not None:
            # The effect happened, so the answer is the result; but never a plain success.
            envelope.setdefault("meta", {})["journal"] = note
            fit_answer(
                spec.name, spec.budget_bytes, envelope, args, list_state, detail_state, self.cursors
            )
            text = render(spec.name, envelope) + "\n" + _unrecorded_line(note)
        return Answer(text, envelope, False, _routing_meta(spec, envelope["data"]))

    async def _journaled_arguments(self, name: str, arguments: Any) -> dict[str, Any]:
        """The arguments as journaled: in full, unless too big and refused anyway (then a
        prefix and the digest of the whole)."""
        encoded = encoded_arguments(arguments)
        if len(encoded) <= _MAX_JOURNALED_ARGUMENTS or await self._would_accept(name, arguments):
            value = _decode(encoded)
            return value if isinstance(value, dict) else {"arguments": value}
        return {
            "capped": {
                "bytes": len(encoded),
                "sha256": hashlib.sha256(encoded).hexdigest(),
                # Screened before the cut: a credential across it goes whole, never a prefix.
                "prefix": self.screen.head(encoded, CAPPED_PREFIX, utf8=True),
            }
        }

    async def _would_accept(self, name: str, arguments: Any) -> bool:
        """Whether resolution and validation would take these arguments (journals nothing)."""
        try:
            spec, resolved = await self._resolve(Unjournaled(), name, arguments, [])
            validate(spec.input_type, resolved)
        except ToolError:
            return False
        return True

    async def _resolve(
        self, call: Recorder, name: str, arguments: Any, notices: list[dict[str, str]]
    ) -> tuple[ToolSpec, Any]:
        """The canonical tool and argument spellings, applying the compatibility policy."""
        spec = TOOLS.get(name)
        migration = None
        uses: list[Use] = []
        if spec is None:
            migration = TOOL_MIGRATIONS.get(name)
            if migration is None:
                raise ToolError(
                    "unknown_tool",
                    f"No tool named `{name[:64]}`.",
                    field_errors={"$.name": "not a tool of this server"},
                )
            spec = TOOLS[migration.tool]
            uses.append(Use("tool_name", name, migration.tool))
            arguments = {} if arguments is None else arguments
            if not isinstance(arguments, dict):
                raise ToolError(
                    "invalid_arguments",
                    "Arguments must be a JSON object.",
                    field_errors={"$": "expected an object"},
                )
        translated, argument_uses = translate_arguments(spec.name, arguments)
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
            translated = migration.map_arguments(translated)
            if self.compat != "forward":
                invalid = None
                if self.compat == "hint":  # a suggestion is a valid call, or there is none
                    try:
                        validate(spec.input_type, translated)
                    except ToolError as exc:
                        invalid = exc
                raise tool_refusal(self.compat, migration, translated, invalid)
            call.rename(spec.name)
        if argument_uses and self.compat == "strict":
            raise strict_refusal(argument_uses)
        notices += [use.notice() for use in uses]
        return spec, translated

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
            self.screen.hide(run, callback)
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
        if list_state is None:  # a list page's was checked by `page_answer` (or is the bridge's)
            next_cursor = upstream_cursor(next_cursor)
        try:
            data = from_upstream(body, spec.data_type)  # camelCase in, snake_case out
        except msgspec.ValidationError:
            raise _Unusable from None
        if next_cursor is not None:
            meta["next_cursor"] = next_cursor
        return data, meta


MAX_WORKFLOW_ID_BYTES = 128  # the runtime's limit on workflowRunId and callbackEffectId


def _workflow_ids(meta: Mapping[str, Any]) -> tuple[str, str]:
    """The workflow run and callback effect of a keyed `task_create`, whole or refused.

    An id over the limit is refused, never cut: two runs whose ids share a prefix must never
    share an idempotency scope. The limit is in UTF-8 bytes, at or under the runtime's own.
    """
    run, callback = meta.get(META_RUN), meta.get(META_CALLBACK)
    if not (isinstance(run, str) and run and isinstance(callback, str) and callback):
        raise ToolError(
            "idempotency_key_requires_callback",
            field_errors={"$.idempotency_key": "no active workflow callback in this call"},
        )
    too_long = {
        f"_meta.{key}": f"longer than {MAX_WORKFLOW_ID_BYTES} UTF-8 bytes ({size})"
        for key, value in ((META_RUN, run), (META_CALLBACK, callback))
        if (size := len(value.encode("utf-8", "surrogatepass"))) > MAX_WORKFLOW_ID_BYTES
    }
    if too_long:
        raise ToolError(
            "invalid_arguments",
            "The workflow context in the request's `_meta` (set by the client, not the"
            f" model) has an id longer than {MAX_WORKFLOW_ID_BYTES} UTF-8 bytes;"
            " it is refused, never cut.",
            field_errors=too_long,
        )
    return run, callback


class _Unusable(Exception):
    """A 2xx body that is not the tool's documented shape (answered by `malformed_answer`)."""


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


def _internal_error(call: CallRecord, exc: BaseException) -> ToolError:
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
