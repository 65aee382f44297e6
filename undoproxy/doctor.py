"""`undoproxy doctor`: run clients under the agent environment and name those that slip past.

How a bypass is seen: a TLS "canary" server listens on this machine (its own non-loopback
address when it has one, since Go, Ruby, axios and JVMs never proxy loopback; else 127.0.0.2,
which NO_PROXY does not name), one port per probe, with a certificate from a private CA that
nothing trusts. Each probe (or the given command, with `{canary}` in its arguments or
$UNDOPROXY_CANARY_URL) calls its canary URL. Then:

    a step with that URL is in undoproxy's journal    went through undoproxy        ok
    the canary saw a connection, the journal did not   went around undoproxy         BYPASS
    neither, and the client reported a TLS failure     does not trust undoproxy's CA TRUST
    neither, otherwise                                 failed (its last words shown) FAILED

A client that goes around undoproxy meets the untrusted canary certificate and fails: nothing
is ever sent to the canary but a TLS handshake. For a command (`doctor -- CMD`), the
connections its processes open are also watched (Linux /proc): any that goes to another
address than undoproxy's is named, whatever host it was for.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CANARY_ENV = "UNDOPROXY_CANARY_URL"

# Which runtime a TLS failure message comes from, and how to fix it.
TRUST_FAILURES: list[tuple[str, str, str]] = [
    ("PKIX path building failed", "java", "JAVA_TOOL_OPTIONS (truststore) from `undoproxy env`"),
    (
        "SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT|self.signed certificate in",
        "node",
        "NODE_EXTRA_CA_CERTS from `undoproxy env`",
    ),
    ("x509: certificate signed by unknown authority", "go", "SSL_CERT_FILE from `undoproxy env`"),
    ("GnuTLS|not trusted|ERROR: cannot verify", "wget", "WGETRC from `undoproxy env`"),
    (
        "SSL certificate problem",
        "curl/libcurl (curl, git, PHP)",
        "CURL_CA_BUNDLE, GIT_SSL_CAINFO, PHP_INI_SCAN_DIR from `undoproxy env`",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED|certificate verify failed",
        "Python/Ruby (OpenSSL)",
        "SSL_CERT_FILE and REQUESTS_CA_BUNDLE from `undoproxy env`; stripe-python also needs "
        "stripe.ca_bundle_path = os.environ['SSL_CERT_FILE']",
    ),
]

# Fixes for a client that went around the proxy.
BYPASS_FIXES: dict[str, str] = {
    "curl": "HTTPS_PROXY from `undoproxy env` (and check NO_PROXY)",
    "wget": "https_proxy from `undoproxy env` (and check no_proxy)",
    "python": "HTTPS_PROXY from `undoproxy env`; aiohttp needs ClientSession(trust_env=True)",
    "node": "NODE_OPTIONS (fetch and https preload) from `undoproxy env`, or Node >= 22.21 "
    "with NODE_USE_ENV_PROXY=1; a library with an agent of its own needs a proxy agent "
    "(https-proxy-agent)",
    "java": "JAVA_TOOL_OPTIONS from `undoproxy env --session ID`; code that sets its own "
    "ProxySelector must use ProxySelector.getDefault()",
    "go": "HTTPS_PROXY from `undoproxy env` (Go never proxies loopback addresses)",
    "ruby": "https_proxy from `undoproxy env` (Ruby never proxies 127.x addresses)",
    "php": "https_proxy from `undoproxy env` reaches curl; PHP streams "
    "(file_get_contents) need a stream context with 'proxy'",
}
GENERIC_BYPASS_FIX = (
    "this client ignores HTTPS_PROXY: configure its proxy in code, or point it at the "
    "session's own port ($UNDOPROXY_SESSION_PROXY); see docs/clients.md"
)


@dataclass(frozen=True)
class Probe:
    """One client: how to GET a URL with it, and which runtime it is (for the fix)."""

    name: str
    runtime: str
    argv: Callable[[str, Path], list[str]]
    tool: str


_JAVA = """\
public class Probe {
    public static void main(String[] args) throws Exception {
        java.net.http.HttpClient.newHttpClient().send(
            java.net.http.HttpRequest.newBuilder(java.net.URI.create(args[0])).build(),
            java.net.http.HttpResponse.BodyHandlers.discarding());
    }
}
"""
_GO = """\
package main

import (
\t"fmt"
\t"net/http"
\t"os"
)

func main() {
\tif _, err := http.Get(os.Args[1]); err != nil {
\t\tfmt.Fprintln(os.Stderr, err)
\t\tos.Exit(1)
\t}
}
"""


def _file(name: str, text: str, *argv: str) -> Callable[[str, Path], list[str]]:
    def build(url: str, tmp: Path) -> list[str]:
        (tmp / name).write_text(text)
        return [a.replace("{file}", str(tmp / name)) for a in argv] + [url]

    return build


_PHP = (
    "$c = curl_init($argv[1]); curl_setopt($c, CURLOPT_RETURNTRANSFER, true);"
    "if (curl_exec($c) === false) { fwrite(STDERR, curl_error($c)); exit(1); }"
)


def _runtime_of(argv: Sequence[str]) -> str:
    """The runtime a command runs on, from its program's name (for the fix to suggest)."""
    program = Path(argv[0]).name if argv else ""
    return next((r for r in BYPASS_FIXES if program.startswith(r)), "")


def _python() -> str:
    return shutil.which("python3") or sys.executable


PROBES: list[Probe] = [
    Probe("curl", "curl", lambda u, t: ["curl", "-sS", "-o", "/dev/null", u], "curl"),
    Probe("wget", "wget", lambda u, t: ["wget", "-q", "-t", "1", "-O", "/dev/null", u], "wget"),
    Probe(
        "python urllib",
        "python",
        lambda u, t: [_python(), "-c", "import sys,urllib.request as r; r.urlopen(sys.argv[1])", u],
        "python3",
    ),
    Probe(
        "python requests",
        "python",
        lambda u, t: [_python(), "-c", "import sys,requests; requests.get(sys.argv[1])", u],
        "python3",
    ),
    Probe("node fetch", "node", lambda u, t: ["node", "-e", "fetch(process.argv[1])", u], "node"),
    Probe("java", "java", _file("Probe.java", _JAVA, "java", "{file}"), "java"),
    Probe("go", "go", _file("probe.go", _GO, "go", "run", "{file}"), "go"),
    Probe(
        "ruby",
        "ruby",
        lambda u, t: ["ruby", "-rnet/http", "-e", "Net::HTTP.get(URI(ARGV[0]))", u],
        "ruby",
    ),
    Probe(
        "php curl",
        "php",
        lambda u, t: ["php", "-r", _PHP, u],
        "php",
    ),
]


# --- the canary ------------------------------------------------------------------------------


def canary_host() -> str:
    """This machine's own non-loopback IPv4 address, else 127.0.0.2."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # TEST-NET-1: no packet is sent
            address = str(s.getsockname()[0])
        except OSError:
            address = ""
    if address and not ipaddress.ip_address(address).is_loopback and address != "0.0.0.0":
        return address
    return "127.0.0.2"


def _private_ca_context(host: str, directory: Path) -> ssl.SSLContext:
    """A server context whose certificate (for `host`) comes from a throwaway private CA."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "undoproxy doctor canary CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = directory / "canary.pem"
    pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + ca.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem)
    return context


@dataclass
class Canary:
    """One listening port that records every connection it gets."""

    host: str
    context: ssl.SSLContext
    peers: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.create_server((self.host, 0))
        self.port = int(self.sock.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, path: str) -> str:
        """The URL of `path` on this canary."""
        return f"https://{self.host}:{self.port}{path}"

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.peers.append((str(peer[0]), int(peer[1])))
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = tls.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                tls.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ncanary\n"
                )
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        """Stop listening."""
        self.sock.close()


# --- watching a command's connections (Linux) ------------------------------------------------


def _tree(root: int) -> set[int]:
    """`root` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def _remote_endpoints(pids: set[int]) -> set[tuple[str, int]]:
    """Remote (address, port) of the TCP connections the processes `pids` hold open."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    found: set[tuple[str, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[9] not in inodes or cols[3] == "0A":  # 0A: listening
                continue
            address, port = cols[2].split(":")
            raw = bytes.fromhex(address)
            # /proc stores each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(raw)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            found.add((str(ip), int(port, 16)))
    return found


# --- running -------------------------------------------------------------------------------


@dataclass
class Finding:
    """What one probe (or the command) did."""

    name: str
    verdict: str  # ok | BYPASS | TRUST | FAILED | skip
    detail: str
    fix: str = ""


def _trust_failure(output: str) -> tuple[str, str] | None:
    for pattern, runtime, fix in TRUST_FAILURES:
        if re.search(pattern, output):
            return runtime, fix
    return None


def _last_words(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


@dataclass
class Doctor:
    """Runs probes or a command under `env` and judges each by the canary and the journal."""

    env: dict[str, str]
    steps: Callable[[], list[dict[str, Any]]]  # the session's steps, from the admin API
    proxy_ports: set[int]
    host: str = field(default_factory=canary_host)
    nonce: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout: float = 60.0

    def __post_init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="undoproxy-doctor-"))
        self.context = _private_ca_context(self.host, self._dir)

    def _judge(
        self, name: str, runtime: str, canary: Canary, path: str, rc: int, out: str
    ) -> Finding:
        time.sleep(0.2)  # let undoproxy's journal writer catch up
        if any(path in s["url"] for s in self.steps()):
            return Finding(name, "ok", "went through undoproxy into the session")
        if canary.peers:
            fix = BYPASS_FIXES.get(runtime, GENERIC_BYPASS_FIX)
            return Finding(name, "BYPASS", "went around undoproxy (the canary saw it)", fix)
        trust = _trust_failure(out)
        if trust is not None:
            return Finding(
                name, "TRUST", f"does not trust undoproxy's CA: {_last_words(out)}", trust[1]
            )
        return Finding(name, "FAILED", f"exit {rc}: {_last_words(out)}")

    def probe(self, probe: Probe) -> Finding:
        """Run one probe against its own canary."""
        if shutil.which(probe.tool) is None:
            return Finding(probe.name, "skip", f"{probe.tool} not installed")
        canary = Canary(self.host, self.context)
        path = f"/undoproxy-doctor/{self.nonce}/{quote(probe.name.replace(' ', '-'))}"
        try:
            work = Path(tempfile.mkdtemp(dir=self._dir))
            try:
                done = subprocess.run(
                    probe.argv(canary.url(path), work),
                    capture_output=True,
                    text=True,
                    env=self.env,
                    timeout=self.timeout,
                    stdin=subprocess.DEVNULL,
                    cwd=work,
                )
                rc, out = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                rc, out = -1, f"timed out after {self.timeout:.0f}s"
            if "No module named" in out:
                return Finding(probe.name, "skip", _last_words(out))
            return self._judge(probe.name, probe.runtime, canary, path, rc, out)
        finally:
            canary.close()

    def command(self, argv: Sequence[str]) -> tuple[list[Finding], int]:
        """Run the user's command once; its findings and its exit status."""
        canary = Canary(self.host, self.context)
        path = f"/undoproxy-doctor/{self.nonce}/command"
        url = canary.url(path)
        env = {**self.env, CANARY_ENV: url}
        seen: set[tuple[str, int]] = set()
        try:
            proc = subprocess.Popen(
                [a.replace("{canary}", url) for a in argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            output: list[str] = []
            reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
            reader.start()
            while proc.poll() is None:
                if sys.platform.startswith("linux"):
                    seen |= _remote_endpoints(_tree(proc.pid))
                time.sleep(0.02)
            reader.join(5)
            out = "".join(output)
            findings = []
            time.sleep(0.2)  # let undoproxy's journal writer catch up
            used = any("{canary}" in a for a in argv) or canary.peers
            if used or any(path in s["url"] for s in self.steps()):
                findings.append(
                    self._judge(
                        "canary request", _runtime_of(argv), canary, path, proc.returncode, out
                    )
                )
            # Loopback is NO_PROXY by design (undoproxy itself, local services).
            direct = sorted((h, p) for h, p in seen if not ipaddress.ip_address(h).is_loopback)
            for h, p in direct:
                if (h, p) == (self.host, canary.port):
                    continue  # judged above, by the canary and the journal
                fix = BYPASS_FIXES.get(_runtime_of(argv), GENERIC_BYPASS_FIX)
                findings.append(
                    Finding(f"{h}:{p}", "BYPASS", "a direct connection, not through undoproxy", fix)
                )
            trust = _trust_failure(out)
            if trust is not None and not any(f.verdict == "TRUST" for f in findings):
                why = f"does not trust undoproxy's CA: {_last_words(out)}"
                findings.append(Finding(trust[0], "TRUST", why, trust[1]))
            if not findings:
                findings.append(
                    Finding(
                        "command",
                        "ok",
                        f"exit {proc.returncode}; no connection went around undoproxy",
                    )
                )
            sys.stdout.write(out)
            return findings, proc.returncode
        finally:
            canary.close()

    def close(self) -> None:
        """Remove the canary's files."""
        shutil.rmtree(self._dir, ignore_errors=True)


def report(findings: list[Finding]) -> str:
    """The findings as the aligned lines `doctor` prints."""
    width = max((len(f.name) for f in findings), default=0)
    lines = []
    for f in findings:
        lines.append(f"  {f.verdict:<7} {f.name:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"  {'':<7} {'':<{width}}  fix: {f.fix}")
    return "\n".join(lines)
