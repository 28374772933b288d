"""Where the upstream connection goes and what it trusts: the proxy the environment chooses for
a URL, and the TLS context.

Proxy variables are read as curl and httpx read them. ``http_proxy`` / ``https_proxy`` (the
lowercase spelling wins over the uppercase one; uppercase ``HTTP_PROXY`` is ignored when
``REQUEST_METHOD`` says we run under CGI, the "httpoxy" rule), then ``all_proxy``; an empty value
is unset. A proxy URL without a scheme is ``http://``; only ``http://`` proxies are spoken to (a
TLS or SOCKS proxy is refused by name rather than misused). ``no_proxy`` is a comma-separated list
whose entries are matched against the origin's host, no name is resolved, and loopback is not
special:

* ``*`` alone: no proxy for any host;
* ``example.com``, ``.example.com`` or ``*.example.com``: that domain and every name under it
  (curl's reading; httpx reads ``.example.com`` as subdomains only);
* an IP address (``10.1.2.3``, ``::1`` or ``[::1]``): that address; a CIDR block
  (``10.0.0.0/8``, ``fd00::/8``): every address literal in it (curl 7.86+);
* any entry with ``:port``: only that port (httpx and urllib).

The TLS context: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set (those CAs only, as OpenSSL reads
them), else the operating system's trust store through ``truststore`` (Keychain on macOS; on Linux
the distribution's CA bundle), else Python's default context. A client certificate for servers
that require one (mutual TLS): ``AGENTTEAM_CLIENT_CERT`` and ``AGENTTEAM_CLIENT_KEY`` (PEM paths;
the key may sit in the certificate file; an encrypted key is refused at start, never prompted for).
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ._exceptions import BridgeError

__all__ = ["NetworkConfigError", "Proxy", "bypasses_proxy", "proxy_for", "tls_context"]


class NetworkConfigError(BridgeError, ValueError):
    """A proxy variable or a CA setting that cannot be used; the message names it (redacted)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP forward proxy: where to connect, and the Proxy-Authorization value if any."""

    host: str
    port: int
    authorization: bytes | None
    shown: str  # the proxy URL with any password replaced by ***, for logs and errors
    variable: str  # the environment variable it came from
    password: str | None = None

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be shown of it: the password, and the credentials as sent (base64)."""
        if self.authorization is None:
            return ()
        sent = self.authorization.decode("ascii").removeprefix("Basic ")
        return (sent, self.password) if self.password else (sent,)

    def __str__(self) -> str:
        return self.shown


def _lookup(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for variable in (name, name.upper()):
        if variable == "HTTP_PROXY" and "REQUEST_METHOD" in env:
            continue  # httpoxy: under CGI a client's Proxy: header arrives as HTTP_PROXY
        value = env.get(variable, "").strip()
        if value:
            return variable, value
    return None


def proxy_for(url: str, env: Mapping[str, str]) -> Proxy | None:
    """The proxy the environment chooses for url, or None for a direct connection."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = _lookup(env, f"{parts.scheme}_proxy") or _lookup(env, "all_proxy")
    if found is None:
        return None
    no_proxy = _lookup(env, "no_proxy")
    if no_proxy is not None and bypasses_proxy(host, port, no_proxy[1]):
        return None
    return parse_proxy(*found)


def parse_proxy(variable: str, value: str) -> Proxy:
    raw = value if "://" in value else "http://" + value
    parts = urlsplit(raw)
    shown = _redacted(parts.scheme, parts.netloc)
    if parts.scheme.lower() != "http":
        raise NetworkConfigError(
            f"{variable}={shown}: only http:// proxies are supported (a {parts.scheme}:// proxy "
            "is not); use the proxy's plain HTTP address, https is tunnelled through it"
        )
    try:
        port = parts.port or 80
    except ValueError:
        raise NetworkConfigError(f"{variable}={shown}: the port is not a number") from None
    if not parts.hostname:
        raise NetworkConfigError(f"{variable}={shown}: no proxy host")
    authorization = None
    password = unquote(parts.password) if parts.password else None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{password or ''}"
        authorization = b"Basic " + base64.b64encode(credentials.encode())
    return Proxy(parts.hostname, port, authorization, shown, variable, password)


def _redacted(scheme: str, netloc: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    if not at:
        return f"{scheme}://{hostport}"
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hostport}" if ":" in userinfo else f"{scheme}://***@{hostport}"


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether a no_proxy list covers host:port (host as urlsplit gives it: no brackets)."""
    host = host.lower().rstrip(".")
    address = _address(host)
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, entry_port = _split_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        if "/" in name:
            try:
                block = ipaddress.ip_network(name, strict=False)
            except ValueError:
                continue
            if address is not None and address.version == block.version and address in block:
                return True
            continue
        entry_address = _address(name)
        if entry_address is not None:
            if address == entry_address:
                return True
            continue
        domain = name.removeprefix("*").lstrip(".").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """`name[:port]`, `[v6][:port]`, a bare IPv6 address (no port) or a CIDR block."""
    if entry.startswith("["):
        inside, _, rest = entry[1:].partition("]")
        return inside, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def tls_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """The client context: SSL_CERT_FILE / SSL_CERT_DIR if set, else the system trust store;
    with the client certificate of AGENTTEAM_CLIENT_CERT / AGENTTEAM_CLIENT_KEY if set."""
    cafile = env.get("SSL_CERT_FILE") or None
    capath = env.get("SSL_CERT_DIR") or None
    context: ssl.SSLContext
    if cafile or capath:
        try:
            context = ssl.create_default_context(cafile=cafile, capath=capath)
        except (OSError, ssl.SSLError) as exc:
            where = f"SSL_CERT_FILE={cafile}" if cafile else f"SSL_CERT_DIR={capath}"
            raise NetworkConfigError(f"{where}: cannot load CA certificates ({exc})") from None
    else:
        try:
            import truststore
        except ImportError:  # pragma: no cover - truststore is a dependency; a stripped install
            context = ssl.create_default_context()
        else:
            context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _load_client_certificate(context, env)
    return context


class _EncryptedKey(Exception):
    """OpenSSL asked for a passphrase: the key is encrypted."""


def _no_passphrase() -> str:
    raise _EncryptedKey  # never prompt (stdin is the MCP protocol)


def _load_client_certificate(context: ssl.SSLContext, env: Mapping[str, str]) -> None:
    """AGENTTEAM_CLIENT_CERT (PEM: the certificate, its chain, and the key unless
    AGENTTEAM_CLIENT_KEY names it) for servers that require one; an encrypted key is refused
    (there is nobody to ask for its passphrase)."""
    cert = env.get("AGENTTEAM_CLIENT_CERT") or None
    key = env.get("AGENTTEAM_CLIENT_KEY") or None
    if cert is None:
        if key is not None:
            raise NetworkConfigError(
                f"AGENTTEAM_CLIENT_KEY={key} is set without AGENTTEAM_CLIENT_CERT; set both"
            )
        return
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _EncryptedKey:
        raise NetworkConfigError(
            f"AGENTTEAM_CLIENT_KEY={key or cert}: the private key is encrypted; give an "
            "unencrypted PEM key (e.g. `openssl pkey -in KEY -out PLAIN`, mode 0600)"
        ) from None
    except (OSError, ssl.SSLError) as exc:
        where = f"AGENTTEAM_CLIENT_CERT={cert}" + (f", AGENTTEAM_CLIENT_KEY={key}" if key else "")
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NetworkConfigError(
            f"{where}: cannot load the client certificate ({detail})"
        ) from None
