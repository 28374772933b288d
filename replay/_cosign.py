"""Witness cosignatures: C2SP ``tlog-cosignature`` (``cosignature/v1``, Ed25519) and their keys.

A cosignature is a witness's note signature over a journal checkpoint (``journal._checkpoint``:
the body ``agentteam-journal/<journal_id>\\n<size>\\n<base64 root>\\n``), saying "as of this
time, the largest tree I have seen of this journal, consistent with every earlier one, has
this root". Fixed by the spec (https://c2sp.org/tlog-cosignature):

* the signed message is ``cosignature/v1\\n`` ``time <POSIX seconds, decimal>\\n`` and the
  checkpoint's whole body (its final newline included, no signature line);
* the signature line is ``— <witness name> base64(key ID || u64 big-endian timestamp ||
  64-byte Ed25519 signature)``;
* the key ID is ``SHA-256(name || 0x0A || 0x04 || 32-byte public key)[:4]``; the verifier key
  (a C2SP vkey) ``<name>+<hex key ID>+<base64(0x04 || public key)>``.

The witness's key file holds ``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x04 || 32-byte seed)>``
and, on a second line, its verifier key; it is written 0600 in a 0700 directory and read only by
the witness process (``agentteam-replay witness``): it is never sent to the store.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import socket
import struct
import sys
from pathlib import Path
from typing import ClassVar, Final

import msgspec

from agentteam_task_bridge.journal import VerifierKey, note_key_text, origin_line

__all__ = [
    "COSIGNATURE_HEADER",
    "Cosignature",
    "CosignerKey",
    "WitnessKey",
    "checkpoint_body",
    "cosigned_message",
    "load_witness_key",
]

COSIGNATURE_HEADER: Final = "cosignature/v1"
ED25519_COSIGNATURE: Final = b"\x04"  # the signature type of an Ed25519 cosigner's key ID
_PRIVATE_PREFIX: Final = "PRIVATE+KEY+"
_MAX_TIME: Final = 2**63 - 1


def checkpoint_body(journal_id: str, size: int, root: bytes) -> str:
    """The checkpoint note body a cosignature covers (the journal's own checkpoint's text)."""
    return f"{origin_line(journal_id)}\n{size}\n{base64.b64encode(root).decode()}\n"


def cosigned_message(body: str, timestamp: int) -> bytes:
    """The bytes an Ed25519 ``cosignature/v1`` signs: header line, time line, note body."""
    if not 0 <= timestamp <= _MAX_TIME:
        raise ValueError("a cosignature's timestamp is 0..2**63-1 seconds")
    return f"{COSIGNATURE_HEADER}\ntime {timestamp}\n{body}".encode()


class CosignerKey(VerifierKey):
    """A witness's public key (type 0x04 vkey): checks its cosignatures, cannot make them.

    The note format's verifier key (``journal.VerifierKey``) with the cosigner's type byte: its
    text is ``<name>+<hex key ID>+<base64(0x04||key)>`` and its key ID hashes that byte.
    """

    __slots__ = ()
    KEY_TYPE: ClassVar[bytes] = ED25519_COSIGNATURE
    WHAT: ClassVar[str] = "witness key"


class Cosignature(msgspec.Struct, frozen=True, kw_only=True):
    """One cosignature of a journal's checkpoint: ``signature`` is the note signature's base64
    (key ID, timestamp, Ed25519 signature), ``key_id`` ``<name>+<hex key ID>``."""

    journal_id: str
    tree_size: int
    root_hash: str  # hex
    key_id: str
    timestamp: int
    signature: str

    def body(self) -> str:
        return checkpoint_body(self.journal_id, self.tree_size, bytes.fromhex(self.root_hash))

    def line(self) -> str:
        """The signature line, as appended to the checkpoint note."""
        return f"— {self.key_id.rpartition('+')[0]} {self.signature}"

    def check(self, key: CosignerKey) -> bool:
        """Whether ``key`` made this cosignature over this checkpoint at this time."""
        if self.key_id != key.key_id:
            return False
        try:
            raw = base64.b64decode(self.signature, validate=True)
            message = cosigned_message(self.body(), self.timestamp)
        except (binascii.Error, ValueError):
            return False
        if len(raw) != 4 + 8 + 64 or raw[:4] != key.key_hash:
            return False
        (stamped,) = struct.unpack(">Q", raw[4:12])
        return stamped == self.timestamp and key.verify(message, raw[12:])


class WitnessKey:
    """A witness's private key: cosigns. Its file never leaves the witness's machine."""

    __slots__ = ("_seed", "verifier")

    def __init__(self, name: str, seed: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        if len(seed) != 32:
            raise ValueError("an Ed25519 private key is a 32-byte seed")
        self._seed = seed
        public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
        self.verifier = CosignerKey(name, public.public_bytes(Encoding.Raw, PublicFormat.Raw))

    @classmethod
    def generate(cls, name: str) -> WitnessKey:
        return cls(name, secrets.token_bytes(32))

    @property
    def key_id(self) -> str:
        return self.verifier.key_id

    def cosign(self, journal_id: str, size: int, root: bytes, timestamp: int) -> Cosignature:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        message = cosigned_message(checkpoint_body(journal_id, size, root), timestamp)
        signature = Ed25519PrivateKey.from_private_bytes(self._seed).sign(message)
        raw = self.verifier.key_hash + struct.pack(">Q", timestamp) + signature
        return Cosignature(
            journal_id=journal_id,
            tree_size=size,
            root_hash=root.hex(),
            key_id=self.key_id,
            timestamp=timestamp,
            signature=base64.b64encode(raw).decode(),
        )

    def to_file_text(self) -> str:
        seed = base64.b64encode(ED25519_COSIGNATURE + self._seed).decode()
        return f"{_PRIVATE_PREFIX}{self.key_id}+{seed}\n{self.verifier.to_text()}\n"

    @classmethod
    def parse(cls, text: str) -> WitnessKey:
        first = text.strip().partition("\n")[0]
        if not first.startswith(_PRIVATE_PREFIX):
            raise ValueError("not a witness key file (PRIVATE+KEY+<name>+<hex ID>+<base64>)")
        name, hash_hex, seed = note_key_text(
            first[len(_PRIVATE_PREFIX) :],
            "witness signing key",
            _PRIVATE_PREFIX,
            ED25519_COSIGNATURE,
        )
        key = cls(name, seed)
        if key.verifier.key_hash.hex() != hash_hex:
            raise ValueError("the witness key's ID does not match its name and key")
        return key

    def __repr__(self) -> str:  # never the private half
        return f"WitnessKey({self.key_id!r})"


def default_witness_name() -> str:
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"
    return f"{host}/agentteam-witness-{secrets.token_hex(4)}"


def load_witness_key(path: Path, *, name: str | None = None) -> WitnessKey:
    """The witness key at ``path``, created (0600, directory 0700) if absent, named ``name``;
    its creation is said in one line on stderr with the verifier key. ValueError: not a key,
    or a ``name`` other than the key's; PermissionError: the file is readable by others."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return _create(path, name)
    if stat.st_mode & 0o077:
        raise PermissionError(f"{path} is readable by others: chmod 600 it (a witness key)")
    key = WitnessKey.parse(path.read_text())
    if name is not None and name != key.verifier.name:
        raise ValueError(f"{path} holds the key of witness {key.verifier.name}, not {name}")
    return key


def _create(path: Path, name: str | None) -> WitnessKey:
    from agentteam_task_bridge.journal import make_private_dir

    key = WitnessKey.generate(name or default_witness_name())
    make_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return load_witness_key(path, name=name)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(key.to_file_text())
        file.flush()
        os.fsync(file.fileno())
    print(
        f"agentteam-replay witness: created the witness key {path}; witness key"
        f" {key.verifier.to_text()}",
        file=sys.stderr,
    )
    return key
