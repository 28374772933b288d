"""`agentteam-bridge install CLIENT`: register this installation's bridge with an MCP client.

Each client keeps its MCP servers in a file of its own (Claude Code runs ``claude mcp add`` when
its command is on PATH). The entry launches ``serve`` through the absolute path of *this*
installation, ``--embedded`` by default, or, with ``--from-env``, against the real server named
by this shell's ``AGENTTEAM_*`` variables (the token's command or file, never a literal token:
a config file is not where a secret should rest).

Merging is conservative: everything else in the file stays as it was (keys, order, other
servers); the same entry again is a no-op; a *different* server under the same name is refused
unless ``--force``. ``--dry-run`` prints the change as a diff (or the command) and writes nothing.
A file is replaced atomically, keeps its mode, and a new one is created 0600 in folders made 0700.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentteam_task_bridge import journal

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex")
# What --from-env copies; AGENTTEAM_TOKEN is refused (see the module docstring).
FROM_ENV = (
    "AGENTTEAM_API_URL",
    "AGENTTEAM_WORKSPACE_ID",
    "AGENTTEAM_AGENT_ID",
    "AGENTTEAM_TOKEN_COMMAND",
    "AGENTTEAM_TOKEN_FILE",
    "AGENTTEAM_JOURNAL",
)


class InstallError(Exception):
    """The registration cannot be made as asked; the message says what to change."""


@dataclass(frozen=True)
class Server:
    """The entry to register: how a client launches this installation's bridge."""

    command: str
    args: list[str]
    env: dict[str, str]


def server_entry(embedded: bool, compat: str, environ: dict[str, str]) -> Server:
    script = Path(sys.executable).parent / "agentteam-bridge"
    if script.is_file():
        command, args = str(script.absolute()), ["serve"]
    else:  # run from a checkout without the console script: the module of this interpreter
        command, args = sys.executable, ["-m", "agentteam_task_bridge.cli", "serve"]
    if compat != "hint":
        args += ["--compat", compat]
    if embedded:
        return Server(command, [*args, "--embedded"], {})
    if environ.get("AGENTTEAM_TOKEN"):
        raise InstallError(
            "AGENTTEAM_TOKEN is set: a client's config file is no place for a token; set "
            "AGENTTEAM_TOKEN_COMMAND or AGENTTEAM_TOKEN_FILE instead"
        )
    env = {name: environ[name] for name in FROM_ENV if environ.get(name)}
    missing = [n for n in FROM_ENV[:3] if n not in env]
    if missing or not {"AGENTTEAM_TOKEN_COMMAND", "AGENTTEAM_TOKEN_FILE"} & set(env):
        wanted = ", ".join(missing) or "AGENTTEAM_TOKEN_COMMAND or AGENTTEAM_TOKEN_FILE"
        raise InstallError(f"--from-env needs {wanted} in this shell's environment")
    return Server(command, args, env)


def config_path(client: str, environ: dict[str, str]) -> Path:
    """Where ``client`` keeps its servers for this user (Linux and macOS)."""
    home = Path(environ.get("HOME") or Path.home())
    mac = sys.platform == "darwin"
    support = home / "Library" / "Application Support"
    xdg = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    if client == "claude-desktop":
        return (support if mac else xdg) / "Claude" / "claude_desktop_config.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "vscode":
        return (support if mac else xdg) / "Code" / "User" / "mcp.json"
    if client == "codex":
        return Path(environ.get("CODEX_HOME") or home / ".codex") / "config.toml"
    return home / ".claude.json"  # claude-code's user scope, where `claude mcp add -s user` writes


def _json_entry(client: str, server: Server) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": server.command, "args": server.args}
    if server.env:
        entry["env"] = server.env
    if client in ("vscode", "claude-code"):
        entry = {"type": "stdio", **entry}
    return entry


def _merged_json(client: str, text: str, name: str, server: Server, force: bool) -> str:
    try:
        document = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InstallError(f"it is not JSON ({exc.msg} at line {exc.lineno})") from None
    servers_key = "servers" if client == "vscode" else "mcpServers"
    servers = document.setdefault(servers_key, {}) if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise InstallError(f"its {servers_key!r} is not an object")
    entry = _json_entry(client, server)
    if servers.get(name) == entry:
        return text  # the same entry: the file is left byte for byte
    if name in servers and not force:
        raise InstallError(_different(name))
    servers[name] = entry
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string: the same escapes


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml_string(name)


def _merged_toml(text: str, name: str, server: Server, force: bool) -> str:
    try:
        existing = tomllib.loads(text).get("mcp_servers", {}).get(name)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"it is not TOML ({exc})") from None
    entry: dict[str, Any] = {"command": server.command, "args": server.args}
    if server.env:
        entry["env"] = server.env
    if existing == entry:
        return text
    if existing is not None and not force:
        raise InstallError(_different(name))
    header = f"mcp_servers.{_toml_key(name)}"
    lines, kept, skipping = text.splitlines(), [], False
    for line in lines:  # drop the old [mcp_servers.NAME] and [mcp_servers.NAME.env] tables
        table = re.fullmatch(r"\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?", line)
        if table:
            skipping = table.group(1) in (header, f"{header}.env")
        if not skipping:
            kept.append(line)
    section = [
        f"[{header}]",
        f"command = {_toml_string(server.command)}",
        f"args = [{', '.join(map(_toml_string, server.args))}]",
    ]
    if server.env:
        section += ["", f"[{header}.env]"]
        section += [f"{_toml_key(k)} = {_toml_string(v)}" for k, v in server.env.items()]
    body = "\n".join(kept).rstrip("\n")
    merged = (body + "\n\n" if body else "") + "\n".join(section) + "\n"
    if tomllib.loads(merged)["mcp_servers"][name] != entry:  # what a client will read back
        raise InstallError("the merged file would not read back as written")
    return merged


def _different(name: str) -> str:
    return f"a different server named {name!r} is registered there (--force replaces it)"


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically, keeping its mode; a new file 0600 in new folders 0700."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    journal.make_private_dir(path.parent)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), mode)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _claude_command(name: str, server: Server, force: bool) -> list[list[str]]:
    claude = shutil.which("claude")
    assert claude is not None
    add = [claude, "mcp", "add", "--scope", "user", name]
    for key, value in server.env.items():
        add += ["-e", f"{key}={value}"]
    add += ["--", server.command, *server.args]
    return ([[claude, "mcp", "remove", "--scope", "user", name]] if force else []) + [add]


def install(
    client: str,
    *,
    name: str,
    embedded: bool,
    compat: str,
    dry_run: bool,
    force: bool,
    config: Path | None,
    environ: dict[str, str],
) -> str:
    """Register the bridge with ``client``; the one line (or diff) to print. Raises
    InstallError."""
    server = server_entry(embedded, compat, environ)
    if client == "claude-code" and config is None and shutil.which("claude"):
        commands = _claude_command(name, server, force)
        shown = "\n".join(shlex.join(c) for c in commands)
        if dry_run:
            return f"would run:\n{shown}"
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0 and command[2] == "add":
                raise InstallError(f"`claude mcp add` failed: {done.stderr.strip()[-300:]}")
        return f"registered {name!r} with Claude Code (user scope): {shown.splitlines()[-1]}"
    path = config or config_path(client, environ)
    try:
        before = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"cannot read {path}: {exc}") from None
    try:
        if client == "codex":
            after = _merged_toml(before, name, server, force)
        else:
            after = _merged_json(client, before, name, server, force)
    except InstallError as exc:
        raise InstallError(f"{path}: {exc}") from None
    if after == before:
        return f"{name!r} is already registered in {path}; nothing changed"
    if dry_run:
        diff = difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=str(path) if before else "/dev/null",
            tofile=str(path),
        )
        return "".join(diff).rstrip("\n")
    try:
        _write(path, after)
    except OSError as exc:
        raise InstallError(f"cannot write {path}: {exc.strerror or exc}") from None
    return f"registered {name!r} in {path}"
