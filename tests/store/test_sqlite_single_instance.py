"""SQLite only: two `undoproxy run` on one journal file: the second refuses to start and names
the first (PostgreSQL journals are shared by replicas: tests/replicas)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.proc import Undoproxy

STEP = (
    "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, is_mutation, "
    "status) VALUES ('st_inflight', 's1', 1, 0, 0, 'POST', 'https://x.test/a', 1, 'pending')"
)


def status_of(db: Path, step_id: str) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT status FROM steps WHERE id=?", (step_id,)).fetchone()[0]
    finally:
        conn.close()


def test_a_second_instance_on_the_same_journal_refuses_to_start(tmp_path: Path) -> None:
    first = Undoproxy(tmp_path / "first").start()
    db = first.dir / "journal.db"
    try:
        conn = sqlite3.connect(db, isolation_level=None)  # a mutation of `first` in flight
        conn.execute(
            "INSERT INTO sessions (id, token, state, created_at, updated_at) "
            "VALUES ('s1', 't', 'open', 0, 0)"
        )
        conn.execute(STEP)
        conn.close()

        second = Undoproxy(tmp_path / "second", {"store": {"path": str(db)}})
        run = subprocess.run(
            [sys.executable, "-m", "undoproxy", "run", "-c", str(second.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode != 0
        assert first.proc is not None
        assert f"pid {first.proc.pid}" in run.stderr
        assert "Traceback" not in run.stderr
        assert status_of(db, "st_inflight") == "pending"  # the second did not "recover" it
        assert first.api("GET", "/api/sessions").status_code == 200
    finally:
        assert first.stop() == 0


def test_a_journal_left_by_a_killed_instance_is_taken_over(tmp_path: Path) -> None:
    first = Undoproxy(tmp_path / "first").start()
    db = first.dir / "journal.db"
    assert first.proc is not None
    first.proc.kill()  # no clean shutdown: its pid stays in the lock file
    first.proc.wait(30)

    second = Undoproxy(tmp_path / "second", {"store": {"path": str(db)}}).start()
    try:
        assert second.proc is not None
        assert (db.parent / "journal.db.lock").read_text().strip() == str(second.proc.pid)
        # Answered only once `serve` awaits, i.e. after its signal handlers are installed.
        assert second.api("GET", "/api/sessions").status_code == 200
    finally:
        assert second.stop() == 0
    assert (db.parent / "journal.db.lock").read_text() == ""
