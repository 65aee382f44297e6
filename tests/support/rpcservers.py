"""Real servers of the RPC-shaped stores agents write to, each a subprocess on free ports:
etcd (Debian's `etcd-server`), Datasette 1.0 with its write API, Jupyter Server, and Chroma
(each from PyPI, in a virtualenv of its own under .venv/ that `.ci/run` installs: their
dependencies are not the proxy's). A missing one is skipped locally and fails in CI.

Tests read the truth straight from the server, never through undoproxy.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from tests.support.ci import skip_or_fail

VENV = Path(__file__).resolve().parents[2] / ".venv"


def free_port() -> int:
    """A TCP port nobody listens on right now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server process: `start()` waits until `ready()` answers, `stop()` ends it."""

    name = "server"

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / f"{self.name}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        """127.0.0.1:PORT, as a pack's `hosts:` or a `signing:` entry names it."""
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {}

    def ready(self) -> bool:
        try:
            return requests.get(self.base_url, timeout=2).status_code < 500
        except requests.RequestException:
            return False

    def start(self, timeout: float = 90) -> Server:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env={**os.environ, **self.env()},
            )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


def _need(path: Path | str | None, what: str) -> str:
    if path is None or not Path(path).exists():
        skip_or_fail(f"{what} is not installed ({path}): .ci/run installs it")
    return str(path)


class Etcd(Server):
    """etcd v3 (Debian's etcd-server) with its JSON gateway on http://127.0.0.1:PORT."""

    name = "etcd"

    def __init__(self, directory: Path, *, v2: bool = False) -> None:
        super().__init__(directory)
        self.peer = free_port()
        self.v2 = v2  # also serve the v2 keys API (--enable-v2)

    def command(self) -> list[str]:
        binary = _need(shutil.which("etcd"), "etcd (Debian package etcd-server)")
        peer = f"http://127.0.0.1:{self.peer}"
        return [
            binary,
            "--data-dir",
            str(self.dir / "data"),
            "--listen-client-urls",
            self.base_url,
            "--advertise-client-urls",
            self.base_url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"default={peer}",
            *(["--enable-v2=true"] if self.v2 else []),
        ]

    def ready(self) -> bool:
        try:
            return requests.post(f"{self.base_url}/v3/kv/range", json={"key": "AA=="}, timeout=2).ok
        except requests.RequestException:
            return False

    def keyspace(self) -> dict[str, tuple[str, str]]:
        """Every key, with its value and lease (what a user sees), read directly."""
        r = requests.post(
            f"{self.base_url}/v3/kv/range", json={"key": "AA==", "range_end": "AA=="}, timeout=10
        )
        r.raise_for_status()
        return {
            kv["key"]: (kv.get("value", ""), kv.get("lease", "")) for kv in r.json().get("kvs", [])
        }


def wait_until(check: Callable[[], bool], timeout: float = 30) -> None:
    """Poll `check` until it holds (a server still settling), or fail."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


class Chroma(Server):
    """Chroma's server (`chroma run`, PyPI chromadb, in .venv/chroma) on http://127.0.0.1:PORT."""

    name = "chroma"
    python = VENV / "chroma" / "bin" / "python"

    def command(self) -> list[str]:
        binary = _need(VENV / "chroma" / "bin" / "chroma", "Chroma (pip chromadb in .venv/chroma)")
        data = str(self.dir / "data")
        return [binary, "run", "--path", data, "--host", "127.0.0.1", "--port", str(self.port)]

    def ready(self) -> bool:
        try:
            return requests.get(f"{self.base_url}/api/v2/heartbeat", timeout=2).ok
        except requests.RequestException:
            return False

    @property
    def api(self) -> str:
        return f"{self.base_url}/api/v2/tenants/default_tenant/databases/default_database"

    def run_client(self, script: str, proxy: str = "") -> str:
        """Run `script` with Chroma's own Python client (`client` connected to this server),
        through the proxy `proxy` when given (HTTP_PROXY: the client is httpx); its output."""
        prelude = (
            "import chromadb, json, sys\n"
            f"client = chromadb.HttpClient(host='127.0.0.1', port={self.port})\n"
        )
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        if proxy:
            env.update(HTTP_PROXY=proxy, http_proxy=proxy, NO_PROXY="", no_proxy="")
        env["ANONYMIZED_TELEMETRY"] = "False"
        done = subprocess.run(
            [str(self.python), "-c", prelude + script],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if done.returncode != 0:
            raise AssertionError(f"the Chroma client failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def records(self, collection: str) -> dict[str, Any]:
        """Every record of a collection with everything it holds, read directly."""
        r = requests.get(f"{self.api}/collections/{collection}", timeout=10)
        if r.status_code == 404:
            return {}
        cid = r.json()["id"]
        got = requests.post(
            f"{self.api}/collections/{cid}/get",
            json={"include": ["embeddings", "metadatas", "documents", "uris"]},
            timeout=10,
        ).json()
        return {
            rid: (got["embeddings"][n], got["metadatas"][n], got["documents"][n])
            for n, rid in enumerate(got["ids"])
        }


class Datasette(Server):
    """Datasette 1.0 (PyPI, in .venv/datasette) serving `data.db` with its JSON write API on;
    `token` is an API token for the root actor (every write needs one)."""

    name = "datasette"
    SECRET = "datasette-SECRET-5"

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.db = directory / "data.db"
        self.token = ""

    def bin(self, name: str) -> str:
        return _need(
            VENV / "datasette" / "bin" / name, "Datasette (pip datasette 1.0 in .venv/datasette)"
        )

    def command(self) -> list[str]:
        import sqlite3

        with sqlite3.connect(self.db) as db:
            db.execute("create table if not exists _ready (x)")
        return [
            self.bin("datasette"),
            str(self.db),
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--secret",
            self.SECRET,
            "--root",
        ]

    def start(self, timeout: float = 90) -> Datasette:
        super().start(timeout)
        self.token = subprocess.run(
            [self.bin("datasette"), "create-token", "root", "--secret", self.SECRET],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return self

    def sql(self, statement: str) -> None:
        """Run SQL on the database file directly (the seed of a test)."""
        import sqlite3

        with sqlite3.connect(self.db) as db:
            db.executescript(statement)

    def table(self, name: str) -> list[dict[str, Any]] | None:
        """Every row of a table, read directly from the file (None: no such table)."""
        import sqlite3

        with sqlite3.connect(self.db) as db:
            db.row_factory = sqlite3.Row
            try:
                rows = db.execute(f'select * from "{name}" order by 1').fetchall()
            except sqlite3.OperationalError:
                return None
        return [dict(r) for r in rows]


class Jupyter(Server):
    """Jupyter Server (PyPI jupyter_server, in .venv/jupyter) on http://127.0.0.1:PORT, its
    root a directory of the test's, token auth (`token`)."""

    name = "jupyter"
    token = "jupyter-SECRET-3"

    def __init__(self, directory: Path, base: str = "/") -> None:
        super().__init__(directory)
        self.base = base  # the server's base URL (JupyterHub serves /user/NAME/)

    def command(self) -> list[str]:
        binary = _need(
            VENV / "jupyter" / "bin" / "jupyter-server", "Jupyter Server (.venv/jupyter)"
        )
        (self.dir / "root").mkdir(exist_ok=True)
        return [
            binary,
            "--no-browser",
            f"--port={self.port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.dir / 'root'}",
            "--ServerApp.port_retries=0",
            "--allow-root",
            f"--ServerApp.base_url={self.base}",
            "--FileContentsManager.delete_to_trash=False",
        ]

    def env(self) -> dict[str, str]:
        return {
            "JUPYTER_CONFIG_DIR": str(self.dir / "config"),
            "JUPYTER_DATA_DIR": str(self.dir / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.dir / "runtime"),
        }

    def ready(self) -> bool:
        try:
            return requests.get(f"{self.api}/status", headers=self.auth, timeout=2).ok
        except requests.RequestException:
            return False

    @property
    def api(self) -> str:
        """http://127.0.0.1:PORT/BASE/api"""
        return f"{self.base_url}{self.base.rstrip('/')}/api"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def tree(self) -> dict[str, bytes]:
        """Every file under the root, by relative path (directories end with /), read
        directly from the disk."""
        root = self.dir / "root"
        out: dict[str, bytes] = {}
        for path in sorted(root.rglob("*")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            out[rel + "/" if path.is_dir() else rel] = b"" if path.is_dir() else path.read_bytes()
        return out
