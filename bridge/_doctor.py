"""`agentteam-bridge doctor`: what `serve` would meet at start, checked without starting it.

One :class:`Check` per concern, in the order a start meets them: the launch configuration, the
credential (a token is fetched as `serve` would, and never shown), the API through the proxy and
TLS that the environment chooses (the start-up probe itself), the journal's location (kind,
owner-only modes, free space) and the signing key (owner-only, readable as a key). Nothing is
journaled and no session starts; the embedded runtime is not started either (its database is
only checked like the journal's files). A check that cannot run because an earlier one failed
says so rather than failing twice.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentteam_task_bridge import journal

from ._context import ConfigError, CredentialError, Credentials, load_launch_context, redact_url
from ._paths import is_pool, loose_mode

# Below this a busy journal fills the disk within a day (docs/performance.md: ~1 KiB an event).
LOW_SPACE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def _journal_check(setting: str) -> Check:
    path = Path(setting).expanduser()
    folder = path if is_pool(setting) else path.parent
    kind = "pool" if is_pool(setting) else "file"
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check("journal", False, f"{path} ({kind}): {existing} is not writable by this user")
    loose = [m for m in (loose_mode(folder, directory=True),) if m]
    if path.is_file():
        loose += [m for m in (loose_mode(path, directory=False),) if m]
    elif is_pool(setting) and folder.is_dir():
        loose += [
            m for p in sorted(folder.glob("journal-*.db")) if (m := loose_mode(p, directory=False))
        ]
    free = shutil.disk_usage(existing).free
    where = f"{path} ({kind}{'' if path.exists() else ', created at first start'})"
    if loose:
        return Check("journal", False, f"{where}: not owner-only; {'; '.join(loose)}")
    if free < LOW_SPACE_BYTES:
        return Check("journal", False, f"{where}: only {free // 2**20} MiB free on its disk")
    return Check("journal", True, f"{where}, {free / 2**30:.1f} GiB free")


def _key_check(path: Path) -> Check:
    if not path.exists():
        return Check("signing key", True, f"{path} is created at the first start")
    loose = loose_mode(path, directory=False)
    if loose:
        return Check("signing key", False, f"{path} is readable by others; {loose}")
    try:
        key = journal.SigningKey.parse(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Check("signing key", False, f"{path} cannot be used: {exc}")
    return Check("signing key", True, f"{path}, fingerprint {key.verifier.fingerprint}")


async def doctor(
    env: Mapping[str, str],
    *,
    journal_setting: str,
    embedded: bool = False,
    api_url: str | None = None,
    runtime_db: Path | None = None,
) -> list[Check]:
    """Every check, in start-up order (see the module docstring)."""
    from ._server import probe_api

    checks: list[Check] = []
    if embedded:
        checks.append(Check("configuration", True, "--embedded: the reference runtime"))
        if runtime_db is not None and (loose := loose_mode(runtime_db, directory=False)):
            checks.append(Check("runtime database", False, f"not owner-only; {loose}"))
    else:
        try:
            launch = load_launch_context(env, api_url=api_url)
        except ConfigError as exc:
            checks.append(Check("configuration", False, str(exc)))
            checks.append(Check("credential", False, "not checked: the configuration failed"))
            checks.append(Check("API", False, "not checked: the configuration failed"))
        else:
            url = redact_url(launch.api_url)
            detail = f"{url}, workspace {launch.workspace_id}, agent {launch.agent_id}"
            checks.append(Check("configuration", True, detail))
            source = launch.sources.get("bearer_token", "a token source")
            try:
                token = await Credentials(launch.token_source).current()
            except CredentialError as exc:
                checks.append(Check("credential", False, f"{source}: {exc}"))
            else:
                checks.append(
                    Check(
                        "credential", True, f"{source} gave a token ({len(token)} chars, not shown)"
                    )
                )
            try:
                await probe_api(launch.api_url, env)
            except ConfigError as exc:
                checks.append(Check("API", False, str(exc)))
            else:
                checks.append(Check("API", True, f"{url} answers (proxy and TLS as at start)"))
    checks.append(_journal_check(journal_setting))
    checks.append(_key_check(journal.default_key_path()))
    return checks
