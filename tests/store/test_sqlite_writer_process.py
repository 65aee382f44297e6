"""SQLite only: the journal's writer process (undoproxy/store/sqlite_child.py), as an operator
meets it: it comes and goes with `undoproxy run`, a killed one is replaced without losing a
write, and Ctrl-C in a terminal still flushes the journal through it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import received
from tests.support.holding import until
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer

RULES = {
    "rules": [
        {
            "name": "create-item",
            "match": {"host": "127.0.0.1", "method": "POST", "path": "/items/**"},
            "compensate": "delete-created",
        }
    ]
}


def writer_pids(pid: int) -> list[int]:
    """The journal writer processes undoproxy (`pid`) started and that still run."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if ppid == pid and b"undoproxy.store.sqlite_child" in cmdline:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_writer_process_is_replaced_and_no_write_is_lost(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    up = Undoproxy(tmp_path, RULES).start()
    session = f"w-{uuid.uuid4().hex[:8]}"
    agent = up.agent(session)
    try:
        assert up.proc is not None
        first = agent.post(f"{tls_upstream.base_url}/items/a", json={"n": 1}, timeout=30)
        assert first.status_code == 200, first.text
        # Its outcome is a batched write, sent to the writer as the agent gets its answer: a
        # kill during that commit would lose it (as documented). Kill between commits.
        until(lambda: up.steps(session)[0]["status"] == "succeeded", what="the outcome of a")
        (writer,) = until(lambda: writer_pids(up.proc.pid), what="the writer process")
        os.kill(writer, signal.SIGKILL)
        until(lambda: not alive(writer), what="the writer process gone")

        second = agent.post(f"{tls_upstream.base_url}/items/b", json={"n": 2}, timeout=30)
        assert second.status_code == 200, second.text
        steps = up.steps(session)
        assert [(s["url"].rsplit("/", 1)[1], s["status"]) for s in steps] == [
            ("a", "succeeded"),
            ("b", "succeeded"),
        ]
        assert writer not in writer_pids(up.proc.pid)
        assert len(writer_pids(up.proc.pid)) == 1
    finally:
        assert up.stop() == 0
    assert "the journal's writer process ended (exit code -9) between commits" in "".join(up.output)
    assert [r.path for r in received(tls_upstream) if r.path.startswith("/items/")][-2:] == [
        "/items/a",
        "/items/b",
    ]
    verified = run_cli("verify", "-c", str(up.config_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "ok:" in verified.stdout


def test_the_writer_process_ends_when_undoproxy_is_killed(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    up = Undoproxy(tmp_path, RULES).start()
    assert up.proc is not None
    r = up.agent("k").post(f"{tls_upstream.base_url}/items/k", json={}, timeout=30)
    assert r.status_code == 200, r.text
    (writer,) = until(lambda: writer_pids(up.proc.pid), what="the writer process")
    up.kill()
    until(lambda: not alive(writer), what="the writer process ending after undoproxy's kill -9")


def test_ctrl_c_stops_undoproxy_with_its_journal_flushed(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    up = Undoproxy(tmp_path, RULES)
    # A terminal's Ctrl-C is SIGINT to the whole foreground process group.
    proc = subprocess.Popen(
        [sys.executable, "-m", "undoproxy", "run", "-c", str(up.config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    up.proc = proc
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            up.output.append(line)
            if line.lstrip().startswith("admin"):
                up.admin_port = int(line.rsplit(":", 1)[1].split("/")[0])
            if line.lstrip().startswith("proxy"):
                up.proxy_port = int(line.split()[1].rsplit(":", 1)[1])
            if line.startswith("Agents:"):
                break
        r = up.agent("ctrl-c").post(f"{tls_upstream.base_url}/items/c", json={}, timeout=30)
        assert r.status_code == 200, r.text
        (writer,) = writer_pids(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(up.output) + rest
    assert "journal flushed" in rest
    assert not alive(writer)
    db = tmp_path / "journal.db"
    done = run_cli("verify", "-c", str(up.config_path))
    assert done.returncode == 0, done.stdout + done.stderr
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT url, status FROM steps WHERE session_id='ctrl-c'").fetchall()
    finally:
        conn.close()
    assert [(u.rsplit("/", 1)[1], s) for u, s in rows] == [("c", "succeeded")]
