"""A real CouchDB-compatible server for the tests: PouchDB Server's HTTP layer (express-pouchdb,
from npm, installed by `.ci/run` into .venv/node) over in-memory databases, on TLS.

One server admin (`ADMIN`) and one user for the agent (`AGENT`, in `_users`), Basic auth; each
test's database lets only the agent in (`_security`), so a compensation or a read-back succeeds
only when undoproxy replayed the agent's credentials, and changing the agent's password makes
every read of them answer 401. `Couch.direct` talks to the server directly, never through
undoproxy: it is what a test reads the truth with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import requests

from tests.support.ci import skip_or_fail

NODE_MODULES = Path(__file__).resolve().parents[2] / ".venv" / "node" / "node_modules"
SCRIPT = Path(__file__).with_name("pouchdb_server.cjs")
ADMIN = ("admin", "couch-ADMIN-SECRET-9")
AGENT = ("agent", "couch-SECRET-7")


class Couch:
    """Start with `Couch(directory, cert).start()`; `base_url` is https://127.0.0.1:PORT."""

    def __init__(self, directory: Path, cert: tuple[Path, Path]) -> None:
        self.dir = directory
        self.cert = cert
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []

    def start(self, timeout: float = 60) -> Couch:
        """Start the server and wait until it answers; skip_or_fail when it is not installed."""
        node = shutil.which("node")
        if node is None or not (NODE_MODULES / "express-pouchdb").is_dir():
            skip_or_fail(
                f"PouchDB Server (npm pouchdb-server) is not in {NODE_MODULES}: .ci/run installs it"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.json").write_text(json.dumps({"admins": {ADMIN[0]: ADMIN[1]}}))
        self.proc = subprocess.Popen(
            [node, str(SCRIPT), str(self.cert[0]), str(self.cert[1]), str(self.dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        )
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("PouchDB Server did not start:\n" + "".join(self.output))
        deadline = time.monotonic() + timeout
        while True:  # the admins are hashed on load: wait until they are in force
            r = self.direct().get(f"{self.base_url}/_session", timeout=10)
            if r.ok and r.json().get("userCtx", {}).get("name") == ADMIN[0]:
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PouchDB Server's admin is not in force: {r.text}")
            time.sleep(0.2)
        self.set_agent_password(AGENT[1])
        return self

    def set_agent_password(self, password: str) -> None:
        """Create the agent's user, or change its password (the old one then answers 401)."""
        url = f"{self.base_url}/_users/org.couchdb.user:{AGENT[0]}"
        with self.direct() as s:
            r = s.get(url)
            user = r.json() if r.ok else {"name": AGENT[0], "roles": [], "type": "user"}
            r = s.put(url, json={**user, "password": password})
            assert r.status_code == 201, r.text

    def _read(self, ready: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("listening "):
                self.port = int(line.split()[1])
                ready.set()

    @property
    def admin(self) -> tuple[str, str]:
        """The server admin's (name, password): databases are created and deleted by admins."""
        return ADMIN

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def direct(self) -> requests.Session:
        """A session straight to the server (no proxy), as its admin."""
        s = requests.Session()
        s.trust_env = False
        s.verify = str(self.cert[0])
        s.auth = ADMIN
        s.headers["Accept"] = "application/json"
        return s

    def create_db(self, name: str, docs: dict[str, dict[str, Any]] | None = None) -> None:
        """A database only the agent may use (its admin: design documents too), holding `docs`."""
        with self.direct() as s:
            assert s.put(f"{self.base_url}/{name}").status_code == 201
            security = {"admins": {"names": [AGENT[0]]}, "members": {"names": [AGENT[0]]}}
            assert s.put(f"{self.base_url}/{name}/_security", json=security).ok
            for doc_id, body in (docs or {}).items():
                r = s.put(f"{self.base_url}/{name}/{doc_id}", json=body)
                assert r.status_code == 201, r.text

    def docs(self, name: str) -> dict[str, dict[str, Any]]:
        """Every live document of a database, read directly: id -> body without `_rev`."""
        with self.direct() as s:
            r = s.get(f"{self.base_url}/{name}/_all_docs", params={"include_docs": "true"})
            assert r.status_code == 200, r.text
        out = {}
        for row in r.json()["rows"]:
            doc = {k: v for k, v in row["doc"].items() if k != "_rev"}
            out[row["id"]] = doc
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
