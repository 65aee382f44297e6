"""The CA bundle handed to agents: the system's CAs plus undoproxy's, so that hosts which
bypass the proxy (NO_PROXY) still verify while proxied ones verify against undoproxy's CA."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
from mitmproxy import certs

CA_CERT_NAME = "mitmproxy-ca-cert.pem"  # written by mitmproxy's tlsconfig in the state dir
BUNDLE_NAME = "ca-bundle.pem"


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
    tmp = bundle.with_suffix(".tmp")
    tmp.write_text(system.rstrip("\n") + "\n\n# undoproxy CA\n" + ours)
    tmp.replace(bundle)
    return bundle
