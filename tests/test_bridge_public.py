"""The bridge's public face: the exported set is pinned (as httpx's test_exported_members does),
every name resolves, and importing the package costs nothing of the call path."""

from __future__ import annotations

import subprocess
import sys

from agentteam_task_bridge import bridge

PACKAGE = bridge.__name__  # agentteam_task_bridge.bridge

EXPORTED = {
    "ARGUMENT_ALIASES",
    "BRIDGE_CODES",
    "BUDGET_BYTES",
    "CODES",
    "CommandParser",
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
    "RetryCell",
    "ArgumentAlias",
    "Bridge",
    "BridgeError",
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
    "ServeConfig",
    "Session",
    "TokenSource",
    "ToolError",
    "ToolMigration",
    "ToolSpec",
    "UpstreamClient",
    "__version__",
    "add_completion_command",
    "add_serve_command",
    "configure_logging",
    "doctor",
    "number_type",
    "port_number",
    "positive_integer",
    "positive_number",
    "retention_days",
    "default_journal_dir",
    "default_runtime_db",
    "describe",
    "journal_setting",
    "keeps_identities",
    "legacy_journal",
    "load_launch_context",
    "redact_url",
    "serve",
    "trio_stdio",
}


def test_the_exported_members_are_pinned() -> None:
    assert set(bridge.__all__) == EXPORTED
    assert sorted(dir(bridge)) == sorted(EXPORTED)


def test_every_exported_name_resolves_to_its_definition() -> None:
    for name in bridge.__all__:
        value = getattr(bridge, name)
        if isinstance(value, type) or callable(value):
            module = getattr(value, "__module__", PACKAGE)
            assert module == PACKAGE or module.startswith((f"{PACKAGE}.", "typing")), (name, module)


def test_importing_the_package_loads_none_of_the_call_path() -> None:
    code = (
        f"import sys, {PACKAGE}; print(sorted(m for m in sys.modules if m.startswith('agentteam')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == str(["agentteam_task_bridge", PACKAGE])


def test_every_exception_the_bridge_defines_has_the_one_root() -> None:
    # httpx-style: one root per package; private control-flow exceptions (`_Name`) aside.
    import importlib
    import pkgutil

    defined = []
    for info in pkgutil.iter_modules(bridge.__path__, f"{PACKAGE}."):
        module = importlib.import_module(info.name)
        defined += [
            value
            for name, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, BaseException)
            and value.__module__ == info.name
            and not name.startswith("_")
        ]
    assert len(defined) >= 7, defined  # the tree drawn in bridge/_exceptions.py
    assert [e for e in defined if not issubclass(e, bridge.BridgeError)] == []
    # "The journal failed" is one name, whatever the stage.
    assert {"JournalOpenError", "SessionJournalLost"}.isdisjoint(e.__name__ for e in defined)
    assert bridge.JournalFailed("x", stage="open").stage == "open"
