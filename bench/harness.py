"""Processes, ports and the admin API for the benchmarks: the upstream, mitmdump and undoproxy.

Every process is a real subprocess on 127.0.0.1 with its own temporary directory, used as a
context manager so that nothing outlives a benchmark, even a failed one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import noise
import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MITMDUMP = Path(sys.executable).parent / "mitmdump"
CA_CERT = "mitmproxy-ca-cert.pem"  # what mitmproxy's tlsconfig writes in its confdir
_ADDR = re.compile(r"^\s+(proxy|admin)\s+http://([\d.]+):(\d+)", re.M)


class BrokenRun(Exception):
    """The run is invalid (a process failed, counts do not add up): `make bench` exits 1."""


class NotAvailable(Exception):
    """The feature a benchmark measures is not implemented yet: reported, not a failure."""


def self_signed(directory: Path) -> tuple[Path, Path]:
    """cert.pem and key.pem for 127.0.0.1, made by the tests' own helper."""
    spec = importlib.util.spec_from_file_location(
        "bench_certs", ROOT / "tests" / "support" / "certs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cert, key = module.self_signed(directory)
    return Path(cert), Path(key)


def free_port() -> int:
    """An ephemeral port that was free a moment ago (for mitmdump, which cannot report one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, child: Child, timeout: float = 30) -> None:
    """Return once 127.0.0.1:port accepts connections; BrokenRun if the child dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise BrokenRun(f"{child.name} exited during start-up:\n{child.tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise BrokenRun(f"{child.name} did not listen on {port} within {timeout:g}s:\n{child.tail()}")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MiB (VmRSS from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BrokenRun(f"no VmRSS for pid {pid}")


class Child:
    """A subprocess whose output is drained by a thread (so it never blocks on a full pipe)."""

    name = "process"

    def __init__(self, argv: list[str], *, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        noise.track(self.proc.pid)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def tail(self, n: int = 30) -> str:
        """The last lines the process printed."""
        return "".join(self.lines[-n:])

    def wait_for_line(self, pattern: re.Pattern[str], timeout: float = 30) -> re.Match[str]:
        """The first match of `pattern` in the output so far; BrokenRun if it does not come."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.search("".join(self.lines))
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise BrokenRun(f"{self.name} did not start:\n{self.tail()}")

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        noise.untrack(self.proc.pid)
        return self.proc.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        code = self.stop()
        if kind is None and code not in (0, -signal.SIGTERM):
            raise BrokenRun(f"{self.name} exited with {code}:\n{self.tail()}")


class Upstream(Child):
    """bench/upstream.py in its own process: `http_url` and `https_url` once started."""

    name = "upstream"

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.cert, key = self_signed(directory)
        super().__init__([sys.executable, str(BENCH / "upstream.py"), str(self.cert), str(key)])
        ports = json.loads(self.wait_for_line(re.compile(r"^\{.*\}$", re.M)).group(0))
        self.http_url = f"http://127.0.0.1:{ports['http']}"
        self.https_url = f"https://127.0.0.1:{ports['https']}"

    def base(self, scheme: str) -> str:
        """The upstream's base URL for `http` or `https`."""
        return self.https_url if scheme == "https" else self.http_url

    def call(self, method: str, path: str) -> Any:
        """A request straight to the upstream (plain HTTP), its JSON answer."""
        status, body = http_json(method, self.http_url + path)
        if status >= 300:
            raise BrokenRun(f"upstream {method} {path} answered {status}: {body}")
        return body


class Mitmdump(Child):
    """Bare mitmproxy: `mitmdump -q` with no scripts and the same options undoproxy uses."""

    name = "mitmdump"

    def __init__(self, directory: Path, options: tuple[str, ...] = ()) -> None:
        """`options`: more `--set NAME=VALUE` (e.g. `stream_large_bodies=1` to stream)."""
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.cafile = str(directory / CA_CERT)
        super().__init__(
            [
                str(MITMDUMP),
                "-q",
                "--listen-host",
                "127.0.0.1",
                "--listen-port",
                str(self.port),
                "--set",
                "connection_strategy=lazy",
                "--set",
                "ssl_insecure=true",
                "--set",
                f"confdir={directory}",
                *(arg for option in options for arg in ("--set", option)),
            ]
        )
        wait_listening(self.port, self)
        self.proxy_url = f"http://127.0.0.1:{self.port}"


class Undoproxy(Child):
    """`python -m undoproxy run -c <config>`: default config plus `rules`, ephemeral ports."""

    name = "undoproxy"

    def __init__(
        self,
        directory: Path,
        rules: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        launcher: list[str] | None = None,
    ) -> None:
        """`launcher` replaces `python -m undoproxy` (bench/nochain.py for the chain's cost)."""
        directory.mkdir(parents=True, exist_ok=True)
        self.state_dir = directory / "state"
        config: dict[str, Any] = {
            "proxy": {"listen": "127.0.0.1:0", "upstream_insecure": True},
            "admin": {"listen": "127.0.0.1:0"},
            "state_dir": str(self.state_dir),
            "store": {"path": str(directory / "journal.db")},
            "approvals": {"timeout": "600s"},
            "rules": rules or [],
            **(extra or {}),
        }
        self.config_path = directory / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = launcher or [sys.executable, "-m", "undoproxy"]
        super().__init__([*command, "run", "-c", str(self.config_path)], cwd=ROOT)
        deadline = time.monotonic() + 30
        found: dict[str, int] = {}
        while len(found) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BrokenRun(f"undoproxy did not start:\n{self.tail()}")
            time.sleep(0.05)
            found = {m[0]: int(m[2]) for m in _ADDR.findall("".join(self.lines))}
        self.port, self.admin_port = found["proxy"], found["admin"]
        self.proxy_url = f"http://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        self.cafile = str(self.state_dir / CA_CERT)
        self.token = (self.state_dir / "admin-token").read_text().strip()

    def api(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        """Call the admin API; its JSON answer, or NotAvailable for 404/405 on a route."""
        status, answer = self.api_status(method, path, body, timeout)
        if status in (404, 405):  # the route does not exist (yet): our sessions always do
            raise NotAvailable(f"{method} {path} answered {status}")
        if status >= 300:
            raise BrokenRun(f"admin API {method} {path} answered {status}: {answer}")
        return answer

    def api_status(
        self, method: str, path: str, body: Any = None, timeout: float = 60
    ) -> tuple[int, Any]:
        """Call the admin API; (status, JSON answer or text)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return http_json(method, self.admin_url + path, body, headers, timeout)

    def steps(self, session: str) -> list[dict[str, Any]]:
        """Every step of a session, page after page (the API answers 1,000 at a time)."""
        steps: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = "?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            status, answer = self.api_status("GET", f"/api/sessions/{session}{query}")
            if status != 200:
                raise BrokenRun(f"session {session}: admin API answered {status}: {answer}")
            steps += answer["steps"]
            cursor = answer.get("next")
            if not cursor:
                return steps

    def rss_mb(self) -> float:
        """undoproxy's resident memory in MiB."""
        return rss_mb(self.proc.pid)


def http_json(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[int, Any]:
    """A plain stdlib HTTP call (no proxy): (status, parsed JSON or text)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text
