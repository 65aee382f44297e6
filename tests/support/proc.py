"""A real `undoproxy run` in a subprocess, on ephemeral ports, with its own state dir."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests
import yaml

_ADDR = re.compile(r"^\s+(proxy|admin)\s+http://([\d.]+):(\d+)", re.M)


class Undoproxy:
    """Start with `Undoproxy(tmp_path, config_text).start()`; stop() checks a clean exit."""

    def __init__(
        self,
        directory: Path,
        config: dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = directory / "state"
        self.config_path = directory / "config.yaml"
        base = {
            "proxy": {"listen": "127.0.0.1:0", "upstream_insecure": True},
            "admin": {"listen": "127.0.0.1:0"},
            "state_dir": str(self.state_dir),
            "store": {"path": str(directory / "journal.db")},
        }
        merged = _deep_merge(base, config or {})
        if merged["store"].get("url"):  # a PostgreSQL journal instead of the SQLite file
            merged["store"].pop("path", None)
        self.config_path.write_text(yaml.safe_dump(merged, sort_keys=False))
        self.extra_env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.proxy_port = self.admin_port = 0

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 30) -> Undoproxy:
        """Start and wait for the banner; raise with the output if it does not come."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "undoproxy", "run", "-c", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **self.extra_env},
        )
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.2)
                raise RuntimeError("undoproxy did not start:\n" + "".join(self.output))
        return self

    def _read(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            text = "".join(self.output)
            found = dict((m[0], int(m[2])) for m in _ADDR.findall(text))
            # Ready once the whole banner is in: its last line (tests read the agent's line).
            whole = "Stop: Ctrl-C" in line
            if whole and "proxy" in found and "admin" in found and not ready.is_set():
                self.proxy_port, self.admin_port = found["proxy"], found["admin"]
                ready.set()

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def kill(self) -> None:
        """SIGKILL (kill -9): no cleanup of any kind."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(15)

    # --- what tests use ------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The admin token undoproxy generated."""
        return (self.state_dir / "admin-token").read_text().strip()

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def ca_bundle(self) -> str:
        return str(self.state_dir / "ca-bundle.pem")

    def proxy_url(self, session: str | None = None, token: str = "x") -> str:
        """The proxy URL, with session credentials when a session is given."""
        creds = f"{session}:{token}@" if session else ""
        return f"http://{creds}127.0.0.1:{self.proxy_port}"

    def proxies(self, session: str | None = None, token: str = "x") -> dict[str, str]:
        """`proxies=` for requests."""
        url = self.proxy_url(session, token)
        return {"http": url, "https": url}

    def agent(
        self, session: str | None, token: str = "x", headers: dict[str, str] | None = None
    ) -> requests.Session:
        """An agent's requests session through this proxy, trusting its CA bundle only."""
        s = requests.Session()
        s.trust_env = False  # ignore NO_PROXY and friends from the machine
        s.proxies = self.proxies(session, token)
        s.verify = self.ca_bundle
        s.headers.update(headers or {})
        return s

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Call the admin API with the admin token."""
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return requests.request(
            method, self.admin_url + path, headers=headers, timeout=30, **kwargs
        )

    def steps(self, session: str) -> list[dict[str, Any]]:
        """The session's steps, oldest first (GET /api/sessions/{id}; it must answer 200)."""
        r = self.api("GET", f"/api/sessions/{session}")
        assert r.status_code == 200, r.text
        return list(r.json()["steps"])

    def rollback(self, session: str, **body: Any) -> dict[str, Any]:
        """POST the session's rollback (`body`: force, dry_run) and return its report (it must
        answer 200)."""
        r = self.api("POST", f"/api/sessions/{session}/rollback", json=body)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def cli_env(self) -> dict[str, str]:
        """Environment for running the CLI against this instance."""
        return {
            **os.environ,
            "UNDOPROXY_ADMIN": self.admin_url,
            "UNDOPROXY_ADMIN_TOKEN": self.token,
        }

    def cli(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run `undoproxy ARGS` against this instance."""
        return run_cli(*args, env=env or self.cli_env(), timeout=timeout)


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `undoproxy ARGS` (python -m undoproxy) to the end; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "undoproxy", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
