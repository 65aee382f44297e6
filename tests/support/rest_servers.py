"""Real REST servers this project never wrote, for proving rollback's verdicts on them:

- json-server (npm, installed by `.ci/run` into .venv/node): a plain REST API over a JSON
  file, the shape most agent-facing CRUD APIs have (201 + Location on POST, PUT replaces,
  PATCH merges, DELETE answers `{}`; a PUT to a missing id is 404, so a deleted resource
  comes back by POST to its collection, at its own URL);
- Kinto (PyPI, installed by `.ci/run` into its own venv .venv/kinto: its dependencies are not
  the proxy's): records inside `{"data": …}` whose `last_modified` the server sets on every
  write, tombstones on DELETE, ETags of that timestamp, Basic auth (any user, its own data).

Each is started on a free loopback port (plain HTTP: the agent reaches it through undoproxy)
and stopped by the test's fixture; `skip_or_fail` when it is not installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests

from tests.support.ci import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / ".venv" / "node" / "node_modules"
KINTO = ROOT / ".venv" / "kinto" / "bin" / "kinto"
KINTO_USER = ("agent", "kinto-SECRET-3")

KINTO_INI = """\
[app:main]
use = egg:kinto
kinto.storage_backend = kinto.core.storage.memory
kinto.storage_url =
kinto.cache_backend = kinto.core.cache.memory
kinto.cache_url =
kinto.permission_backend = kinto.core.permission.memory
kinto.permission_url =
kinto.userid_hmac_secret = undoproxy-tests-only
multiauth.policies = basicauth
kinto.bucket_create_principals = system.Authenticated

[server:main]
use = egg:waitress#main
host = 127.0.0.1
port = %(http_port)s

[loggers]
keys = root
[handlers]
keys = console
[formatters]
keys = generic
[logger_root]
level = WARNING
handlers = console
[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = WARNING
formatter = generic
[formatter_generic]
format = %(message)s
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process on a free port; `base_url` is http://127.0.0.1:PORT."""

    def __init__(self, command: list[str], port: int, ready_path: str, **popen: object) -> None:
        self.command = command
        self.port = port
        self.ready_path = ready_path
        self.popen = popen
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60, auth: tuple[str, str] | None = None) -> Server:
        """Start and wait until `ready_path` answers."""
        self.proc = subprocess.Popen(  # type: ignore[call-overload]
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **self.popen,
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.command[0]} did not start:\n" + "".join(self.output))
            try:
                if requests.get(self.base_url + self.ready_path, auth=auth, timeout=5).ok:
                    return self
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.command[0]} did not answer:\n" + "".join(self.output))
            time.sleep(0.2)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self) -> None:
        """Terminate and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def json_server(db: dict[str, object]) -> Server:
    """json-server over a copy of `db` (collection -> items), started."""
    script = NODE_MODULES / "json-server" / "lib" / "cli" / "bin.js"
    node = shutil.which("node")
    if node is None or not script.is_file():
        skip_or_fail(f"json-server (npm json-server@0.17) is not in {NODE_MODULES}: .ci/run")
    import json

    folder = Path(tempfile.mkdtemp(prefix="json-server-"))
    (folder / "db.json").write_text(json.dumps(db))
    port = _free_port()
    first = next(iter(db))
    return Server(
        [node, str(script), "--port", str(port), "--host", "127.0.0.1", "--quiet", "db.json"],
        port,
        f"/{first}",
        cwd=str(folder),
    ).start()


def kinto() -> Server:
    """Kinto on in-memory storage, Basic auth, started; the agent's bucket and collection
    (`/v1/buckets/b/collections/c`) are created."""
    if not KINTO.is_file():
        skip_or_fail(f"Kinto is not installed in {KINTO.parent.parent}: .ci/run installs it")
    folder = Path(tempfile.mkdtemp(prefix="kinto-"))
    (folder / "kinto.ini").write_text(KINTO_INI)
    port = _free_port()
    server = Server(
        [str(KINTO), "start", "--ini", str(folder / "kinto.ini"), "--port", str(port)],
        port,
        "/v1/",
        cwd=str(folder),
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    ).start(auth=KINTO_USER)
    for path in ("/v1/buckets/b", "/v1/buckets/b/collections/c"):
        r = requests.put(server.base_url + path, json={}, auth=KINTO_USER, timeout=10)
        assert r.status_code in (200, 201), r.text
    return server
