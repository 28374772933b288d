"""Hidden context: what the launching runtime configures, and where each piece came from.

Workspace, agent and the credential come from the environment at start; the workflow run and
callback effect come per request from `params._meta`. None of it is ever model input (contract
sections 5.4 and 13.1), and the token never leaves this module except in an Authorization header.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import trio

from ._exceptions import BridgeError

_TOKEN_COMMAND_TIMEOUT_SECONDS = 15.0
_REDACTED: Final = "REDACTED"


def redact_url(url: str, *, keep_user: bool = False, keep_query: Collection[str] = ()) -> str:
    """The URL safe to print or journal: the password, the query values and the fragment
    replaced by REDACTED; the user name too, unless ``keep_user``; a query value only where its
    name is in ``keep_query``. The one rule for every URL the package prints (an API base URL;
    a fleet store's, which keeps its role and connection keys: replay._fleet_store).

    Every query value is redacted by default, not only the well-known names (`access_token`,
    `key`, `sig` ...): an API base URL needs none, and a credential under an unusual name must
    not leak; an API URL's user part is a credential too (``https://token@host``).
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        user = parts.username if keep_user and parts.username else _REDACTED
        password = f":{_REDACTED}" if user != _REDACTED and parts.password is not None else ""
        netloc = f"{user}{password}@{netloc}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        kept = [(name, value if name in keep_query else _REDACTED) for name, value in pairs]
        query = urlencode(kept, safe="/") or _REDACTED
    fragment = _REDACTED if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


class ConfigError(BridgeError):
    """The launch environment is incomplete; the message says what to set."""


class TokenSource(Protocol):
    """Where the agent's bearer token comes from; `kind` is journaled, the token never is."""

    kind: str

    async def fetch(self) -> str: ...

    @property
    def refreshable(self) -> bool: ...


class CredentialError(BridgeError):
    """The configured token source gave no token; the message says which and why."""


@dataclass
class StaticToken:
    token: str
    kind: str = "env:AGENTTEAM_TOKEN"

    async def fetch(self) -> str:
        return self.token

    @property
    def refreshable(self) -> bool:
        return False


@dataclass
class FileToken:
    path: Path
    kind: str = "file:AGENTTEAM_TOKEN_FILE"

    async def fetch(self) -> str:
        try:
            token = (await trio.Path(self.path).read_text()).strip()
        except OSError as exc:
            raise CredentialError(f"cannot read the token file: {exc.strerror}") from None
        if not token:
            raise CredentialError("the token file is empty")
        return token

    @property
    def refreshable(self) -> bool:
        return True


@dataclass
class CommandToken:
    command: str
    kind: str = "command:AGENTTEAM_TOKEN_COMMAND"

    async def fetch(self) -> str:
        try:
            with trio.fail_after(_TOKEN_COMMAND_TIMEOUT_SECONDS):
                done = await trio.run_process(
                    shlex.split(self.command), capture_stdout=True, capture_stderr=True, check=False
                )
        except (OSError, trio.TooSlowError, ValueError) as exc:
            raise CredentialError(
                f"the token command could not run: {type(exc).__name__}"
            ) from None
        token = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not token:
            raise CredentialError(f"the token command exited {done.returncode} with no token")
        return token.splitlines()[0]

    @property
    def refreshable(self) -> bool:
        return True


class Credentials:
    """The current token, refreshed at most once at a time however many calls saw a 401."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self._token: str | None = None
        self._lock = trio.Lock()
        # Told every token fetched, so that the journal can redact it by value.
        self.on_token: Callable[[str], None] | None = None

    async def _fetch(self) -> str:
        token = await self.source.fetch()
        if self.on_token is not None:
            self.on_token(token)
        return token

    async def current(self) -> str:
        if self._token is None:
            async with self._lock:
                if self._token is None:
                    self._token = await self._fetch()
        return self._token

    async def refresh(self, stale: str) -> str | None:
        """A fresh token after `stale` was refused, or None when the source cannot refresh."""
        if not self.source.refreshable:
            return None
        async with self._lock:
            if self._token is not None and self._token != stale:
                return self._token  # another call already refreshed
            self._token = await self._fetch()
            return self._token


@dataclass(frozen=True)
class LaunchContext:
    api_url: str
    workspace_id: str
    agent_id: str
    token_source: TokenSource
    sources: Mapping[str, str]


def load_launch_context(env: Mapping[str, str], *, api_url: str | None = None) -> LaunchContext:
    """Read the launch environment; raise ConfigError naming the first missing piece and the fix."""
    url = api_url or env.get("AGENTTEAM_API_URL", "")
    sources = {"api_url": "flag:--api-url" if api_url else "env:AGENTTEAM_API_URL"}
    if not url:
        raise ConfigError(
            "no Agent Runtime API: set AGENTTEAM_API_URL, pass --api-url URL, "
            "or use --embedded for the local reference runtime"
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            "the Agent Runtime API URL must start with http:// or https://; set "
            "AGENTTEAM_API_URL or --api-url to one"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise ConfigError(
            f"the Agent Runtime API URL {redact_url(url)} is not a valid URL (host or port); "
            "fix AGENTTEAM_API_URL or --api-url"
        ) from None
    if not parts.hostname:
        raise ConfigError(
            f"the Agent Runtime API URL {redact_url(url)} names no host; fix AGENTTEAM_API_URL "
            "or --api-url"
        )
    missing = [k for k in ("AGENTTEAM_WORKSPACE_ID", "AGENTTEAM_AGENT_ID") if not env.get(k)]
    if missing:
        raise ConfigError(
            f"set {' and '.join(missing)} (the workspace and agent the bridge acts for)"
        )
    source: TokenSource
    if env.get("AGENTTEAM_TOKEN_COMMAND"):
        source = CommandToken(env["AGENTTEAM_TOKEN_COMMAND"])
    elif env.get("AGENTTEAM_TOKEN_FILE"):
        source = FileToken(Path(env["AGENTTEAM_TOKEN_FILE"]).expanduser())
    elif env.get("AGENTTEAM_TOKEN"):
        source = StaticToken(env["AGENTTEAM_TOKEN"])
    else:
        raise ConfigError(
            "no credential: set AGENTTEAM_TOKEN_COMMAND (a command printing a "
            "fresh token), AGENTTEAM_TOKEN_FILE or AGENTTEAM_TOKEN"
        )
    sources.update(
        {
            "workspace_id": "env:AGENTTEAM_WORKSPACE_ID",
            "agent_id": "env:AGENTTEAM_AGENT_ID",
            "bearer_token": source.kind,
        }
    )
    return LaunchContext(
        url.rstrip("/"), env["AGENTTEAM_WORKSPACE_ID"], env["AGENTTEAM_AGENT_ID"], source, sources
    )


def launch_env() -> Mapping[str, str]:
    return os.environ
