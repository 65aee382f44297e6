"""Print the Secret the manifests of deploy/kubernetes/ read (apply it with kubectl).

    python3 deploy/kubernetes/make-secret.py | kubectl apply -f -
    docker run --rm -i --entrypoint python3 undoproxy - < deploy/kubernetes/make-secret.py \
        | kubectl apply -f -            # with the image's Python, when undoproxy is not installed

New values each run: the CA agents trust (mitmproxy-ca.pem with its key, mitmproxy-ca-cert.pem),
the credentials key, the admin token and PostgreSQL's password. `--state-dir DIR` takes the CA,
the key and the token from an existing undoproxy's state dir instead (its agents keep trusting
the same CA). Keep the Secret as you keep the journal: without its credentials key no rollback
of the journal's steps can authenticate. Run it where undoproxy is installed: the CA is made by
undoproxy's own code, as `undoproxy run` makes it in a new state dir.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import sys
import tempfile
from pathlib import Path

import yaml
from cryptography.fernet import Fernet

from undoproxy.cabundle import CA_CERT_NAME, ensure_ca

CA_KEY_NAME = "mitmproxy-ca.pem"  # the CA's key and certificate, as undoproxy keeps them


def values(state_dir: Path | None) -> dict[str, bytes]:
    """Every key of the Secret, from `state_dir` where it has them, else new."""
    found: dict[str, bytes] = {}
    if state_dir is not None:
        for key, name in (
            (CA_KEY_NAME, CA_KEY_NAME),
            (CA_CERT_NAME, CA_CERT_NAME),
            ("credentials-key", "credentials.key"),
            ("admin-token", "admin-token"),
        ):
            path = state_dir / name
            if path.is_file():
                found[key] = path.read_bytes().strip() + (b"\n" if key.endswith(".pem") else b"")
        if (CA_KEY_NAME in found) != (CA_CERT_NAME in found):
            sys.exit(f"{state_dir} has only one of {CA_KEY_NAME} and {CA_CERT_NAME}")
    if CA_KEY_NAME not in found:
        with tempfile.TemporaryDirectory() as tmp:
            cert = ensure_ca(Path(tmp))
            found[CA_KEY_NAME] = (Path(tmp) / CA_KEY_NAME).read_bytes()
            found[CA_CERT_NAME] = cert.read_bytes()
    found.setdefault("credentials-key", Fernet.generate_key())
    found.setdefault("admin-token", secrets.token_urlsafe(32).encode())
    found["postgres-password"] = secrets.token_urlsafe(32).encode()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="undoproxy", help="the Secret's name (undoproxy)")
    parser.add_argument("--namespace", default="undoproxy", help="its namespace (undoproxy)")
    parser.add_argument("--state-dir", type=Path, help="take the CA, key and token from here")
    args = parser.parse_args()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": args.name,
            "namespace": args.namespace,
            "labels": {"app.kubernetes.io/name": "undoproxy"},
        },
        "type": "Opaque",
        "data": {
            k: base64.b64encode(v).decode() for k, v in sorted(values(args.state_dir).items())
        },
    }
    sys.stdout.write(yaml.safe_dump(secret, sort_keys=False))


if __name__ == "__main__":
    main()
