"""Signed checkpoints: C2SP signed notes over (journal, sequence, head hash), and their keys.

A checkpoint says "journal ``journal_id`` had ``seq`` events and its Merkle tree hash was
``root_hash``" (a v2 journal, :mod:`journal._tlog`), or, for a v1 journal, "... its head hash
was ``head_hash``". It is signed with Ed25519 as a `C2SP signed note`_ whose text is a
`tlog-checkpoint`_ body, so tools outside this project (``golang.org/x/mod/sumdb/note``, any
signed-note reader) can check it with the public key alone::

    agentteam-journal/<journal_id>
    <seq>
    <base64 of the 32-byte root hash: the RFC 6962 tree hash (v2), the chain head (v1)>

    — <key name> <base64(4-byte key ID || 64-byte Ed25519 signature)>

The key ID is ``SHA-256(key name || 0x0A || 0x01 || public key)[:4]`` (the spec's Ed25519 rule).
``ts_wall`` travels beside the note, unsigned (extension lines are not recommended).

Keys are in the note formats: the private key file holds
``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || 32-byte seed)>`` and, on a second line, its
verifier key (0600, directory 0700),
by default ``$XDG_CONFIG_HOME/agentteam-bridge/journal-signing.key``; the public verifier key is
``<name>+<hex key ID>+<base64(0x01 || public key)>``.

The writer names its key in the journal (``journal_meta.signing_key`` when the journal is
created; a ``key_rotated`` event, in the chain, when a later writer signs with another key), so an
auditor sees which key signed what; a verifier trusts a key only when told (:class:`Trust`).

Checkpoints from before Ed25519 are HMAC-SHA256 (hex ``signature`` over the sorted compact JSON of
``{head_hash, journal_id, key_id, seq, ts_wall}``, ``key_id`` 16 hex digits of SHA-256 of the
key, the key in ``journal.key``): :class:`HmacKey` still verifies them, and makes such fixtures.

.. _C2SP signed note: https://c2sp.org/signed-note
.. _tlog-checkpoint: https://c2sp.org/tlog-checkpoint
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import socket
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Self, TypeAlias

import msgspec

from ._files import make_private_dir, read_small

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "ORIGIN_PREFIX",
    "Checkpoint",
    "HmacKey",
    "SigningKey",
    "Trust",
    "Verdict",
    "VerifierKey",
    "announce_key",
    "checkpoint_of",
    "default_key_path",
    "export_checkpoint",
    "legacy_key_path",
    "load_checkpoint",
    "load_key",
    "load_legacy_key",
    "note_key_text",
    "sign_checkpoint",
]

ORIGIN_PREFIX: Final = "agentteam-journal/"
# What a journal id may not hold, as it stands in a checkpoint's origin line: a control
# character or a space of any kind (Python's \s). With a newline, the note's body gains lines
# (its "origin", size and root would be what the id spells, the rest extension lines, which
# tlog-checkpoint readers ignore), so a checkpoint of one journal would read as another's.
# The same class as a PostgreSQL regular expression: the store's register_journal refuses it.
ORIGIN_FORBIDDEN: Final = r"[\x01-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
_ORIGIN_BAD: Final = re.compile(ORIGIN_FORBIDDEN.replace("\\x01", "\\x00"))
# The name given to a key passed as a bare 32-byte seed (tests, tools).
SEED_KEY_NAME: Final = "agentteam-bridge/seed"
ED25519: Final = b"\x01"
_PRIVATE_PREFIX: Final = "PRIVATE+KEY+"
_NAME_OK: Final = re.compile(r"[^\s+]+")
_sorted: Final = msgspec.json.Encoder(order="sorted")
Verdict: TypeAlias = Literal["valid", "invalid", "untrusted"]


def _key_id(name: str, public: bytes, key_type: bytes = ED25519) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + key_type + public).digest()[:4]


def _check_name(name: str) -> str:
    if not _NAME_OK.fullmatch(name):
        raise ValueError(f"a key name must be non-empty, without spaces or '+': {name!r}")
    return name


class VerifierKey:
    """An Ed25519 public key with its signed-note name: checks signatures, cannot make them.

    ``KEY_TYPE`` is the note format's signature type byte its text and key ID carry (0x01, a
    note signer's); a subclass names another (a cosigner's 0x04) and ``WHAT`` it is called.
    """

    __slots__ = ("key_hash", "name", "public_bytes")
    KEY_TYPE: ClassVar[bytes] = ED25519
    WHAT: ClassVar[str] = "verifier key"

    def __init__(self, name: str, public_bytes: bytes) -> None:
        if len(public_bytes) != 32:
            raise ValueError("an Ed25519 public key is 32 bytes")
        self.name = _check_name(name)
        self.public_bytes = public_bytes
        self.key_hash = _key_id(name, public_bytes, self.KEY_TYPE)

    @property
    def key_id(self) -> str:
        """``<name>+<hex key ID>``: what a checkpoint names as its signer."""
        return f"{self.name}+{self.key_hash.hex()}"

    @property
    def fingerprint(self) -> str:
        """``SHA256:`` and the unpadded base64 SHA-256 of the public key (as OpenSSH prints)."""
        digest = base64.b64encode(hashlib.sha256(self.public_bytes).digest()).decode()
        return "SHA256:" + digest.rstrip("=")

    def to_text(self) -> str:
        """The key in the note format: ``<name>+<hex key ID>+<base64(type||key)>``."""
        return f"{self.key_id}+{base64.b64encode(self.KEY_TYPE + self.public_bytes).decode()}"

    @classmethod
    def parse(cls, text: str) -> Self:
        """Read a verifier key (raises ValueError when it is not one, or its ID does not match)."""
        name, hash_hex, public = note_key_text(text.strip(), cls.WHAT, "", cls.KEY_TYPE)
        key = cls(name, public)
        if key.key_hash.hex() != hash_hex:
            raise ValueError(f"the {cls.WHAT}'s ID does not match its name and key")
        return key

    @classmethod
    def find(cls, text: str) -> Self:
        """The one verifier key in ``text``: bare, or among other words, as in the lines that
        ``agentteam-replay key`` and a bridge's first start print (``public key:  <key>``) or a
        key file (whose second line is its verifier key). Raises ValueError when ``text`` holds
        none, or two different ones; the error is :meth:`parse`'s when a lone word was meant."""
        words = text.split()
        found = set()
        for word in words:
            if word.count("+") >= 2 and not word.startswith(_PRIVATE_PREFIX):
                try:
                    found.add(cls.parse(word.strip("();,")))
                except ValueError:
                    continue
        if len(found) == 1:
            return found.pop()
        if found:
            raise ValueError(f"it holds more than one {cls.WHAT}")
        if len(words) == 1:
            return cls.parse(words[0])
        raise ValueError(f"it holds no {cls.WHAT} (<name>+<hex key ID>+<base64 key>)")

    def verify(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public_bytes).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifierKey) and other.to_text() == self.to_text()

    def __hash__(self) -> int:
        return hash(self.to_text())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_text()!r})"


class SigningKey:
    """An Ed25519 private key with its signed-note name (what the writer signs with).

    The key file holds the signer line (Go's ``note.NewSigner`` reads it as is) and, on a second
    line, the verifier key: a writer opening a journal needs the public half only, and so
    starts without loading the Ed25519 code; the pair is checked at the first signature.
    """

    __slots__ = ("_private", "_seed", "verifier")

    def __init__(self, name: str, seed: bytes, public: bytes | None = None) -> None:
        if len(seed) != 32:
            raise ValueError("an Ed25519 private key is a 32-byte seed")
        self._seed = seed
        self._private: Ed25519PrivateKey | None = None
        self.verifier = VerifierKey(name, public if public is not None else self._derive())

    def _derive(self) -> bytes:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self._private = Ed25519PrivateKey.from_private_bytes(self._seed)
        return self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @classmethod
    def generate(cls, name: str | None = None) -> SigningKey:
        return cls(name or default_key_name(), secrets.token_bytes(32))

    @property
    def key_id(self) -> str:
        return self.verifier.key_id

    def sign(self, message: bytes) -> str:
        """The note signature: base64 of the 4-byte key ID and the Ed25519 signature."""
        if self._private is None and self._derive() != self.verifier.public_bytes:
            raise ValueError("the signing key file's public key is not its private key's")
        assert self._private is not None
        signature = self._private.sign(message)
        return base64.b64encode(self.verifier.key_hash + signature).decode()

    def to_text(self) -> str:
        """The private key in the note format (``PRIVATE+KEY+<name>+<hex ID>+<base64>``)."""
        return f"{_PRIVATE_PREFIX}{self.key_id}+{base64.b64encode(ED25519 + self._seed).decode()}"

    def to_file_text(self) -> str:
        """What the key file holds: the signer line, then the verifier key."""
        return f"{self.to_text()}\n{self.verifier.to_text()}\n"

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """Read a signer line, optionally followed by its verifier key (see the class)."""
        first, _, rest = text.strip().partition("\n")
        if not first.startswith(_PRIVATE_PREFIX):
            raise ValueError("not a signing key (PRIVATE+KEY+<name>+<hex ID>+<base64>)")
        name, hash_hex, seed = note_key_text(
            first[len(_PRIVATE_PREFIX) :], "signing key", "PRIVATE+KEY+"
        )
        public = None
        if rest.strip():
            verifier = VerifierKey.parse(rest.strip())
            if verifier.name != name:
                raise ValueError("the signing key file's two lines name different keys")
            public = verifier.public_bytes
        key = cls(name, seed, public)
        if key.verifier.key_hash.hex() != hash_hex:
            raise ValueError("the signing key's ID does not match its name and key")
        return key

    def __repr__(self) -> str:  # never the private half
        return f"SigningKey({self.key_id!r})"


def note_key_text(
    text: str, what: str, prefix: str, key_type: bytes = ED25519
) -> tuple[str, str, bytes]:
    """(name, lower-case hex key ID, the 32 key bytes) of a key in the note format,
    ``<name>+<hex key ID>+<base64(type || key)>`` (after ``prefix``, for a signing key), its type
    byte ``key_type`` (0x01 a note signer's, 0x04 a cosigner's); raises ValueError naming
    ``what`` when it is not one."""
    parts = text.split("+", 2)  # base64 may hold "+" too
    if len(parts) != 3:
        raise ValueError(f"a {what} reads {prefix}<name>+<hex key ID>+<base64 key>")
    name, hash_hex, encoded = parts
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ValueError(f"the {what}'s key part is not base64") from None
    if len(raw) != 33 or not raw.startswith(key_type):
        raise ValueError(f"not an Ed25519 {what} (type 0x{key_type.hex()}, 32 bytes)")
    return name, hash_hex.lower(), raw.removeprefix(key_type)


class HmacKey:
    """A pre-Ed25519 HMAC-SHA256 checkpoint key: verifies old checkpoints (and makes fixtures)."""

    __slots__ = ("secret",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the journal key must be at least 16 bytes")
        self.secret = secret

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.secret).hexdigest()[:16]

    def mac(self, message: bytes) -> str:
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        return f"HmacKey({self.key_id!r})"


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A signed statement of a journal's length and head hash.

    ``key_id`` names the signer: ``<name>+<hex key ID>`` for Ed25519 (``signature`` is the note's
    base64 signature), 16 hex digits for a legacy HMAC key (``signature`` is hex).
    ``root_hash``: the RFC 6962 tree hash at ``seq`` of a v2 journal (:mod:`journal._tlog`),
    which the note signs; None for a v1 checkpoint, whose note signs ``head_hash``.
    """

    journal_id: str
    seq: int
    head_hash: str
    ts_wall: str
    key_id: str
    signature: str
    root_hash: str | None = None

    @property
    def signed_root(self) -> str:
        """The hash the note's root line holds (hex): the tree hash, or a v1 chain head."""
        return self.head_hash if self.root_hash is None else self.root_hash

    @property
    def scheme(self) -> Literal["ed25519", "hmac"]:
        return "ed25519" if "+" in self.key_id else "hmac"

    @property
    def key_name(self) -> str:
        return self.key_id.rpartition("+")[0] if self.scheme == "ed25519" else self.key_id

    def note_text(self) -> str:
        """The tlog-checkpoint body the Ed25519 signature covers."""
        root = base64.b64encode(bytes.fromhex(self.signed_root)).decode()
        return f"{origin_line(self.journal_id)}\n{self.seq}\n{root}\n"

    def note(self) -> str:
        """The whole signed note (text, blank line, signature line)."""
        return f"{self.note_text()}\n— {self.key_name} {self.signature}\n"

    def legacy_signed_bytes(self) -> bytes:
        """The bytes an HMAC-era signature covers."""
        return _sorted.encode(
            {
                "head_hash": self.head_hash,
                "journal_id": self.journal_id,
                "key_id": self.key_id,
                "seq": self.seq,
                "ts_wall": self.ts_wall,
            }
        )

    def check(self, key: VerifierKey | HmacKey) -> bool:
        """Whether ``key`` made this signature (False for a key of another scheme or name)."""
        if isinstance(key, HmacKey):
            if self.scheme != "hmac":
                return False
            expected = key.mac(self.legacy_signed_bytes())
            return hmac.compare_digest(expected, self.signature)
        if self.key_id != key.key_id:
            return False
        try:
            raw = base64.b64decode(self.signature, validate=True)
            body = self.note_text().encode()
        except (binascii.Error, ValueError):
            return False
        return len(raw) == 68 and raw[:4] == key.key_hash and key.verify(body, raw[4:])

    def to_json(self) -> str:
        """The checkpoint as a JSON object, with the signed note under ``note`` when Ed25519."""
        fields = msgspec.structs.asdict(self)
        if self.root_hash is None:
            del fields["root_hash"]
        if self.scheme == "ed25519":
            fields["note"] = self.note()
        return _sorted.encode(fields).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """Parse :meth:`to_json`'s output (raises msgspec.ValidationError/DecodeError)."""
        return msgspec.json.decode(text, type=cls)

    @classmethod
    def from_note(cls, text: str) -> Checkpoint:
        """Parse a signed note of this format (its first signature line); ValueError if not."""
        body, sep, signatures = text.rpartition("\n\n")
        lines = body.split("\n")
        if not sep or len(lines) < 3 or not lines[0].startswith(ORIGIN_PREFIX):
            raise ValueError(f"not a signed journal checkpoint note (origin {ORIGIN_PREFIX}...)")
        first = signatures.split("\n")[0]
        if not first.startswith("— ") or first.count(" ") != 2:
            raise ValueError("the note has no signature line (— <name> <signature>)")
        _, name, signature = first.split(" ")
        try:
            seq = int(lines[1])
            head_hash = base64.b64decode(lines[2], validate=True).hex()
            key_hash = base64.b64decode(signature, validate=True)[:4].hex()
        except (ValueError, binascii.Error):
            raise ValueError("the note's size or root hash is malformed") from None
        return cls(
            journal_id=lines[0][len(ORIGIN_PREFIX) :],
            seq=seq,
            head_hash=head_hash,
            ts_wall="",
            key_id=f"{name}+{key_hash}",
            signature=signature,
        )


class Trust:
    """The keys a verifier trusts: Ed25519 public keys, and HMAC keys for old checkpoints."""

    def __init__(
        self, verifiers: Iterable[VerifierKey] = (), hmac_keys: Iterable[HmacKey] = ()
    ) -> None:
        self.verifiers = {v.key_id: v for v in verifiers}
        self.hmac_keys = {k.key_id: k for k in hmac_keys}

    def __bool__(self) -> bool:
        return bool(self.verifiers or self.hmac_keys)

    def add(self, key: VerifierKey) -> None:
        self.verifiers.setdefault(key.key_id, key)

    def check(self, checkpoint: Checkpoint) -> Verdict:
        """``valid``, ``invalid`` (a trusted key, a bad signature) or ``untrusted``."""
        keys = self.verifiers if checkpoint.scheme == "ed25519" else self.hmac_keys
        key = keys.get(checkpoint.key_id)
        if key is None:
            return "untrusted"
        return "valid" if checkpoint.check(key) else "invalid"

    def describe(self) -> list[str]:
        return [*self.verifiers, *(f"hmac:{k}" for k in self.hmac_keys)]


def origin_line(journal_id: str) -> str:
    """A journal's checkpoint origin, ``agentteam-journal/<journal id>``; ValueError for an id
    that cannot stand in one line (empty, or holding a control character or a space)."""
    if not journal_id or _ORIGIN_BAD.search(journal_id):
        raise ValueError(
            f"the journal id {journal_id!r} cannot be a checkpoint's origin (one line, no"
            " control character or space)"
        )
    return f"{ORIGIN_PREFIX}{journal_id}"


def sign_checkpoint(
    key: SigningKey | HmacKey,
    *,
    journal_id: str,
    seq: int,
    head_hash: str,
    ts_wall: str,
    root_hash: str | None = None,
) -> Checkpoint:
    """Build and sign a checkpoint (Ed25519; an :class:`HmacKey` only makes legacy fixtures).
    With ``root_hash`` (a v2 journal's tree hash at ``seq``) the note signs it."""
    unsigned = Checkpoint(
        journal_id=journal_id,
        seq=seq,
        head_hash=head_hash,
        ts_wall=ts_wall,
        key_id=key.key_id,
        signature="",
        root_hash=root_hash,
    )
    if isinstance(key, HmacKey):
        signature = key.mac(unsigned.legacy_signed_bytes())
    else:
        signature = key.sign(unsigned.note_text().encode())
    return msgspec.structs.replace(unsigned, signature=signature)


def _config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agentteam-bridge"


def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/agentteam-bridge/journal-signing.key`` (``~/.config`` when unset)."""
    return _config_dir() / "journal-signing.key"


def legacy_key_path() -> Path:
    """Where the HMAC key of the journals written before Ed25519 was kept."""
    return _config_dir() / "journal.key"


def default_key_name() -> str:
    """``agentteam-bridge/<host>-<8 random hex>``: a note key name unique to this key."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"
    return f"agentteam-bridge/{host}-{secrets.token_hex(4)}"


def load_key(path: Path | None = None, *, create: bool = True, announce: bool = True) -> SigningKey:
    """Read the signing key at ``path`` (default :func:`default_key_path`), created if absent.

    A created key is written 0600 (its directory 0700) and, with ``announce``, named in one line
    on stderr with its public key and fingerprint (:func:`announce_key`). Raises
    FileNotFoundError (``create=False``) or ValueError (not a key).
    """
    path = path or default_key_path()
    try:
        return SigningKey.parse(read_key_text(path))
    except FileNotFoundError:
        if not create:
            raise
    make_private_dir(path.parent)
    key = SigningKey.generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return SigningKey.parse(read_key_text(path))
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(key.to_file_text())
        file.flush()
        os.fsync(file.fileno())
    if announce:
        announce_key(path, key)
    return key


# A key file is a line or two; more than this is not one (and is not read on).
_KEY_FILE_MAX: Final = 4096


def read_key_text(path: Path) -> str:
    """The key file's text, read without blocking and bounded: a FIFO, a device or a directory
    at the key's path is ValueError at once (opened plainly, a FIFO waits for a writer and
    ``/dev/zero`` never ends); FileNotFoundError when nothing is there."""
    info, data = read_small(path, _KEY_FILE_MAX)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if len(data) > _KEY_FILE_MAX:
        raise ValueError(f"{path} is larger than a key file")
    return data.decode("utf-8", errors="replace")


def announce_key(path: Path, key: SigningKey) -> None:
    """Say in one line on stderr that ``key`` was created at ``path``, with its public key; a
    stderr nobody reads any more (a client that closed its end) drops the line, never the start."""
    verifier = key.verifier
    try:
        print(  # one line: stderr is where a failing start says why, in one line too
            f"agentteam: created the journal signing key {path}; public key {verifier.to_text()}"
            f" (fingerprint {verifier.fingerprint})",
            file=sys.stderr,
            flush=True,
        )
    except OSError:
        pass


def load_legacy_key(path: Path) -> HmacKey:
    """Read an HMAC-era key file (hex digits); raises FileNotFoundError or ValueError."""
    try:
        secret = bytes.fromhex(path.read_text().strip())
    except ValueError as exc:
        raise ValueError("the HMAC journal key file must hold hex digits") from exc
    return HmacKey(secret)


def export_checkpoint(checkpoint: Checkpoint, path: Path) -> None:
    """Write a checkpoint to ``path`` atomically (temp file, fsync, rename), mode 0600."""
    make_private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(checkpoint.to_json() + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint: the JSON :func:`export_checkpoint` writes, or a bare signed note."""
    data = path.read_bytes()
    if data.lstrip()[:1] == b"{":
        return Checkpoint.from_json(data)
    return Checkpoint.from_note(data.decode("utf-8"))


def checkpoint_of(values: Sequence[Any]) -> Checkpoint:
    """A checkpoint from its ``checkpoints`` row: journal_id, seq, head_hash, ts_wall, key_id,
    signature and root_hash (None or NULL for a v1 checkpoint), as the queries select them."""
    journal_id, seq, head_hash, ts_wall, key_id, signature, root_hash = values
    return Checkpoint(
        journal_id=journal_id,
        seq=seq,
        head_hash=head_hash,
        ts_wall=ts_wall,
        key_id=key_id,
        signature=signature,
        root_hash=root_hash,
    )
