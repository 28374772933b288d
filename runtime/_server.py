"""Running the reference runtime: in a nursery for tests and the bridge, or alone from the CLI."""

from __future__ import annotations

import os
import secrets
import shlex
import sys
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from ._app import App, too_large
from ._faults import Faults
from ._http import serve_connection
from ._seed import AGENT_ID, WORKSPACE_ID, seed_local
from ._store import Store


@dataclass(frozen=True)
class RuntimeConfig:
    db_path: str = ":memory:"
    host: str = "127.0.0.1"
    port: int = 0
    token_ttl_seconds: float = 900.0
    admin_token: str | None = field(default_factory=lambda: "adm_" + secrets.token_urlsafe(24))
    seed: bool = True


@dataclass
class Runtime:
    """A running reference runtime: where it listens and the handles tests need."""

    url: str
    store: Store
    faults: Faults
    admin_token: str | None
    db_path: str
    traceparents: deque[str | None] = field(default_factory=deque)
    workspace_id: str = WORKSPACE_ID
    agent_id: str = AGENT_ID

    def mint_token(
        self,
        agent_id: str | None = None,
        ttl_seconds: float | None = None,
        workspace_id: str | None = None,
    ) -> str:
        token, _ = self.store.mint_token(
            workspace_id or self.workspace_id, agent_id or self.agent_id, ttl_seconds
        )
        return token

    def token_command(self, agent_id: str | None = None, ttl_seconds: float | None = None) -> str:
        """A shell command printing a fresh token, as `AGENTTEAM_TOKEN_COMMAND` expects."""
        ttl = self.store.token_ttl_seconds if ttl_seconds is None else ttl_seconds
        return mint_command(self.db_path, self.workspace_id, agent_id or self.agent_id, ttl)

    def bridge_env(self) -> dict[str, str]:
        env = {
            "AGENTTEAM_API_URL": self.url,
            "AGENTTEAM_WORKSPACE_ID": self.workspace_id,
            "AGENTTEAM_AGENT_ID": self.agent_id,
        }
        if self.db_path != ":memory:":
            env["AGENTTEAM_TOKEN_COMMAND"] = self.token_command()
        return env


@asynccontextmanager
async def open_runtime(config: RuntimeConfig | None = None) -> AsyncIterator[Runtime]:
    """Serve a runtime on loopback for the duration of the block."""
    config = config or RuntimeConfig()
    if config.db_path != ":memory:":
        Path(config.db_path).parent.mkdir(parents=True, exist_ok=True)
    store = Store.open(config.db_path, token_ttl_seconds=config.token_ttl_seconds)
    try:
        if config.seed:
            seed_local(store)
        faults = Faults()
        app = App(store, faults, config.admin_token)
        handler = partial(serve_connection, handler=app.handle, too_large=too_large)
        # Bind before the nursery so a busy port is a plain OSError for the caller.
        listeners = await trio.open_tcp_listeners(config.port, host=config.host)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handler, listeners)
            host, port = listeners[0].socket.getsockname()[:2]
            yield Runtime(
                f"http://{host}:{port}",
                store,
                faults,
                config.admin_token,
                config.db_path,
                app.traceparents,
            )
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def mint_command(
    db_path: str, workspace_id: str, agent_id: str, ttl_seconds: float | None = None
) -> str:
    parts = [
        sys.executable,
        "-m",
        "agentteam_task_bridge.runtime",
        "mint-token",
        "--db",
        os.path.abspath(db_path),
        "--workspace",
        workspace_id,
        "--agent",
        agent_id,
    ]
    if ttl_seconds is not None:
        parts += ["--ttl", str(ttl_seconds)]
    return shlex.join(parts)


async def serve_forever(config: RuntimeConfig, announce: bool = True) -> None:
    async with open_runtime(config) as runtime:
        if announce:
            for key, value in runtime.bridge_env().items():
                print(f"export {key}={shlex.quote(value)}", flush=True)
            print(
                f"# admin token (tests and seeding only): {runtime.admin_token}",
                file=sys.stderr,
                flush=True,
            )
            print(
                f"# reference runtime listening on {runtime.url}; Ctrl-C to stop",
                file=sys.stderr,
                flush=True,
            )
        await trio.sleep_forever()
