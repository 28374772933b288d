"""``key``: the public half of this machine's checkpoint signing key, to hand to auditors."""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentteam_task_bridge import journal

from ._source import ReplayInputError

__all__ = ["KeyInfo", "signing_key"]


class KeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A signing key's public facts (never its private half)."""

    path: str
    name: str
    vkey: str
    fingerprint: str


def signing_key(path: Path | None = None, *, create: bool = False) -> KeyInfo:
    """The verifier key and fingerprint of the signing key at ``path`` (default: the bridge's).

    With ``create``, a missing key is created (0600) as the bridge would at its first start.
    Raises ReplayInputError when there is no key (and ``create`` is false) or it is not one.
    """
    path = path or journal.default_key_path()
    try:
        key = journal.load_key(path, create=create)
    except FileNotFoundError:
        raise ReplayInputError(
            f"no signing key at {path} (the bridge creates it at its first start; "
            "`agentteam-replay key --create` creates it now)"
        ) from None
    except ValueError as exc:
        raise ReplayInputError(f"{path} is not a signing key: {exc}") from None
    verifier = key.verifier
    return KeyInfo(
        path=str(path),
        name=verifier.name,
        vkey=verifier.to_text(),
        fingerprint=verifier.fingerprint,
    )
