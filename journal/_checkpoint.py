"""Signed checkpoints (sequence, head hash, time) and the HMAC key kept outside the database.

A checkpoint says "this journal had ``seq`` events and its head hash was ``head_hash`` at
``ts_wall``", signed with HMAC-SHA256 under a key the database file does not hold. A verifier that
holds one detects a truncated tail (fewer events than the checkpoint names) and a rewritten history
(the event at ``seq`` no longer has that hash), which the hash chain alone cannot.

The signature is the hex HMAC-SHA256 of the canonical JSON (sorted keys, compact, UTF-8) of
``{"head_hash", "journal_id", "key_id", "seq", "ts_wall"}``; ``key_id`` is the first 16 hex digits
of SHA-256 of the key, so a verifier can tell "signed with another key" from "forged".

The key file holds 32 random bytes as hex; by default
``$XDG_CONFIG_HOME/agentteam-bridge/journal.key`` (``~/.config`` when unset), created 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Final

import msgspec

__all__ = [
    "Checkpoint",
    "default_key_path",
    "export_checkpoint",
    "key_id",
    "load_checkpoint",
    "load_key",
    "sign_checkpoint",
]

KEY_BYTES: Final = 32
_sorted: Final = msgspec.json.Encoder(order="sorted")


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A signed statement of a journal's length and head hash at a moment."""

    journal_id: str
    seq: int
    head_hash: str
    ts_wall: str
    key_id: str
    signature: str

    def signed_bytes(self) -> bytes:
        """The bytes the signature covers."""
        return _sorted.encode(
            {
                "head_hash": self.head_hash,
                "journal_id": self.journal_id,
                "key_id": self.key_id,
                "seq": self.seq,
                "ts_wall": self.ts_wall,
            }
        )

    def signature_valid(self, key: bytes) -> bool:
        """Whether ``signature`` is this checkpoint's HMAC under ``key`` (constant time)."""
        expected = hmac.new(key, self.signed_bytes(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.signature)

    def to_json(self) -> str:
        """The checkpoint as a JSON object (what export_checkpoint writes)."""
        return _sorted.encode(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """Parse a checkpoint exported by :meth:`to_json` (raises msgspec.ValidationError)."""
        return msgspec.json.decode(text, type=cls)


def key_id(key: bytes) -> str:
    """A short public identifier of a key (never enough to recover it)."""
    return hashlib.sha256(key).hexdigest()[:16]


def sign_checkpoint(
    key: bytes, *, journal_id: str, seq: int, head_hash: str, ts_wall: str
) -> Checkpoint:
    """Build and sign a checkpoint."""
    unsigned = Checkpoint(
        journal_id=journal_id,
        seq=seq,
        head_hash=head_hash,
        ts_wall=ts_wall,
        key_id=key_id(key),
        signature="",
    )
    signature = hmac.new(key, unsigned.signed_bytes(), hashlib.sha256).hexdigest()
    return msgspec.structs.replace(unsigned, signature=signature)


def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/agentteam-bridge/journal.key`` (``~/.config`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agentteam-bridge" / "journal.key"


def load_key(path: Path | None = None, *, create: bool = True) -> bytes:
    """Read the HMAC key at ``path`` (default: :func:`default_key_path`), created 0600 if absent."""
    path = path or default_key_path()
    try:
        return _parse_key(path.read_text())
    except FileNotFoundError:
        if not create:
            raise
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return _parse_key(path.read_text())
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(secrets.token_hex(KEY_BYTES) + "\n")
        file.flush()
        os.fsync(file.fileno())
    return _parse_key(path.read_text())


def _parse_key(text: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError as exc:
        raise ValueError("the journal key file must hold hex digits") from exc
    if len(key) < 16:
        raise ValueError("the journal key must be at least 16 bytes")
    return key


def export_checkpoint(checkpoint: Checkpoint, path: Path) -> None:
    """Write a checkpoint to ``path`` atomically (temp file, fsync, rename), mode 0600."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(checkpoint.to_json() + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint written by :func:`export_checkpoint`."""
    return Checkpoint.from_json(path.read_bytes())
