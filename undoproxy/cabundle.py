"""The CA bundle handed to agents: the system's CAs plus undoproxy's, so that hosts which
bypass the proxy (NO_PROXY) still verify while proxied ones verify against undoproxy's CA."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import certifi
from mitmproxy import certs

from undoproxy.runtimes import truststore

CA_CERT_NAME = "mitmproxy-ca-cert.pem"  # written by mitmproxy's tlsconfig in the state dir
BUNDLE_NAME = "ca-bundle.pem"
TRUSTSTORE_NAME = "truststore.p12"  # the same certificates, for JVMs (truststore.PASSWORD)
WGETRC_NAME = "wgetrc"  # wget (GnuTLS) ignores SSL_CERT_FILE: it reads ca_certificate from here
PHP_INI_DIR = "php"  # PHP's curl ignores SSL_CERT_FILE: curl.cainfo in an extra ini there


def ensure_ca(state_dir: Path) -> Path:
    """Create the CA on first start (as mitmproxy's tlsconfig would); return the public cert."""
    certs.CertStore.from_store(str(state_dir), "mitmproxy", 2048)
    return state_dir / CA_CERT_NAME


def system_cafile() -> Path:
    """The system's CA file, else certifi's."""
    for candidate in (
        ssl.get_default_verify_paths().cafile,
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return Path(certifi.where())


def write_bundle(state_dir: Path) -> Path:
    """(Re)write `<state_dir>/ca-bundle.pem` and return its path."""
    ours = (state_dir / CA_CERT_NAME).read_text()
    system = system_cafile().read_text()
    bundle = state_dir / BUNDLE_NAME
    tmp = _tmp(bundle)
    tmp.write_text(system.rstrip("\n") + "\n\n# undoproxy CA\n" + ours)
    tmp.replace(bundle)
    _write(state_dir / TRUSTSTORE_NAME, truststore.truststore(bundle.read_bytes()))
    # Proxies come from the environment (https_proxy, no_proxy), as for every other client.
    _write(state_dir / WGETRC_NAME, f"ca_certificate = {bundle}\n".encode())
    (state_dir / PHP_INI_DIR).mkdir(exist_ok=True)
    ini = f'curl.cainfo = "{bundle}"\nopenssl.cafile = "{bundle}"\n'
    _write(state_dir / PHP_INI_DIR / "undoproxy.ini", ini.encode())
    return bundle


def _write(path: Path, data: bytes) -> None:
    tmp = _tmp(path)
    tmp.write_bytes(data)
    tmp.replace(path)


def _tmp(path: Path) -> Path:
    """A temporary name next to `path`, this process's own: replicas sharing a state dir may
    start at once, and each must replace the file with a whole one of its own."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")
