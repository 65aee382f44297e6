"""A real Matrix homeserver (Synapse, from PyPI) on 127.0.0.1, SQLite, for the matrix pack's tests.

Synapse runs from its own virtualenv (its dependencies are not the proxy's): `.ci/run` creates
`.venv/synapse` with `pip install matrix-synapse`; `UNDOPROXY_SYNAPSE_PYTHON` may name another
interpreter that has it. Without one the tests skip locally and fail in CI
(`tests.support.ci.skip_or_fail`).

Each `Synapse` has its own directory: a config written here (client API only, plain HTTP on
a free loopback port, no federation, rate limits raised for tests), a fresh signing key and
database. Users are registered through the shared-secret admin API (`register()`), and
`direct()` calls the client API as a user without the proxy: what the tests read as the truth.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRET = "undoproxy-tests-shared-secret"
_UNLIMITED = {"per_second": 1000, "burst_count": 1000}


def synapse_python() -> str | None:
    """The interpreter Synapse is installed in, or None."""
    named = os.environ.get("UNDOPROXY_SYNAPSE_PYTHON")
    candidates = [Path(named)] if named else [ROOT / ".venv" / "synapse" / "bin" / "python"]
    for python in candidates:
        if python.is_file() and os.access(python, os.X_OK):
            return str(python)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Synapse:
    """`Synapse(python, directory).start()`; `stop()` ends it."""

    def __init__(self, python: str, directory: Path) -> None:
        self.python = python
        self.dir = directory
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config_path = directory / "homeserver.yaml"
        self.proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> dict[str, Any]:
        return {
            "server_name": "localhost",
            "pid_file": str(self.dir / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.dir / "hs.db")}},
            "media_store_path": str(self.dir / "media"),
            "signing_key_path": str(self.dir / "signing.key"),
            "registration_shared_secret": SECRET,
            "macaroon_secret_key": "undoproxy-tests-macaroon",
            "form_secret": "undoproxy-tests-form",
            "report_stats": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "enable_metrics": False,
            "rc_message": _UNLIMITED,
            "rc_registration": _UNLIMITED,
            "rc_admin_redaction": _UNLIMITED,
            "rc_login": {k: _UNLIMITED for k in ("address", "account", "failed_attempts")},
            "rc_joins": {"local": _UNLIMITED},
        }

    def start(self, timeout: float = 90) -> Synapse:
        """Write the config and a signing key, start, wait until the client API answers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self._config()))
        base = [self.python, "-m", "synapse.app.homeserver", "-c", str(self.config_path)]
        subprocess.run([*base, "--generate-keys"], check=True, capture_output=True, timeout=120)
        log = (self.dir / "synapse.out").open("wb")
        self.proc = subprocess.Popen(base, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.base_url}/_matrix/client/versions", timeout=2).ok:
                    return self
            time.sleep(0.2)
        self.stop()
        out = (self.dir / "synapse.out").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"Synapse did not start:\n{out}")

    def stop(self) -> None:
        """Terminate it (kill after 15 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def register(self, user: str, password: str = "pw") -> str:
        """Register `user` with the shared secret; its access token."""
        url = f"{self.base_url}/_synapse/admin/v1/register"
        nonce = requests.get(url, timeout=10).json()["nonce"]
        mac = hmac.new(SECRET.encode(), digestmod=hashlib.sha1)
        for part in (nonce, user, password, "notadmin"):
            mac.update(part.encode())
            if part != "notadmin":
                mac.update(b"\x00")
        body = {"nonce": nonce, "username": user, "password": password, "mac": mac.hexdigest()}
        r = requests.post(url, json=body, timeout=30)
        r.raise_for_status()
        return str(r.json()["access_token"])

    def direct(self, token: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        """The client API as the user with `token`, without the proxy."""
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{self.base_url}/_matrix/client/v3{path}"
        return requests.request(method, url, headers=headers, timeout=30, **kwargs)


def room(room_id: str) -> str:
    """A room id as one path segment."""
    return quote(room_id, safe="")
