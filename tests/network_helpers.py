"""Real network parts for the proxy and TLS tests: tinyproxy as a forward proxy, a private CA,
and a TLS front (trio's TLS server) relaying to a reference runtime on loopback."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Tinyproxy:
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        """The request lines the proxy received ("GET http://... HTTP/1.1", "CONNECT h:p ...")."""
        if not self.log.exists():
            return []
        return [
            line.split("): ", 1)[1]
            for line in self.log.read_text(errors="replace").splitlines()
            if "Request (file descriptor" in line
        ]


@contextmanager
def tinyproxy(directory: Path, basic_auth: tuple[str, str] | None = None) -> Iterator[Tinyproxy]:
    """Debian's tinyproxy in the foreground on a free loopback port (.ci/run installs it)."""
    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy; .ci/run does)")
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    proxy = Tinyproxy(port, directory / "tinyproxy.log")
    lines = [
        f"Port {port}",
        "Listen 127.0.0.1",
        "Timeout 30",
        f'LogFile "{proxy.log}"',
        "LogLevel Connect",
        "MaxClients 50",
        "Allow 127.0.0.1",
    ]
    if basic_auth is not None:
        lines.append(f"BasicAuth {basic_auth[0]} {basic_auth[1]}")
    conf = directory / "tinyproxy.conf"
    conf.write_text("\n".join(lines) + "\n")
    process = subprocess.Popen(
        [binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20  # bounds a hang only
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tinyproxy did not start") from None
                time.sleep(0.05)
        yield proxy
    finally:
        process.terminate()
        process.wait(timeout=10)


@dataclass
class Pki:
    """A private CA and one server certificate it signed, as PEM files."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def make_pki(directory: Path, names: Sequence[str] = ("127.0.0.1", "::1")) -> Pki:
    """A fresh CA and a server certificate for `names` (IP addresses or DNS names)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentteam test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    pki.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pki


@dataclass
class TlsFront:
    port: int
    connections: int = 0


@asynccontextmanager
async def tls_front(
    contexts: Sequence[ssl.SSLContext], backend_port: int, host: str = "127.0.0.1"
) -> AsyncIterator[TlsFront]:
    """An HTTPS server on loopback relaying each connection to a plain HTTP backend; connection
    n gets contexts[min(n, len - 1)] (a certificate that changes after the first connection)."""
    front = TlsFront(0)

    async def relay(client: trio.SocketStream) -> None:
        context = contexts[min(front.connections, len(contexts) - 1)]
        front.connections += 1
        tls = trio.SSLStream(client, context, server_side=True)
        try:
            await tls.do_handshake()
            backend = await trio.open_tcp_stream(host, backend_port)
        except (trio.BrokenResourceError, OSError):
            await trio.aclose_forcefully(tls)
            return

        async def pump(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
            try:
                while data := await source.receive_some(65536):
                    await sink.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, tls, backend)
            nursery.start_soon(pump, backend, tls)
        await trio.aclose_forcefully(tls)
        await trio.aclose_forcefully(backend)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, relay, 0, host=host))
        front.port = listeners[0].socket.getsockname()[1]
        yield front
        nursery.cancel_scope.cancel()
