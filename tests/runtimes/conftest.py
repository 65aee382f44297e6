"""Fixtures for the runtime tests: one real undoproxy, TLS upstreams an agent would call, and
the environment `undoproxy env --session ID` prints, as a dict.

Upstreams: 127.0.0.2 is loopback but not in the NO_PROXY `env` prints, so most clients send
it through undoproxy as they would a remote API. Go, Ruby and JVMs never proxy a loopback
address whatever NO_PROXY says (Go's httpproxy, Ruby's URI#find_proxy and Java's
DefaultProxySelector once http.nonProxyHosts is set all skip 127/8), nor does axios (its
NO_PROXY check treats every loopback address as 127.0.0.1): for them the upstream runs on a
test host of this run's own, a network namespace joined to this machine by a veth pair on a
private /30 (`netns_host`, `remote_upstream`). No test sends anything to another address: the
machine's own network addresses are never a target.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import random
import select
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.support import upstream
from tests.support.certs import server_context
from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

REPO = Path(__file__).resolve().parents[2]

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


def need(tool: str) -> str:
    """The tool's path; a missing one skips locally and fails in CI (CI=true)."""
    path = shutil.which(tool)
    if path:
        return path
    skip_or_fail(f"{tool} is not installed (.ci/run installs it)")


def need_module(name: str) -> None:
    """Skip locally, fail in CI, when a Python package of the test extra is missing."""
    try:
        __import__(name)
    except ImportError:
        skip_or_fail(f"the Python package {name} is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def rt_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy-runtimes")).start()
    yield instance
    instance.stop()


def issue_cert(proxy: Undoproxy, directory: Path, address: str) -> tuple[Path, Path]:
    """cert.pem and key.pem for `address`, issued by `proxy`'s own CA (in the bundle `env`
    points every client at), as a public API's certificate would be trusted."""
    pem = (proxy.state_dir / "mitmproxy-ca.pem").read_bytes()
    ca_key = serialization.load_pem_private_key(pem, None)
    ca = x509.load_pem_x509_certificate(pem)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.example.test")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
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
def public_cert(rt_proxy: Undoproxy, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate for 127.0.0.2 that every client under `env` trusts, as a public API's
    would be: issued by undoproxy's own CA (which is in the bundle). A client that went around
    undoproxy would succeed silently, so a bypass shows as what it is: the upstream got the
    request, the session has no step."""
    return issue_cert(rt_proxy, tmp_path_factory.mktemp("public-cert"), "127.0.0.2")


@pytest.fixture(scope="module")
def api_upstream(public_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    """The echo upstream on 127.0.0.2 over TLS, with a certificate clients trust."""
    server = ThreadedServer(
        upstream.create_app(), server_context(public_cert), host="127.0.0.2"
    ).start()
    yield server
    server.stop()


# --- the test host: a network namespace of this test run's own ---------------------------


@dataclass(frozen=True)
class NetnsHost:
    """A network namespace this test run made, joined to this machine by a veth pair."""

    namespace: str
    address: str  # the namespace's end of the veth: where its servers listen
    peer: str  # this machine's end


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
    )


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has a route to (the default route aside) or an
    address in."""
    taken = []
    for route in json.loads(_ip("-4", "-json", "route", "show", "table", "all").stdout or "[]"):
        if route.get("dst", "default") != "default":
            taken.append(ipaddress.IPv4Network(route["dst"], strict=False))
    for link in json.loads(_ip("-4", "-json", "address", "show").stdout or "[]"):
        for info in link.get("addr_info", []):
            taken.append(ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}").network)
    return taken


def free_subnet() -> ipaddress.IPv4Network:
    """A random 10.X.Y.0/30 that overlaps no route and no address of this machine."""
    taken = _taken_networks()
    rng = random.SystemRandom()
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{rng.randrange(256)}.{rng.randrange(256)}.0/30")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free 10.X.Y.0/30 for the test host")


@pytest.fixture(scope="session")
def netns_host() -> Iterator[NetnsHost]:
    """A namespace `upx-<pid>` with a veth pair on a free private /30; deleted (the veth with
    it) at the end of the run, whatever the tests did. Where namespaces cannot be made (no
    CAP_NET_ADMIN, no iproute2) the tests that need it skip, and fail in CI."""
    if shutil.which("ip") is None:
        skip_or_fail("ip (iproute2) is not installed (.ci/run installs it)")
    pid = os.getpid()
    name, outside, inside = f"upx-{pid}", f"upx{pid}h", f"upx{pid}n"  # links: <= 15 chars
    if name in _ip("netns", "list").stdout.split():
        # Left by a run that was killed (SIGKILL) before its teardown and had this same pid:
        # no run alive can be using it, since the pid is ours.
        _ip("netns", "delete", name)
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        skip_or_fail(f"cannot create a network namespace: ip netns add: {made.stderr.strip()}")
    try:
        net = free_subnet()
        peer, address = (str(a) for a in net.hosts())
        for step in (
            ("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", name),
            ("address", "add", f"{peer}/30", "dev", outside),
            ("link", "set", outside, "up"),
            ("-n", name, "address", "add", f"{address}/30", "dev", inside),
            ("-n", name, "link", "set", inside, "up"),
            ("-n", name, "link", "set", "lo", "up"),
        ):
            done = _ip(*step)
            if done.returncode != 0:
                skip_or_fail(f"cannot set up the test host: ip {' '.join(step)}: {done.stderr}")
        route = json.loads(_ip("-4", "-json", "route", "get", address).stdout or "[{}]")
        if route[0].get("dev") != outside:  # another run took the same /30 at the same time
            raise RuntimeError(f"{address} is not routed to {outside}: {route}")
        yield NetnsHost(name, address, peer)
    finally:
        _ip("netns", "delete", name)  # takes the veth pair with it
        _ip("link", "delete", outside)  # gone already, unless the namespace was not


class NetnsUpstream:
    """The echo upstream as a process in the test host's namespace (tests/support/
    netns_upstream.py), over TLS; what it received is read from its second, plain port."""

    def __init__(self, netns: NetnsHost, cert: tuple[Path, Path], directory: Path) -> None:
        self.netns = netns
        self.host = netns.address
        self.cert = cert
        self.log = directory / "upstream.log"
        self.port = self.records_port = 0
        self.proc: subprocess.Popen[str] | None = None
        self._http = requests.Session()
        self._http.trust_env = False  # never through a proxy of the machine's environment

    @property
    def base_url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> NetnsUpstream:
        """Start in the namespace and wait until its ports answer from this side."""
        env = {k: v for k, v in os.environ.items() if k.upper() not in _CLEARED}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    *("ip", "netns", "exec", self.netns.namespace, sys.executable),
                    *("-m", "tests.support.netns_upstream", "--host", self.host),
                    *("--cert", str(self.cert[0]), "--key", str(self.cert[1])),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO,
                env=env,
            )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"the test host's upstream did not start:\n{self.log.read_text()}")
        ports = json.loads(line)
        self.port, self.records_port = ports["port"], ports["records_port"]
        self.received()  # reachable from this namespace, through the veth
        return self

    def received(self) -> list[upstream.Received]:
        """What the upstream has received so far."""
        answer = self._http.get(f"http://{self.host}:{self.records_port}/received", timeout=10)
        answer.raise_for_status()
        return [
            upstream.Received(r["method"], r["path"], r["headers"], base64.b64decode(r["body"]))
            for r in answer.json()
        ]

    def stop(self) -> None:
        """Close its stdin (it stops by itself); kill it if it does not."""
        self._http.close()
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def remote_upstream(
    netns_host: NetnsHost, rt_proxy: Undoproxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NetnsUpstream]:
    """The echo upstream on the test host, for the clients that never proxy loopback (Go,
    Ruby, JVMs, axios): a certificate for the namespace's address from the same CA as
    public_cert's, so they trust it the same way."""
    directory = tmp_path_factory.mktemp("test-host")
    server = NetnsUpstream(
        netns_host, issue_cert(rt_proxy, directory, netns_host.address), directory
    ).start()
    yield server
    server.stop()


def received(server: ThreadedServer | NetnsUpstream) -> list[upstream.Received]:
    """What an upstream, in this process or on the test host, has received so far."""
    if isinstance(server, NetnsUpstream):
        return server.received()
    return server.app[upstream.RECEIVED]


def agent_env(
    proxy: Undoproxy, session: str, shell_env: dict[str, str] | None = None
) -> dict[str, str]:
    """os.environ without proxy/CA settings, plus what `undoproxy env --session` prints."""
    run = proxy.cli("env", "--session", session, "--shell", "json")
    assert run.returncode == 0, run.stderr
    base = {k: v for k, v in os.environ.items() if k.upper() not in _CLEARED}
    return {**base, **json.loads(run.stdout), **(shell_env or {})}


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
    return lambda: [s["url"] for s in proxy.steps(session) if marker in s["url"]]


PYTHON = sys.executable
