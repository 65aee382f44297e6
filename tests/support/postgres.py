"""A real, throw-away PostgreSQL cluster for the tests: Debian's PostgreSQL 15 binaries,
`initdb` as the `postgres` user (it refuses root) in a temp dir, on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

BIN_DIRS = [Path(f"/usr/lib/postgresql/{v}/bin") for v in (15, 16, 17)]
PASSWORD = "pg-test-secret"


def bin_dir() -> Path | None:
    """Where initdb and pg_ctl are, or None."""
    for directory in BIN_DIRS:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """`Cluster().start()`; `database()` makes a fresh database and returns its URL."""

    def __init__(self, *, durable: bool = False) -> None:
        """`durable`: fsync on, as in production (the benchmarks); the tests run without."""
        found = bin_dir()
        if found is None:
            raise FileNotFoundError("PostgreSQL's initdb/pg_ctl (apt-get install postgresql)")
        self.bin = found
        self.dir = Path(tempfile.mkdtemp(prefix="undoproxy-pg-"))
        self.data = self.dir / "data"
        self.port = 0
        self._as_postgres = os.geteuid() == 0
        self.durable = durable

    def _run(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            cmd, check=True, capture_output=True, text=True, cwd=self.dir, **kwargs
        )

    def start(self) -> Cluster:
        """initdb, then pg_ctl start on a free port (sockets in the cluster's own dir)."""
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        self.port = _free_port()
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c max_connections=200"
            + ("" if self.durable else " -c fsync=off")
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def stop(self) -> None:
        """Stop the cluster (fast) and remove its files."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def pids(self) -> list[int]:
        """The cluster's processes: the postmaster and every child (backends, writers)."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.is_file():
            return []
        postmaster = int(pid_file.read_text().split("\n", 1)[0])
        found = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                        found.append(int(entry.name))
        return found

    def url(self, database: str = "postgres") -> str:
        """The URL of one database of this cluster."""
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL with psql, as a person at a terminal would; its output (tuples only)."""
        psql = self.bin / "psql"
        result = subprocess.run(
            [
                str(psql if psql.is_file() else "psql"),
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PGPASSWORD": PASSWORD},
        )
        return result.stdout.strip()

    def database(self) -> str:
        """A new empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name)
