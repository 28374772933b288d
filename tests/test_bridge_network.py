"""The bridge on real networks: a forward proxy (tinyproxy) chosen by HTTP_PROXY / HTTPS_PROXY /
NO_PROXY, TLS with a private CA, a named reason for every TLS failure, IPv6 literals."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge._http11 import Http11Pool, TransportFailure
from agentteam_task_bridge.bridge._network import bypasses_proxy, proxy_for, tls_context
from agentteam_task_bridge.runtime import Runtime, RuntimeConfig, open_runtime

from .bridge_harness import open_bridge
from .network_helpers import Pki, make_pki, tinyproxy, tls_front

CREATE = {"channel": "general", "tasks": [{"title": "through the proxy 🚀 代理"}]}


def _upstream_requests(path: Path) -> list[journal.Record]:
    with journal.open_reader(path) as reader:
        return [r for r in reader.events() if r.kind == "upstream_request"]


def _call_errors(path: Path) -> list[dict[str, Any]]:
    with journal.open_reader(path) as reader:
        return [msgspec_builtins(r.payload) for r in reader.events() if r.kind == "call_error"]


def msgspec_builtins(payload: Any) -> dict[str, Any]:
    import msgspec

    result: dict[str, Any] = msgspec.to_builtins(payload)
    return result


async def _serve_once(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`serve` with stdin closed: it exits at once, or fails at start with one stderr line."""
    return await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [
                sys.executable,
                "-m",
                "agentteam_task_bridge.bridge._cli",
                "serve",
                "--journal",
                str(tmp_path / "j.db"),
            ],
            env={"PATH": "/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path / "data"), **env},
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
    )


# --- which proxy the environment chooses

NO_PROXY_CASES = [
    # (host, port, NO_PROXY, covered)
    ("127.0.0.1", 8765, "", False),  # loopback is not special
    ("localhost", 8765, "example.com", False),
    ("api.example.com", 443, "*", True),
    ("api.example.com", 443, "example.com", True),
    ("example.com", 443, "example.com", True),
    ("api.example.com", 443, ".example.com", True),  # curl: the domain and below
    ("example.com", 443, ".example.com", True),
    ("api.example.com", 443, "*.example.com", True),
    ("badexample.com", 443, "example.com", False),
    ("api.example.com", 443, "EXAMPLE.COM.", True),
    ("api.example.com", 443, "example.com:443", True),
    ("api.example.com", 8443, "example.com:443", False),
    ("127.0.0.1", 8765, "localhost,127.0.0.1", True),
    ("127.0.0.2", 8765, "127.0.0.1", False),
    ("10.1.2.3", 80, "10.0.0.0/8", True),
    ("11.1.2.3", 80, "10.0.0.0/8", False),
    ("::1", 80, "::1", True),
    ("::1", 80, "[::1]", True),
    ("::1", 8080, "[::1]:8080", True),
    ("::1", 8081, "[::1]:8080", False),
    ("fd00::5", 80, "fd00::/8", True),
    ("10.1.2.3", 80, "::/0", False),  # a v6 block never covers a v4 address
    ("internal", 80, " other , internal ", True),
]


@pytest.mark.parametrize(("host", "port", "no_proxy", "covered"), NO_PROXY_CASES)
def test_no_proxy_is_read_as_curl_and_httpx_read_it(
    host: str, port: int, no_proxy: str, covered: bool
) -> None:
    assert bypasses_proxy(host, port, no_proxy) is covered


def test_the_proxy_variables_are_chosen_as_curl_and_httpx_choose_them() -> None:
    url = "http://api.example.com/v1"
    assert proxy_for(url, {}) is None
    assert proxy_for(url, {"HTTPS_PROXY": "http://p:1"}) is None  # only for https
    assert proxy_for(url, {"HTTP_PROXY": "p:3128"}) is not None  # no scheme: http
    chosen = proxy_for(url, {"http_proxy": "http://low:1", "HTTP_PROXY": "http://up:2"})
    assert chosen is not None and (chosen.host, chosen.port) == ("low", 1)
    assert proxy_for(url, {"HTTP_PROXY": "http://up:2", "REQUEST_METHOD": "GET"}) is None
    fallback = proxy_for("https://x.test", {"ALL_PROXY": "http://all:3"})
    assert fallback is not None and fallback.host == "all"
    assert proxy_for(url, {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com"}) is None
    assert proxy_for(url, {"HTTP_PROXY": "", "ALL_PROXY": ""}) is None
    secret = proxy_for(url, {"HTTP_PROXY": "http://me:p%40ss@p:1"})
    assert secret is not None and secret.authorization == b"Basic bWU6cEBzcw=="  # me:p@ss
    assert str(secret) == "http://me:***@p:1" and "p%40ss" not in repr(secret).split("shown")[1]


@pytest.mark.parametrize("value", ["https://p:1", "socks5://p:1", "http://p:port"])
def test_a_proxy_the_bridge_cannot_speak_to_fails_at_start_by_name(value: str) -> None:
    from agentteam_task_bridge.bridge._network import NetworkConfigError

    with pytest.raises(NetworkConfigError, match="HTTPS_PROXY="):
        proxy_for("https://api.test", {"HTTPS_PROXY": value})


# --- through a real forward proxy


@pytest.mark.slow
async def test_every_upstream_request_passes_the_proxy_and_none_when_no_proxy_covers_it(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    port = file_runtime.url.rsplit(":", 1)[1]
    with tinyproxy(tmp_path / "proxy") as proxy:
        proxied = {**file_runtime.bridge_env(), "HTTP_PROXY": proxy.url}
        async with open_bridge(proxied, tmp_path / "a" / "journal.db") as bridge:
            await bridge.ok("task_create", CREATE)
            await bridge.ok("task_list", {"channel": "general"})
            await bridge.ok("task_get", {"channel": "general", "number": 1})
        probe, *through = proxy.requests()
        sent = _upstream_requests(tmp_path / "a" / "journal.db")
        assert len(sent) == 3
        # The start-up probe's one request (no credentials), then each call's.
        assert probe == f"GET http://127.0.0.1:{port}/ HTTP/1.1", probe
        assert len(through) == len(sent), through
        assert all(line.startswith(("GET", "POST")) for line in through)
        assert all(f" http://127.0.0.1:{port}/api/v1/" in line for line in through)

        covered = {**proxied, "no_proxy": "localhost,127.0.0.1"}
        async with open_bridge(covered, tmp_path / "b" / "journal.db") as bridge:
            await bridge.ok("task_get", {"channel": "general", "number": 1})
        assert proxy.requests() == [probe, *through]  # not one more


@pytest.mark.slow
async def test_https_goes_through_a_connect_tunnel_with_proxy_credentials_redacted(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki")
    backend = int(file_runtime.url.rsplit(":", 1)[1])
    password = "pr0xy-s3cret"
    async with tls_front([pki.server_context()], backend) as front:
        with tinyproxy(tmp_path / "proxy", basic_auth=("agent", password)) as proxy:
            env = {
                **file_runtime.bridge_env(),
                "AGENTTEAM_API_URL": f"https://127.0.0.1:{front.port}",
                "SSL_CERT_FILE": str(pki.ca_file),
                "https_proxy": f"http://agent:{password}@127.0.0.1:{proxy.port}",
            }
            async with open_bridge(env, tmp_path / "journal.db") as bridge:
                await bridge.ok("task_create", CREATE)
                await bridge.ok("task_get", {"channel": "general", "number": 1})
                stderr = bridge.stderr()
            tunnels = proxy.requests()
            assert tunnels and all(
                line == f"CONNECT 127.0.0.1:{front.port} HTTP/1.1" for line in tunnels
            )

            wrong = {**env, "https_proxy": f"http://agent:wrong-{password}@127.0.0.1:{proxy.port}"}
            done = await _serve_once(wrong, tmp_path)
    assert password not in stderr
    assert done.returncode == 2
    assert "(proxy authentication required) to CONNECT" in done.stderr, done.stderr
    assert f"http://agent:***@127.0.0.1:{proxy.port}" in done.stderr
    assert password not in done.stderr
    for path in tmp_path.glob("journal.db*"):
        assert password.encode() not in path.read_bytes()


# --- TLS with a private CA


@pytest.mark.slow
async def test_a_private_ca_works_when_configured_and_fails_by_name_when_not(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path / "pki", names=("localhost",))
    backend = int(file_runtime.url.rsplit(":", 1)[1])
    async with tls_front([pki.server_context()], backend) as front:
        env = {**file_runtime.bridge_env(), "AGENTTEAM_API_URL": f"https://localhost:{front.port}"}
        async with open_bridge({**env, "SSL_CERT_FILE": str(pki.ca_file)}, tmp_path / "j") as b:
            await b.ok("task_list", {"channel": "general"})

        untrusted = await _serve_once(env, tmp_path)
        by_ip = {**env, "AGENTTEAM_API_URL": f"https://127.0.0.1:{front.port}"}
        mismatch = await _serve_once({**by_ip, "SSL_CERT_FILE": str(pki.ca_file)}, tmp_path)
    assert untrusted.returncode == 2 and mismatch.returncode == 2
    assert "(TLS certificate verify failed: " in untrusted.stderr, untrusted.stderr
    assert len(untrusted.stderr.strip().splitlines()) == 1
    assert "(TLS hostname mismatch: " in mismatch.stderr, mismatch.stderr


async def test_a_tls_failure_after_start_is_journaled_with_its_reason(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    trusted = make_pki(tmp_path / "trusted")
    rotated = make_pki(tmp_path / "rotated")  # a certificate from a CA nobody configured
    backend = int(file_runtime.url.rsplit(":", 1)[1])
    contexts = [trusted.server_context(), rotated.server_context()]
    async with tls_front(contexts, backend) as front:
        env = {
            **file_runtime.bridge_env(),
            "AGENTTEAM_API_URL": f"https://127.0.0.1:{front.port}",
            "SSL_CERT_FILE": str(trusted.ca_file),
        }
        async with open_bridge(env, tmp_path / "journal.db") as bridge:
            error = await bridge.fails(
                "task_get", {"channel": "general", "number": 1}, code="upstream_unreachable"
            )
    assert "TLS" not in error["message"]  # the model is told what to do, not the exception
    (recorded,) = _call_errors(tmp_path / "journal.db")
    assert recorded["reason"].startswith("TLS certificate verify failed: "), recorded


async def test_tls_to_a_plain_http_server_is_a_named_protocol_failure(
    runtime: Runtime, tmp_path: Path
) -> None:
    pool = Http11Pool(
        runtime.url.replace("http:", "https:"),
        timeout_seconds=5,
        connect_timeout_seconds=5,
        user_agent="test",
        ssl_context=tls_context({}),
    )
    with pytest.raises(TransportFailure) as failure:
        await pool.request("GET", "/healthz", [], None)
    assert not failure.value.sent
    assert (failure.value.reason or "").startswith("TLS protocol error: "), failure.value.reason


# --- IPv6 literals


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_an_ipv6_literal_is_bracketed_in_the_host_field() -> None:
    for url, host in [("http://[::1]/", b"[::1]"), ("http://[::1]:8080/p", b"[::1]:8080")]:
        pool = Http11Pool(url, timeout_seconds=1, connect_timeout_seconds=1, user_agent="t")
        assert b"\r\nhost: %s\r\n" % host in b"\r\n" + pool._encode("GET", "/x", [], None)


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
async def test_the_bridge_reaches_a_runtime_on_the_ipv6_loopback(tmp_path: Path) -> None:
    config = RuntimeConfig(db_path=str(tmp_path / "runtime.db"), host="::1")
    async with open_runtime(config) as rt:
        port = rt.url.rsplit(":", 1)[1]
        env = {**rt.bridge_env(), "AGENTTEAM_API_URL": f"http://[::1]:{port}"}
        async with open_bridge(env, tmp_path / "journal.db") as bridge:
            await bridge.ok("task_list", {"channel": "general"})


def test_the_system_trust_store_is_used_unless_a_ca_file_is_named(tmp_path: Path) -> None:
    pki: Pki = make_pki(tmp_path)
    assert type(tls_context({})).__module__.startswith("truststore")
    context = tls_context({"SSL_CERT_FILE": str(pki.ca_file)})
    assert type(context) is ssl.SSLContext
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "agentteam test CA"),),)
    ]


async def test_http_through_a_proxy_sends_absolute_form_with_the_proxy_credentials() -> None:
    from agentteam_task_bridge.bridge._network import parse_proxy

    from .test_bridge_http11 import serving

    async with serving() as proxy_server:
        proxy = parse_proxy("HTTP_PROXY", f"http://me:pw@127.0.0.1:{proxy_server.port}")
        pool = Http11Pool(
            "http://api.test:8080/base/",
            timeout_seconds=5,
            connect_timeout_seconds=5,
            user_agent="t",
            proxy=proxy,
        )
        status, _, _ = await pool.request("GET", "/x?q=1", [], None)
        await pool.aclose()
    assert status == 200
    (request, _), *_ = proxy_server.requests  # h11, the oracle, parsed it
    assert request.target == b"http://api.test:8080/base/x?q=1"
    assert (b"host", b"api.test:8080") in request.headers
    assert (b"proxy-authorization", b"Basic bWU6cHc=") in request.headers
