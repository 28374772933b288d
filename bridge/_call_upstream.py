"""The forward stage's one upstream operation: send, screen, journal, refresh once on a 401.

Invariants: a mutation's ``upstream_request`` is durable before the request can have an effect
(a mutation whose request cannot be journaled is not sent); every reply is screened for the
secrets the bridge knows before anything parses, converts, cuts or journals it; a 401 is replayed
once, with a refreshed token, and never for a static one; a request without an HTTP answer is the
retry table's transport row, with the transport's reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from agentteam_task_bridge.journal import (
    DeprecatedUsage,
    TokenRefreshed,
    UpstreamRequest,
    UpstreamResponse,
)

from ._call_body import decode_body
from ._call_record import CallRecord, journal_unavailable
from ._context import CredentialError, Credentials
from ._errors import CODES, OperationKind, ToolError
from ._registry import ToolSpec
from ._screen import Screen, cut
from ._telemetry import Tracing
from ._upstream import Prepared, Reply, TransportFailure, UpstreamClient
from ._upstream_errors import malformed_answer, transport_error

if TYPE_CHECKING:
    from ._call import Session

_plain = msgspec.json.Encoder().encode
MAX_JOURNALED_BODY: Final = 256 * 1024
CAPPED_PREFIX: Final = 4096


class UpstreamStage:
    """One session's upstream: the client, the credentials, the secret screen and the tracing."""

    def __init__(
        self,
        upstream: UpstreamClient,
        credentials: Credentials,
        screen: Screen,
        tracing: Tracing | None,
        session: Session,
        agent_id: str,
    ) -> None:
        self._upstream = upstream
        self.credentials = credentials
        self._screen = screen
        self._tracing = tracing
        self._session = session
        self._agent_id = agent_id

    async def exchange(
        self, call: CallRecord, spec: ToolSpec, prepared: Prepared, kind: OperationKind
    ) -> tuple[Reply, Any]:
        """The one upstream operation, replayed once after a 401 with a refreshed token;
        the reply and its parsed body."""
        try:
            token = await self.credentials.current()
        except CredentialError as exc:
            raise ToolError("credential_unavailable", f"No bearer token: {exc}.") from None
        self._screen.add(token)
        for attempt in (1, 2):
            request = UpstreamRequest(
                method=prepared.method,
                route=prepared.route,
                body=prepared.journal_body,
                attempt=attempt,
            )
            # Write-ahead: a mutation is on disk before it can have any effect upstream.
            if not await call.record(request, durable=spec.mutation) and spec.mutation:
                raise journal_unavailable(call.lost)
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
            self._screen.add(token)
        raise AssertionError("unreachable")

    async def _send(
        self, call: CallRecord, spec: ToolSpec, prepared: Prepared, token: str
    ) -> Reply:
        """One upstream request, in a CLIENT span with trace context when tracing is live."""
        if self._tracing is None:
            return await self._upstream.exchange(prepared, token, call.trace_headers)
        template = spec.upstream.route()
        with self._tracing.upstream(prepared.method, prepared.target(), template) as span:
            try:
                reply = await self._upstream.exchange(prepared, token, span.headers)
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
                reply.status, reply.body, self._screen.headers(reply.headers), reply.duration_ms
            )
        body, problem = decode_body(reply.body)
        if 200 <= reply.status < 300:
            body = self._screen.answer(reply.body, body)
        else:
            body = self._screen.failure(body)
        return reply, body, problem

    def _journal_body(self, reply: Reply, body: Any, problem: str | None) -> Any:
        """The body as journaled: as parsed (screened), or the head of one too large or not
        parsed, screened whole before it is cut."""
        if len(reply.body) > MAX_JOURNALED_BODY:
            return {
                "truncated_bytes": len(reply.body),
                "head": self._screen.head(reply.body, CAPPED_PREFIX),
            }
        if problem is not None:
            return {"unparsed": self._screen.head(reply.body, CAPPED_PREFIX), "problem": problem}
        return body

    def without_secrets(self, error: ToolError) -> ToolError:
        """An upstream error with every secret the bridge knows removed from what the upstream
        wrote (message, field_errors, candidates): a token echoed back never reaches the model.
        (The body was screened before it was classified; this is the last look at the result.)
        A secret too short to replace inside text safely costs the upstream's wording instead."""
        redactor = self._screen.redactor
        error.message = redactor.redact_text(error.message)
        if error.field_errors:
            error.field_errors = redactor.redact(error.field_errors)
        if error.candidates:
            error.candidates = redactor.redact(error.candidates)
        text = _plain(error.envelope()).decode()
        if any(secret in text for secret in self._screen.values):
            error.message = CODES[error.code][1]
            error.field_errors = None
            error.candidates = None
        return error

    async def _record_deprecated_route(
        self, call: CallRecord, spec: ToolSpec, reply: Reply
    ) -> None:
        """RFC 9745 `Deprecation` / RFC 8594 `Sunset` on an upstream answer."""
        successor = reply.headers.get("link")
        await call.record(
            DeprecatedUsage(
                use_kind="upstream_route",
                old_name=f"{spec.upstream.method} {spec.upstream.route()}",
                replacement=cut(successor, 300) if successor else None,  # screened headers
                client_name=self._session.client_name,
                client_version=self._session.client_version,
                agent_id=self._agent_id,
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
