"""What `doctor` runs, and what it tells: one probe per runtime, and the fix for each kind of
failure (TLS trust, by the client's error message; bypass, by runtime)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

CANARY_ENV = "UNDOPROXY_CANARY_URL"

# Fixes for a client that refused undoproxy's certificate (a TLS alert), by runtime.
TRUST_FIXES: dict[str, str] = {
    "curl": "CURL_CA_BUNDLE from `undoproxy env`",
    "wget": "WGETRC from `undoproxy env`",
    "python": "SSL_CERT_FILE and REQUESTS_CA_BUNDLE from `undoproxy env`; stripe-python also "
    "needs stripe.ca_bundle_path = os.environ['SSL_CERT_FILE']",
    "node": "NODE_EXTRA_CA_CERTS from `undoproxy env`",
    "java": "JAVA_TOOL_OPTIONS (truststore) from `undoproxy env`",
    "go": "SSL_CERT_FILE from `undoproxy env`",
    "ruby": "SSL_CERT_FILE from `undoproxy env`",
    "php": "CURL_CA_BUNDLE and PHP_INI_SCAN_DIR from `undoproxy env`",
    "git": "GIT_SSL_CAINFO from `undoproxy env`",
}
GENERIC_TRUST_FIX = (
    "the CA variables from `undoproxy env` (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, "
    "NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, ...): docs/clients.md names the one each runtime reads"
)

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
    # A command that exits 0 when the probe can run here (a library is installed); else skip.
    check: Callable[[], list[str]] | None = None


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


def runtime_of(argv: Sequence[str]) -> str:
    """The runtime a command runs on, from its program's name (for the fix to suggest); an
    `env [-u NAME] [NAME=value]...` in front is looked through."""
    args = list(argv)
    if args and Path(args[0]).name == "env":
        args.pop(0)
        while args and (args[0].startswith("-") or "=" in args[0]):
            takes_value = args.pop(0) in ("-u", "--unset", "-C", "--chdir")
            if takes_value and args:
                args.pop(0)
    program = Path(args[0]).name if args else ""
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
        check=lambda: [_python(), "-c", "import requests"],
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
