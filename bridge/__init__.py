"""The trio stdio MCP server exposing the seven canonical Task tools.

This module is the bridge's public face: what ``replay``, the ``agentteam-bridge`` command line
(:mod:`agentteam_task_bridge.cli`) and the repository's tools use, and ``bridge.testing`` the
shared fakes; everything else is private (``bridge._x`` modules, which only the bridge itself and
its tests import; a test pins this set). Names (``testing`` too) resolve on first use (PEP
562): importing the call path costs 1-3 s of imports (the MCP SDK, pydantic, httpx), which
``agentteam-bridge --help`` and ``agentteam-replay verify`` should not pay.

Driving one call without a client (what ``agentteam-replay rerun`` does)::

    upstream = bridge.UpstreamClient(api_url)            # or transport=httpx.MockTransport(...)
    launch = bridge.load_launch_context(os.environ)      # bridge.ConfigError says what to set
    b = bridge.Bridge(launch, bridge.Credentials(launch.token_source), upstream, journal_adapter,
                      bridge.Session(session_id=..., client_name=..., client_version=...))
    result = await b.call("task_list", {"channel": "general"}, meta={}, request_id=1)

The registry (``TOOLS``, ``REGISTRY``, ``describe``) is data; the error codes and the
retryability table are in ``CODES`` (keyed by the ``ErrorCode`` literal type) and ``RETRY_TABLE``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._budget import keeps_identities
    from ._call import Bridge, JournalFailed, Session
    from ._cli import (
        CommandParser,
        add_completion_command,
        add_serve_command,
        configure_logging,
        port_number,
        positive_integer,
        positive_number,
    )
    from ._compat import (
        ARGUMENT_ALIASES,
        POLICIES,
        REMOVAL_GATE,
        TOOL_MIGRATIONS,
        ArgumentAlias,
        ToolMigration,
    )
    from ._compat import Policy as CompatPolicy
    from ._context import (
        ConfigError,
        CredentialError,
        Credentials,
        LaunchContext,
        TokenSource,
        load_launch_context,
    )
    from ._cursor import PageState
    from ._doctor import doctor
    from ._errors import (
        BRIDGE_CODES,
        CODES,
        FAILURE_CASES,
        FAILURES,
        OPERATION_KIND_NOTES,
        OPERATION_KINDS,
        PASS_THROUGH,
        PRODUCT_CODES,
        RETRY_TABLE,
        ErrorCode,
        Failure,
        OperationKind,
        RetryCell,
        ToolError,
    )
    from ._paths import default_journal_dir, default_runtime_db, journal_setting, legacy_journal
    from ._registry import BUDGET_BYTES, INSTRUCTIONS, REGISTRY, TOOLS, ToolSpec, describe
    from ._server import ServeConfig, SessionJournalLost, serve
    from ._stdio import trio_stdio
    from ._upstream import UpstreamClient

# public name -> the private module defining it (".name" when it is named otherwise there)
_WHERE: dict[str, str] = {
    "PageState": "_cursor",
    "keeps_identities": "_budget",
    **dict.fromkeys(["Bridge", "JournalFailed", "Session"], "_call"),
    **dict.fromkeys(
        [
            "CommandParser",
            "add_completion_command",
            "add_serve_command",
            "configure_logging",
            "port_number",
            "positive_integer",
            "positive_number",
        ],
        "_cli",
    ),
    "doctor": "_doctor",
    **dict.fromkeys(
        [
            "ARGUMENT_ALIASES",
            "POLICIES",
            "REMOVAL_GATE",
            "TOOL_MIGRATIONS",
            "ArgumentAlias",
            "ToolMigration",
        ],
        "_compat",
    ),
    "CompatPolicy": "_compat.Policy",
    **dict.fromkeys(
        [
            "ConfigError",
            "CredentialError",
            "Credentials",
            "LaunchContext",
            "TokenSource",
            "load_launch_context",
        ],
        "_context",
    ),
    **dict.fromkeys(
        [
            "BRIDGE_CODES",
            "CODES",
            "FAILURE_CASES",
            "FAILURES",
            "OPERATION_KIND_NOTES",
            "OPERATION_KINDS",
            "PASS_THROUGH",
            "PRODUCT_CODES",
            "RETRY_TABLE",
            "RetryCell",
            "ErrorCode",
            "Failure",
            "OperationKind",
            "ToolError",
        ],
        "_errors",
    ),
    **dict.fromkeys(
        ["default_journal_dir", "default_runtime_db", "journal_setting", "legacy_journal"],
        "_paths",
    ),
    **dict.fromkeys(
        ["BUDGET_BYTES", "INSTRUCTIONS", "REGISTRY", "TOOLS", "ToolSpec", "describe"], "_registry"
    ),
    **dict.fromkeys(["ServeConfig", "SessionJournalLost", "serve"], "_server"),
    **dict.fromkeys(["trio_stdio"], "_stdio"),
    **dict.fromkeys(["UpstreamClient"], "_upstream"),
}

__all__ = [
    "ARGUMENT_ALIASES",
    "BRIDGE_CODES",
    "BUDGET_BYTES",
    "CODES",
    "FAILURES",
    "FAILURE_CASES",
    "INSTRUCTIONS",
    "OPERATION_KINDS",
    "OPERATION_KIND_NOTES",
    "PASS_THROUGH",
    "POLICIES",
    "PRODUCT_CODES",
    "REGISTRY",
    "REMOVAL_GATE",
    "RETRY_TABLE",
    "TOOLS",
    "TOOL_MIGRATIONS",
    "ArgumentAlias",
    "Bridge",
    "CommandParser",
    "CompatPolicy",
    "ConfigError",
    "CredentialError",
    "Credentials",
    "ErrorCode",
    "Failure",
    "JournalFailed",
    "LaunchContext",
    "OperationKind",
    "PageState",
    "RetryCell",
    "ServeConfig",
    "Session",
    "SessionJournalLost",
    "TokenSource",
    "ToolError",
    "ToolMigration",
    "ToolSpec",
    "UpstreamClient",
    "__version__",
    "add_completion_command",
    "add_serve_command",
    "configure_logging",
    "default_journal_dir",
    "default_runtime_db",
    "describe",
    "doctor",
    "journal_setting",
    "keeps_identities",
    "legacy_journal",
    "load_launch_context",
    "port_number",
    "positive_integer",
    "positive_number",
    "serve",
    "trio_stdio",
]


def __getattr__(name: str) -> Any:
    if name == "testing":  # the public fakes (bridge/testing.py), a module of their own
        return importlib.import_module(f"{__name__}.testing")
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")
    module, _, attribute = where.partition(".")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute or name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
