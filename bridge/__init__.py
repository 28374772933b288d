"""The trio stdio MCP server exposing the seven canonical Task tools.

This module is the bridge's public face: what ``replay``, the ``agentteam-bridge`` command line
(:mod:`agentteam_task_bridge.cli`) and the repository's tools use, and ``bridge.testing`` the
shared fakes; everything else is private (``bridge._x`` modules, which only the bridge itself and
its tests import; a test pins this set). Names (``testing`` too) resolve on first use (PEP
562): importing the call path costs 1-3 s of imports (the MCP SDK, pydantic, httpx), which
``agentteam-bridge --help`` and ``agentteam-replay verify`` should not pay.

Driving one call without a client (what ``agentteam-replay rerun`` does)::

    upstream = bridge.UpstreamClient(api_url)  # or transport=testing.ScriptedTransport(...)
    launch = bridge.load_launch_context(os.environ)      # bridge.ConfigError says what to set
    b = bridge.Bridge(launch, bridge.Credentials(launch.token_source), upstream, journal_adapter,
                      bridge.Session(session_id=..., client_name=..., client_version=...))
    result = await b.call("task_list", {"channel": "general"}, meta={}, request_id=1)

The registry (``TOOLS``, ``REGISTRY``, ``describe``) is data; the error codes and the
retryability table are in ``CODES`` (keyed by the ``ErrorCode`` literal type) and ``RETRY_TABLE``
(a ``RetryCell`` per failure and operation kind).

Errors (see :mod:`bridge._exceptions`)::

    BridgeError
     ├── ConfigError          the launch configuration is incomplete or wrong
     ├── CredentialError      the configured token source gave no token
     ├── JournalFailed        the journal failed (``stage``: open, write, session_end)
     └── ToolError            a classified failure, answered to the model
    (and, inside the bridge, its network and transport failures)

The public face is the ``TYPE_CHECKING`` imports below, each name once; they resolve on first use.
"""

# The TYPE_CHECKING imports are the public face, listed once: re-exported by being imported.
# mypy: implicit-reexport
# ruff: noqa: F401

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ._budget import keeps_identities
    from ._call import Bridge, Session
    from ._cli import (
        CommandParser,
        add_completion_command,
        add_serve_command,
        configure_logging,
        number_type,
        port_number,
        positive_integer,
        positive_number,
        retention_days,
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
        redact_url,
    )
    from ._cursor import PageState
    from ._doctor import doctor
    from ._door import trio_stdio
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
    from ._exceptions import BridgeError, JournalFailed
    from ._paths import default_journal_dir, default_runtime_db, journal_setting, legacy_journal
    from ._registry import BUDGET_BYTES, INSTRUCTIONS, REGISTRY, TOOLS, ToolSpec, describe
    from ._server import ServeConfig, serve
    from ._upstream import UpstreamClient


@functools.cache
def _public() -> dict[str, tuple[str, str]]:
    """Public name -> (the private module defining it, its name there), read from the imports
    above: the one list of the public face, which type checkers read too. Parsed once, at the
    first name used (about a millisecond), so importing the package stays free."""
    import ast

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = [node for node in tree.body if isinstance(node, ast.If)]
    return {
        alias.asname or alias.name: (str(node.module), alias.name)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def __getattr__(name: str) -> Any:
    if name == "testing":  # the public fakes (bridge/testing.py), a module of their own
        return importlib.import_module(f"{__name__}.testing")
    if name == "__all__":
        return sorted([*_public(), "__version__"])
    where = _public().get(name)
    if where is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")
    module, attribute = where
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted([*_public(), "__version__"])
