"""Networks operators run the bridge on (issue 29): client certificates for an API that requires
one (mutual TLS, a real TLS server and openssl-made certificates), an ``http://`` API behind an
authenticating proxy (Debian's squid), and connection failures that keep their errno text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.bridge._http11 import Http11Pool, TransportFailure, _from_proxy
from agentteam_task_bridge.bridge._network import parse_proxy
from agentteam_task_bridge.runtime import Runtime

from .bridge_harness import open_bridge
from .network_helpers import make_client_pki, make_pki, mtls_front, squid, tinyproxy

CREATE = {"channel": "general", "tasks": [{"title": "behind the proxy"}]}


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


def _events(path: Path, kind: str) -> list[dict[str, Any]]:
    with journal.open_reader(path) as reader:
        return [msgspec.to_builtins(r.payload) for r in reader.events() if r.kind == kind]


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# --- client certificates (mutual TLS)


@pytest.mark.slow
async def test_a_client_certificate_is_sent_and_its_absence_or_rejection_named_at_start(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    server = make_pki(tmp_path / "server")
    client = make_client_pki(tmp_path / "client")
    backend = int(file_runtime.url.rsplit(":", 1)[1])
    with mtls_front(server, client.ca_file, backend) as port:
        env = {
            **file_runtime.bridge_env(),
            "AGENTTEAM_API_URL": f"https://127.0.0.1:{port}",
            "SSL_CERT_FILE": str(server.ca_file),
        }
        with_cert = {
            **env,
            "AGENTTEAM_CLIENT_CERT": str(client.cert_file),
            "AGENTTEAM_CLIENT_KEY": str(client.key_file),
        }
        async with open_bridge(with_cert, tmp_path / "journal.db") as bridge:
            await bridge.ok("task_create", CREATE)
            await bridge.ok("task_get", {"channel": "general", "number": 1})

        # The key inside the certificate file works too.
        combined = tmp_path / "combined.pem"
        combined.write_bytes(client.cert_file.read_bytes() + client.key_file.read_bytes())
        async with open_bridge(
            {**env, "AGENTTEAM_CLIENT_CERT": str(combined)}, tmp_path / "c" / "journal.db"
        ) as bridge:
            await bridge.ok("task_list", {"channel": "general"})

        missing = await _serve_once(env, tmp_path)
        stranger = {
            **env,
            "AGENTTEAM_CLIENT_CERT": str(client.stranger_cert_file),
            "AGENTTEAM_CLIENT_KEY": str(client.stranger_key_file),
        }
        rejected = await _serve_once(stranger, tmp_path)
        encrypted = await _serve_once(
            {**with_cert, "AGENTTEAM_CLIENT_KEY": str(client.encrypted_key_file)}, tmp_path
        )
        key_only = await _serve_once(
            {**env, "AGENTTEAM_CLIENT_KEY": str(client.key_file)}, tmp_path
        )
    assert "(TLS client certificate required: " in _one_line(missing)
    assert "AGENTTEAM_CLIENT_CERT" in missing.stderr
    assert "(TLS client certificate rejected by the server: " in _one_line(rejected)
    line = _one_line(encrypted)
    assert "the private key is encrypted" in line and str(client.encrypted_key_file) in line
    assert "without AGENTTEAM_CLIENT_CERT" in _one_line(key_only)
    assert "secret" not in encrypted.stderr


async def test_a_client_certificate_alert_after_the_handshake_is_not_in_doubt(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    """TLS 1.3: the client's handshake ends before the server checks the certificate, so the
    refusal arrives on the first read. The request was not acted on, and the reason says why."""
    server = make_pki(tmp_path / "server")
    client = make_client_pki(tmp_path / "client")
    backend = int(file_runtime.url.rsplit(":", 1)[1])
    context = ssl_client_context(server.ca_file)
    with mtls_front(server, client.ca_file, backend) as port:
        pool = Http11Pool(
            f"https://127.0.0.1:{port}",
            timeout_seconds=10,
            connect_timeout_seconds=10,
            user_agent="t",
            ssl_context=context,
        )
        for method, body in (("GET", None), ("POST", b"{}")):
            with pytest.raises(TransportFailure) as failure:
                await pool.request(method, "/api/v1/channels/general/tasks", [], body)
            assert failure.value.kind == "connect_failed" and not failure.value.sent
            assert (failure.value.reason or "").startswith("TLS client certificate required: ")
        await pool.aclose()


def ssl_client_context(ca_file: Path) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


# --- connection failures keep their errno


@pytest.mark.parametrize("through_proxy", [False, True])
async def test_a_refused_connection_keeps_its_errno_at_start(
    tmp_path: Path, through_proxy: bool
) -> None:
    env = {
        "AGENTTEAM_API_URL": "http://127.0.0.1:1",
        "AGENTTEAM_TOKEN": "t",
        "AGENTTEAM_WORKSPACE_ID": "ws",
        "AGENTTEAM_AGENT_ID": "agt",
    }
    if through_proxy:
        env["HTTP_PROXY"] = "http://127.0.0.1:1"
    line = _one_line(await _serve_once(env, tmp_path))
    assert "cannot connect to 127.0.0.1:1: " in line, line
    assert "[Errno 111] Connection refused" in line, line


# --- an http:// API behind an authenticating proxy (squid)


@pytest.mark.slow
async def test_a_proxy_refusing_its_credentials_is_named_as_the_proxy_at_start(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    password = "sq-pr0xy-s3cret"
    with squid("agent", password) as proxy:
        env = {**file_runtime.bridge_env(), "http_proxy": proxy.url("agent", password)}
        async with open_bridge(env, tmp_path / "journal.db") as bridge:
            await bridge.ok("task_create", CREATE)
        assert any("TCP_MISS/200 " in line and " POST http://" in line for line in proxy.requests())

        wrong = {**env, "http_proxy": proxy.url("agent", "wrong-" + password)}
        done = await _serve_once(wrong, tmp_path)
    line = _one_line(done)
    assert f"the proxy http://agent:***@127.0.0.1:{proxy.port} answered 407" in line, line
    assert "http_proxy" in line
    assert password not in done.stderr
    assert "token" not in line.lower() and "credential_" not in line


async def test_a_request_the_proxy_refused_is_not_in_doubt(tmp_path: Path) -> None:
    """A mutation the proxy answered 407 never reached the API: not sent, with the reason."""
    with squid("agent", "right") as proxy:
        pool = Http11Pool(
            "http://127.0.0.1:9/base",  # never reached: the proxy refuses first
            timeout_seconds=10,
            connect_timeout_seconds=10,
            user_agent="t",
            proxy=parse_proxy("HTTP_PROXY", proxy.url("agent", "wrong")),
        )
        for method, body in (("POST", b"{}"), ("GET", None)):
            with pytest.raises(TransportFailure) as failure:
                await pool.request(method, "/tasks", [(b"content-type", b"x/y")], body)
            assert failure.value.kind == "connect_failed" and not failure.value.sent
            assert "answered 407 (proxy authentication required)" in (failure.value.reason or "")
        await pool.aclose()
        assert all("TCP_DENIED/407" in line for line in proxy.requests() if "http://" in line)


# --- tinyproxy answers a wrong password with 401 and WWW-Authenticate: Basic, not 407


@pytest.mark.slow
async def test_tinyproxys_401_for_a_wrong_password_is_named_as_the_proxy_at_start(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    password = "tp-pr0xy-s3cret"
    with tinyproxy(tmp_path / "proxy", basic_auth=("agent", password)) as proxy:
        right = f"http://agent:{password}@127.0.0.1:{proxy.port}"
        env = {**file_runtime.bridge_env(), "http_proxy": right}
        async with open_bridge(env, tmp_path / "journal.db") as bridge:
            await bridge.ok("task_create", CREATE)
        assert any(line.startswith("POST http://") for line in proxy.requests())

        wrong = {**env, "http_proxy": right.replace(password, "wrong-" + password)}
        done = await _serve_once(wrong, tmp_path)
    line = _one_line(done)
    assert f"the proxy http://agent:***@127.0.0.1:{proxy.port} answered 401" in line, line
    assert "(proxy authentication required)" in line and "http_proxy" in line, line
    assert password not in done.stderr
    assert "token" not in line.lower() and "credential_" not in line


@pytest.mark.slow
async def test_a_mutation_tinyproxy_refuses_mid_session_is_the_proxys_error_not_in_doubt(
    file_runtime: Runtime, tmp_path: Path
) -> None:
    """The proxy's password changes under a live session: the call's error and its journaled
    reason name the proxy (never the agent's credential), and the create is not in doubt."""
    path = tmp_path / "journal.db"
    first = tinyproxy(tmp_path / "p1", basic_auth=("agent", "first"))
    port = first.__enter__().port
    env = {**file_runtime.bridge_env(), "http_proxy": f"http://agent:first@127.0.0.1:{port}"}
    try:
        async with open_bridge(env, path) as bridge:
            await bridge.ok("task_create", CREATE)  # through the proxy, its password taken
            first.__exit__(None, None, None)  # the proxy stops ...
            # ... and starts again on its port with a password the session does not have.
            with tinyproxy(tmp_path / "p2", basic_auth=("agent", "second"), port=port):
                error = await bridge.fails("task_create", CREATE, code="upstream_unreachable")
                await bridge.fails(
                    "task_get", {"channel": "general", "number": 1}, code="upstream_unreachable"
                )
    finally:
        first.__exit__(None, None, None)
    # The model is told nothing was sent (as for squid's 407); never that its credential failed.
    assert "nothing was sent" in error["message"], error
    assert "credential" not in str(error).lower() and "token" not in str(error).lower(), error
    events = _events(path, "call_error")
    reasons = [e.get("reason") or "" for e in events]
    assert len(reasons) == 2 and all("answered 401 (proxy authentication" in r for r in reasons)
    assert not _events(path, "token_refreshed")  # the agent's token was never blamed
    with journal.open_reader(path) as reader:
        refused_calls = {r.call_id for r in reader.events() if r.kind == "call_error"}
        upstream = [r for r in reader.events(kind="upstream_request") if r.call_id in refused_calls]
    assert upstream  # the request was journaled write-ahead, then refused before the API
    from agentteam_task_bridge import replay

    result = replay.verify([path])
    assert not [c for c in result.in_doubt if c.call_id in refused_calls], result.in_doubt


async def test_a_request_tinyproxy_refused_with_401_is_not_in_doubt(tmp_path: Path) -> None:
    """A mutation tinyproxy answered 401 never reached the API: not sent, named the proxy's."""
    with tinyproxy(tmp_path / "proxy", basic_auth=("agent", "right")) as proxy:
        pool = Http11Pool(
            "http://127.0.0.1:9/base",  # never reached: the proxy refuses first
            timeout_seconds=10,
            connect_timeout_seconds=10,
            user_agent="t",
            proxy=parse_proxy("HTTP_PROXY", f"http://agent:wrong@127.0.0.1:{proxy.port}"),
        )
        for method, body in (("POST", b"{}"), ("PATCH", b"{}"), ("GET", None)):
            with pytest.raises(TransportFailure) as failure:
                await pool.request(method, "/tasks", [(b"content-type", b"x/y")], body)
            assert failure.value.kind == "connect_failed" and not failure.value.sent
            reason = failure.value.reason or ""
            assert "answered 401 (proxy authentication required)" in reason, reason
            assert "HTTP_PROXY" in reason and "wrong" not in reason
        await pool.aclose()


@pytest.mark.parametrize(
    ("fields", "credentials_sent", "proxys"),
    [
        ([(b"www-authenticate", b'Basic realm="Tinyproxy"')], True, True),
        ([(b"www-authenticate", b'Digest realm="p", nonce="x"')], True, True),
        ([(b"www-authenticate", b"Negotiate"), (b"www-authenticate", b"NTLM")], True, True),
        ([(b"proxy-authenticate", b'Basic realm="p"')], False, True),
        # The API's: it challenges for a bearer token, or not at all (the reference runtime).
        ([(b"www-authenticate", b'Bearer realm="api", error="invalid_token"')], True, False),
        ([(b"www-authenticate", b"bearer")], True, False),
        ([(b"www-authenticate", b'Basic realm="a", Bearer realm="b"')], True, False),
        ([(b"www-authenticate", b"Basic"), (b"www-authenticate", b"Bearer")], True, False),
        ([], True, False),
        # No proxy credentials were sent: a proxy would have asked with 407, so this is the API.
        ([(b"www-authenticate", b'Basic realm="api"')], False, False),
    ],
)
def test_whose_401_it_is(
    fields: list[tuple[bytes, bytes]], credentials_sent: bool, proxys: bool
) -> None:
    assert _from_proxy(401, fields, credentials_sent) is proxys
    assert _from_proxy(407, fields, credentials_sent) is True
