"""The stdio MCP server: the SDK's low-level server under trio, wired to the call flow.

`serve` owns everything a session needs in one nursery-shaped stack: the journal writer, the
optional embedded runtime, the HTTP pool and the MCP session. The session ends (stdin EOF, SIGINT,
SIGTERM, SIGHUP: `_lifecycle`) by the stdio door no longer reading: calls in flight finish or are
cut at the drain deadline, their answers are written, the session end is journaled, the writer
checkpoints and closes, and telemetry gets what is left of the deadline.
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import mcp_types as types
import trio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from agentteam_task_bridge.journal import (
    AnswerUndelivered,
    Event,
    SessionEnded,
    SessionHandshake,
    SessionStarted,
    announce_key,
    default_key_path,
    warm_up_redaction,
)

from . import __version__, _metrics, _telemetry
from ._call import Bridge, JournalPort, Session
from ._compat import Policy
from ._context import ConfigError, Credentials, LaunchContext, load_launch_context, redact_url
from ._cursor import Cursors, load_cursor_key
from ._door import Door, trio_stdio
from ._exceptions import JournalFailed
from ._journaling import open_journal
from ._lifecycle import STDIN_CLOSED, STOP_SIGNALS, Shutdown, Unanswered
from ._network import NetworkConfigError
from ._paths import default_journal_dir, default_runtime_db, is_pool
from ._registry import INSTRUCTIONS, mcp_tools
from ._retention import retain_payloads
from ._screen import LOG_SCREEN
from ._upstream import TransportFailure, UpstreamClient

log = logging.getLogger("agentteam.bridge")
# Lines a person looks for in the client's MCP log, shown unless --log-level is error.
start_log = logging.getLogger("agentteam.bridge.start")
SERVER_NAME = "agentteam-tasks"
_PROBE_SECONDS = 5.0
_LIST_RESULT = types.ListToolsResult(tools=mcp_tools())


@dataclass(frozen=True)
class ServeConfig:
    journal_path: str | os.PathLike[str]
    compat: Policy = "hint"
    api_url: str | None = None
    embedded: bool = False
    runtime_db: Path | None = None
    durable: bool = True
    journal_max_bytes: int | None = None
    # Segment roll-over (None: never); `agentteam-bridge serve` passes its defaults (64M, 7d).
    journal_segment_bytes: int | None = None
    journal_segment_age: float | None = None
    upstream_timeout_seconds: float = 10.0
    upstream_keepalive_seconds: float = 4.0
    # Erase payloads older than this many days, at start and periodically (bridge._retention).
    retain_payloads_days: float | None = None


class _SessionLog:
    """Journals the session's start at process start, and who the client is once its handshake
    arrives (`session_handshake`). Never raises: a journal that cannot take a record is the
    degraded mode (reads answered with `meta.journal`, mutations refused), said on stderr, not a
    failed request."""

    def __init__(
        self, journal: JournalPort, session: Session, launch: LaunchContext, compat: str
    ) -> None:
        self._journal = journal
        self._session = session
        self._launch = launch
        self._compat = compat

    async def start(self) -> None:
        """Journal the session's start (before any frame is read)."""
        await self._append(
            SessionStarted(
                bridge_version=__version__,
                compat_policy=self._compat,
                workspace_id=self._launch.workspace_id,
                agent_id=self._launch.agent_id,
                api_url=redact_url(self._launch.api_url),
            ),
            None,
        )

    async def handshake(
        self, client_name: str | None, client_version: str | None, protocol_version: str | None
    ) -> None:
        """Journal who the client is and the protocol version answered to its `initialize`
        (before that answer is written, so before any call of the session)."""
        self._session.client_name = client_name
        self._session.client_version = client_version
        await self._append(
            SessionHandshake(
                client_name=client_name,
                client_version=client_version,
                protocol_version=protocol_version,
            ),
            "initialize",
        )

    async def _append(self, payload: SessionStarted | SessionHandshake, method: str | None) -> None:
        try:
            await self._journal.append(
                Event(session_id=self._session.session_id, mcp_method_name=method, payload=payload),
                durable=True,
            )
        except JournalFailed as exc:
            log.warning(
                "the journal cannot record this session's %s (%s): reads are answered "
                "with meta.journal, mutations are refused until it can",
                "start" if isinstance(payload, SessionStarted) else "client",
                exc.reason,
            )


_start_up_frozen = False


def _freeze_start_up() -> None:
    """Start-up's objects (the SDK, pydantic's models, the registry) live as long as the
    process: frozen out of the collector's generations, the periodic full collection no longer
    walks them (~40M instructions, a stall of tens of ms), nor do the gen-1 ones. Once per
    process: what a later session's handshake would freeze is the garbage made since (a process
    serving sessions one after another, as the in-memory harness does), never collected."""
    global _start_up_frozen
    if not _start_up_frozen:
        _start_up_frozen = True
        gc.freeze()


def build_server(bridge: Bridge, door: Door) -> Server[Any]:
    """The SDK server behind `door` over the call flow; its OpenTelemetry middleware only when
    tracing is live."""

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if params is not None and params.cursor is not None:
            # One page holds every tool, so no cursor was ever issued: MCP says an invalid
            # cursor is an error (-32602), not the first page again.
            raise MCPError(types.INVALID_PARAMS, "Invalid params: tools/list has no other page")
        return _LIST_RESULT

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await door.call(params.name, params.arguments, params.meta, ctx.request_id)

    async def on_initialized(ctx: ServerRequestContext[Any], params: Any) -> None:
        _freeze_start_up()
        # The secret rule set (~0.1 s of imports) was not needed for the session's records (the
        # screen passes them): its import starts now, once the client has its `initialize`
        # answer, and is done before a first call needs it, as a client takes its time to make
        # one. Not at an idle session's end: a thread still importing slows the exit.
        warm_up_redaction()

    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    server.add_notification_handler(
        "notifications/initialized", types.NotificationParams, on_initialized
    )
    if bridge.tracing is None:
        # The SDK's OpenTelemetry middleware costs a span per message even with no exporter.
        server.middleware.clear()
    return server


def runtime_db_path(config: ServeConfig) -> Path:
    """The embedded runtime's database: `--runtime-db`, else beside the journal.

    The default pool shares `agentteam-bridge runtime`'s default database, so a board survives
    restarts and is the same for every session; another pool directory holds its own
    `runtime.db`; a journal file has one beside it.
    """
    if config.runtime_db is not None:
        return Path(config.runtime_db).expanduser()
    journal = Path(config.journal_path).expanduser()
    if not is_pool(config.journal_path):
        return journal.parent / "runtime.db"
    if journal.resolve() == default_journal_dir().resolve():
        return default_runtime_db()
    return journal / "runtime.db"


def check_paths(config: ServeConfig) -> None:
    """Refuse, before any file is touched, a runtime database that is the journal itself."""
    if not config.embedded:
        return
    runtime_db = runtime_db_path(config).resolve()
    journal = Path(config.journal_path).expanduser().resolve()
    in_pool = is_pool(config.journal_path) and runtime_db.parent == journal
    if runtime_db == journal or (in_pool and runtime_db.name.startswith("journal-")):
        raise ConfigError(
            f"--journal and --runtime-db name the same file ({runtime_db}); give the embedded "
            "runtime's database its own path"
        )


@asynccontextmanager
async def _launch(
    config: ServeConfig, env: Mapping[str, str]
) -> AsyncIterator[tuple[LaunchContext, Credentials]]:
    if not config.embedded:
        launch = load_launch_context(env, api_url=config.api_url)
        await probe_api(launch.api_url, env)
        yield launch, Credentials(launch.token_source)
        return
    from ._embedded import open_embedded

    async with open_embedded(runtime_db_path(config)) as launch:
        yield launch, Credentials(launch.token_source)


async def probe_api(api_url: str, env: Mapping[str, str]) -> None:
    """Fail at start, in one line saying why, when no connection to the API can be made
    (through the proxy the environment chooses, TLS handshake included)."""
    hint = "check AGENTTEAM_API_URL or --api-url, or use --embedded for the local reference runtime"
    try:
        upstream = UpstreamClient(api_url, env=env)
    except NetworkConfigError as exc:
        raise ConfigError(str(exc)) from None
    try:
        with trio.fail_after(_PROBE_SECONDS):
            await upstream.probe()
    except (TransportFailure, trio.TooSlowError) as exc:
        await upstream.aclose()
        reason = exc.reason if isinstance(exc, TransportFailure) else None
        raise ConfigError(
            f"cannot reach the Agent Runtime API at {redact_url(api_url)} "
            f"({reason or 'timed out'}); {hint}"
        ) from None
    if upstream.proxy is not None:
        log.info("upstream requests go through the proxy %s", upstream.proxy)
    await upstream.aclose()


def _cursors(signing_key: Path) -> Cursors:
    """The installation's cursor signer, its key kept beside the journal signing key."""
    try:
        return Cursors(load_cursor_key(signing_key.parent))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read or create the cursor key in {signing_key.parent} ({exc.strerror or exc})"
        ) from None


async def serve(
    config: ServeConfig,
    env: Mapping[str, str] | None = None,
    early_signals: Sequence[str] = (),
) -> None:
    """Run one stdio MCP session until stdin closes or SIGINT, SIGTERM or SIGHUP arrives.

    `early_signals`: the stop signals received before this ran (`note_early_signals`).
    """
    shutdown = Shutdown()
    # Set once started: traces and metrics, flushed after the journal closed.
    telemetry: list[_telemetry.Tracing | _metrics.Metrics] = []
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        if early_signals:
            shutdown.request(early_signals[0])
        try:
            await _serve(config, os.environ if env is None else env, shutdown, signals, telemetry)
        finally:
            if telemetry:
                await _shutdown_telemetry(telemetry, shutdown.deadline)


async def _serve(
    config: ServeConfig,
    env: Mapping[str, str],
    shutdown: Shutdown,
    signals: AsyncIterator[int],
    telemetry: list[_telemetry.Tracing | _metrics.Metrics],
) -> None:
    session = Session(session_id="s" + secrets.token_hex(6), unanswered=Unanswered())
    check_paths(config)
    refused = _telemetry.check(env) or _metrics.check(env)
    if refused is not None:
        raise ConfigError(refused)
    lost: str | None = None
    async with AsyncExitStack() as stack:
        journal = await stack.enter_async_context(
            open_journal(
                config.journal_path,
                durable=config.durable,
                max_bytes=config.journal_max_bytes,
                segment_bytes=config.journal_segment_bytes,
                segment_age=config.journal_segment_age,
            )
        )
        launch, credentials = await stack.enter_async_context(_launch(config, env))
        cursors = await trio.to_thread.run_sync(_cursors, journal.key_path or default_key_path())
        if journal.created_key and journal.key_path:  # once started: a failed start is one line
            announce_key(journal.key_path, journal.created_key)
        # Where this session's events go: clients keep a server's stderr in their MCP log.
        start_log.info("session %s journals to %s", session.session_id, journal.path)
        credentials.on_token = journal.add_secret
        upstream = UpstreamClient(
            launch.api_url,
            timeout_seconds=config.upstream_timeout_seconds,
            keepalive_seconds=config.upstream_keepalive_seconds,
            env={} if config.embedded else env,  # the in-process runtime is never proxied
        )
        stack.push_async_callback(upstream.aclose)
        tracing = _telemetry.start(env, launch.api_url, __version__)
        if tracing is not None:
            telemetry.append(tracing)
        metrics = _metrics.start(env, __version__, journal.health)
        if metrics is not None:
            telemetry.append(metrics)
        bridge = Bridge(
            launch,
            credentials,
            upstream,
            journal,
            session,
            config.compat,
            tracing,
            cursors,
            metrics,
        )
        LOG_SCREEN.screen = bridge.screen  # every later log line on stderr passes it
        if upstream.proxy is not None:  # a proxy password is a known secret too
            for secret in upstream.proxy.secrets:
                journal.add_secret(secret)
                bridge.screen.add(secret)
        session_log = _SessionLog(journal, session, launch, config.compat)
        await session_log.start()
        # The direct path is off with tracing: the SDK's middleware makes the spans.
        door = Door(
            bridge.answer,
            shutdown=shutdown,
            unanswered=session.unanswered,
            direct=bridge.tracing is None,
            on_handshake=session_log.handshake,
        )
        server = build_server(bridge, door)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(shutdown.watch, signals)
            if config.retain_payloads_days is not None:
                nursery.start_soon(
                    retain_payloads,
                    Path(config.journal_path),
                    lambda: journal.path,
                    config.retain_payloads_days,
                    journal.key_path,
                )
            async with trio_stdio(door) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
            nursery.cancel_scope.cancel()
        shutdown.request(STDIN_CLOSED)  # the SDK ended the session on its own (a no-op otherwise)
        with trio.CancelScope(shield=True):
            try:
                await _journal_undelivered(journal, session)
                await journal.append(
                    Event(
                        session_id=session.session_id,
                        payload=SessionEnded(
                            reason=shutdown.reason or STDIN_CLOSED, calls=session.calls
                        ),
                    ),
                    durable=True,
                )
            except JournalFailed as exc:
                lost = (
                    f"the journal {journal.path} failed during the session ({exc}); the session "
                    "ended without its end journaled. Run `agentteam-replay verify "
                    f"{journal.path}` to see what it holds"
                )
    # Raised outside the stack, whose nurseries (the embedded runtime's) would wrap it in a group.
    if lost is not None:
        raise JournalFailed(lost, stage="session_end")


async def _journal_undelivered(journal: JournalPort, session: Session) -> None:
    """An `answer_undelivered` event for each call whose journaled outcome never reached the
    client (a session event: the call's own story ends at its outcome)."""
    unanswered = session.unanswered
    if unanswered is None or not unanswered.calls:
        return
    log.warning(
        "%d journaled answers did not reach the client (%s)",
        len(unanswered.calls),
        unanswered.reason,
    )
    for rid, (call_id, outcome) in unanswered.calls.items():
        await journal.append(
            Event(
                session_id=session.session_id,
                mcp_method_name="tools/call",
                jsonrpc_request_id=rid,
                payload=AnswerUndelivered(
                    call_id=call_id, outcome=outcome, reason=unanswered.reason
                ),
            )
        )


async def _shutdown_telemetry(
    parts: Sequence[_telemetry.Tracing | _metrics.Metrics], deadline: float
) -> None:
    """Export what is batched (spans) and what was measured (metrics, the journal's last counts
    among them) before the process ends, each at once and all until the session's deadline (the
    exporters block: off the loop, abandoned at the deadline; the journal is closed by then)."""
    with trio.CancelScope(shield=True), trio.move_on_at(deadline):
        async with trio.open_nursery() as nursery:
            for part in parts:
                nursery.start_soon(
                    partial(trio.to_thread.run_sync, abandon_on_cancel=True), part.shutdown
                )
