"""Fixtures for the runtime tests: one real undoproxy, TLS upstreams an agent would call, and
the environment `undoproxy env --session ID` prints, as a dict.

Upstreams: 127.0.0.2 is loopback but not in the NO_PROXY `env` prints, so most clients send
it through undoproxy as they would a remote API. Go, Ruby and JVMs never proxy a loopback
address whatever NO_PROXY says (Go's httpproxy, Ruby's URI#find_proxy and Java's
DefaultProxySelector once http.nonProxyHosts is set all skip 127/8): for them the upstream
listens on this machine's own non-loopback address.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.support import upstream
from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

# What the machine's own environment may carry that would change what a client does.
_CLEARED = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "WGETRC",
    "PIP_CERT",
    "AWS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
)


def skip_or_fail(why: str) -> None:
    """Skip locally; in CI (CI=true) a missing runtime is a failure, never a silent pass."""
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def need(tool: str) -> str:
    """The tool's path; a missing one skips locally and fails in CI (CI=true)."""
    path = shutil.which(tool)
    if path:
        return path
    why = f"{tool} is not installed (.ci/run installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def need_module(name: str) -> None:
    """Skip locally, fail in CI, when a Python package of the test extra is missing."""
    try:
        __import__(name)
    except ImportError:
        why = f"the Python package {name} is not installed (pip install -e '.[test]')"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def own_address() -> str | None:
    """This machine's non-loopback IPv4 address (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture(scope="module")
def rt_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-runtimes")).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def public_cert(rt_proxy: Undoproxy, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate every client under `env` trusts, as a public API's would be: issued by
    undoproxy's own CA (which is in the bundle). A client that went around undoproxy would
    succeed silently, so a bypass shows as what it is: the upstream got the request, the
    session has no step."""
    pem = (rt_proxy.state_dir / "mitmproxy-ca.pem").read_bytes()
    ca_key = serialization.load_pem_private_key(pem, None)
    ca = x509.load_pem_x509_certificate(pem)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.2"))]
    if own_address():
        names.append(x509.IPAddress(ipaddress.ip_address(own_address())))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.example.test")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory = tmp_path_factory.mktemp("public-cert")
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def api_upstream(public_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    """The echo upstream on 127.0.0.2 over TLS, with a certificate clients trust."""
    server = ThreadedServer(
        upstream.create_app(), server_context(public_cert), host="127.0.0.2"
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote_upstream(public_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    """The echo upstream on this machine's own non-loopback address, for Go, Ruby and JVMs."""
    address = own_address()
    if address is None:
        why = "this machine has no non-loopback address (Go, Ruby, JVMs never proxy loopback)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    server = ThreadedServer(
        upstream.create_app(), server_context(public_cert), host=address
    ).start()
    yield server
    server.stop()


def agent_env(
    proxy: Undoproxy, session: str, shell_env: dict[str, str] | None = None
) -> dict[str, str]:
    """os.environ without proxy/CA settings, plus what `undoproxy env --session` prints."""
    run = proxy.cli("env", "--session", session, "--shell", "json")
    assert run.returncode == 0, run.stderr
    base = {k: v for k, v in os.environ.items() if k.upper() not in _CLEARED}
    return {**base, **json.loads(run.stdout), **(shell_env or {})}


def steps(proxy: Undoproxy, session: str) -> list[dict[str, Any]]:
    """The session's steps, through the admin API."""
    answer = proxy.api("GET", f"/api/sessions/{session}")
    assert answer.status_code == 200, answer.text
    return list(answer.json()["steps"])


def run(
    argv: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run one client process."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def in_session(proxy: Undoproxy, session: str, marker: str) -> Callable[[], list[str]]:
    """A check: the URLs of the session's steps that contain `marker`."""
    return lambda: [s["url"] for s in steps(proxy, session) if marker in s["url"]]


PYTHON = sys.executable
