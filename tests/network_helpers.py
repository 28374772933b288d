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
def tinyproxy(
    directory: Path, basic_auth: tuple[str, str] | None = None, port: int | None = None
) -> Iterator[Tinyproxy]:
    """Debian's tinyproxy in the foreground on a free loopback port, or `port` (a proxy started
    again there with other settings) (.ci/run installs it)."""
    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy; .ci/run does)")
    directory.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
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


# --- mutual TLS: client certificates made with openssl, a server that requires one


@dataclass
class ClientPki:
    """A client CA (the server trusts it), a client certificate and key it signed, the same key
    encrypted, and a certificate from a CA the server does not trust."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    encrypted_key_file: Path
    stranger_cert_file: Path
    stranger_key_file: Path


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    subprocess.run([binary, *args], check=True, capture_output=True, timeout=60)


def _openssl_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}-ca.key", directory / f"{name}-ca.pem"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "1",
        "-subj", f"/CN={name} client CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return key, cert


def _openssl_client(directory: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    ext = directory / f"{name}.ext"
    ext.write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext),
    )  # fmt: skip
    return cert, key


def make_client_pki(directory: Path) -> ClientPki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _openssl_ca(directory, "trusted")
    cert, key = _openssl_client(directory, "agent", ca)
    encrypted = directory / "agent-encrypted.key"
    _openssl(
        "pkey", "-in", str(key), "-out", str(encrypted), "-aes256", "-passout", "pass:secret"
    )  # fmt: skip
    stranger_cert, stranger_key = _openssl_client(
        directory, "stranger", _openssl_ca(directory, "stranger")
    )
    return ClientPki(ca[1], cert, key, encrypted, stranger_cert, stranger_key)


@contextmanager
def mtls_front(pki: Pki, client_ca: Path, backend_port: int) -> Iterator[int]:
    """An HTTPS server on 127.0.0.1 (a free port, yielded) that requires a client certificate
    signed by client_ca and relays each connection to a plain HTTP backend. Blocking stdlib ssl
    in threads, so that a refused client gets the TLS alert (trio would drop it unsent)."""
    import threading

    context = pki.server_context()
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(client_ca)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def relay(client: socket.socket) -> None:
        tls = context.wrap_socket(client, server_side=True, do_handshake_on_connect=False)
        try:
            tls.do_handshake()
        except (OSError, ssl.SSLError):
            # A lingering close, as web servers do: the client's request (sent right after its
            # half of a TLS 1.3 handshake) is read and dropped, so no reset destroys the alert.
            raw = socket.socket(fileno=tls.detach())
            try:
                raw.shutdown(socket.SHUT_WR)
                while raw.recv(65536):
                    pass
            except OSError:
                pass
            raw.close()
            return
        try:
            backend = socket.create_connection(("127.0.0.1", backend_port), timeout=10)
        except OSError:
            tls.close()
            return
        tls.settimeout(None)

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        back = threading.Thread(target=pump, args=(backend, tls), daemon=True)
        back.start()
        pump(tls, backend)
        back.join(timeout=10)
        tls.close()
        backend.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(10)
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        acceptor.join(timeout=10)
        listener.close()


# --- squid with basic auth


@dataclass
class Squid:
    port: int
    directory: Path

    def url(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        """Access log lines: "... TCP_MISS/200 ... GET http://..." or ".../407 ..."."""
        log = self.directory / "access.log"
        return log.read_text(errors="replace").splitlines() if log.exists() else []


@contextmanager
def squid(user: str, password: str) -> Iterator[Squid]:
    """Debian's squid in the foreground on a free loopback port, requiring basic auth for
    user:password (.ci/run installs it). Its files live in a directory of its own, owned by the
    user squid drops to when started as root."""
    import os
    import pwd
    import tempfile

    binary = shutil.which("squid") or (
        "/usr/sbin/squid" if Path("/usr/sbin/squid").exists() else None
    )
    helper = Path("/usr/lib/squid/basic_ncsa_auth")
    if binary is None or not helper.exists():
        pytest.skip("squid is not installed (apt-get install squid; .ci/run does)")
    directory = Path(tempfile.mkdtemp(prefix="squid-"))
    port = _free_port()
    hashed = subprocess.run(
        ["openssl", "passwd", "-apr1", password], check=True, capture_output=True, text=True
    ).stdout.strip()
    (directory / "passwd").write_text(f"{user}:{hashed}\n")
    lines = [
        f"http_port 127.0.0.1:{port}",
        f"pid_filename {directory}/squid.pid",
        f"access_log stdio:{directory}/access.log",
        f"cache_log {directory}/cache.log",
        f"coredump_dir {directory}",
        "cache deny all",
        "netdb_filename none",
        "shutdown_lifetime 0 seconds",
        f"auth_param basic program {helper} {directory}/passwd",
        "auth_param basic children 1 startup=1 idle=1",
        "auth_param basic realm agentteam-test",
        "acl authed proxy_auth REQUIRED",
        "http_access allow authed",
        "http_access deny all",
    ]
    (directory / "squid.conf").write_text("\n".join(lines) + "\n")
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("proxy")
        except KeyError:
            pass
        else:
            for path in [directory, *directory.iterdir()]:
                os.chown(path, account.pw_uid, account.pw_gid)
    process = subprocess.Popen(
        [binary, "-N", "-f", str(directory / "squid.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30  # bounds a hang only
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("squid did not start") from None
                time.sleep(0.1)
        yield Squid(port, directory)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
