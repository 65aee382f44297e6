"""SQLite only: the journal file on disk: private file modes, fsync'd commits, one process per
journal (tests/store/conftest.py runs what both stores share on both)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from undoproxy.credentials import CredentialBox
from undoproxy.store import lock, sqlite_child
from undoproxy.store.chain import ChainKey
from undoproxy.store.journal import Journal
from undoproxy.store.lock import JournalInUse, JournalLock
from undoproxy.store.records import Session, Step


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual umask: files are world-readable unless undoproxy says otherwise."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def write_one_step(journal: Journal) -> None:
    journal.add_session(Session(id="s1"))
    step = Step(
        id="st_1",
        session_id="s1",
        seq=1,
        method="POST",
        url="https://x.test/a",
        is_mutation=True,
        status="pending",
    )
    await journal.write_ahead(step)


async def test_the_database_and_its_wal_and_shm_are_0600(tmp_path: Path, loose_umask: None) -> None:
    db = tmp_path / "data" / "journal.db"
    journal = await Journal.open(db)
    try:
        await write_one_step(journal)
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), lock.lock_path(db)):
            assert mode(path) == 0o600, path
    finally:
        await journal.close()


async def test_an_existing_world_readable_journal_is_made_private(
    tmp_path: Path, loose_umask: None
) -> None:
    db = tmp_path / "journal.db"
    sqlite3.connect(db).execute("CREATE TABLE old (x)").connection.close()
    os.chmod(db, 0o644)
    journal = await Journal.open(db)
    try:
        await write_one_step(journal)
        assert {mode(p) for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))} == {0o600}
    finally:
        await journal.close()


async def test_every_commit_someone_waits_for_is_fsyncd(tmp_path: Path) -> None:
    journal = await Journal.open(tmp_path / "journal.db")
    try:
        await write_one_step(journal)  # the writer process is up and has the journal open
    finally:
        await journal.close()
    # The connection the writer process commits through, opened as it opens it.
    key = ChainKey.of(CredentialBox.for_this_process())
    batches = sqlite_child.open_batches(tmp_path / "journal.db", 2000, key)
    conn = batches.conn
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

        def synchronous_after(awaited: bool) -> int:
            [outcome] = batches.commit([("SELECT 1", (), awaited)])
            assert outcome is None
            return int(conn.execute("PRAGMA synchronous").fetchone()[0])

        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL from the start
        assert synchronous_after(awaited=True) == 2  # FULL: the WAL fsync'd at COMMIT
        assert synchronous_after(awaited=False) == 1  # NORMAL: nobody waits, no fsync
        assert synchronous_after(awaited=True) == 2  # and its fsync covers what came before
    finally:
        conn.close()


async def test_a_second_journal_on_the_same_file_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    db = tmp_path / "journal.db"
    journal = await Journal.open(db)
    try:
        with pytest.raises(JournalInUse, match=f"pid {os.getpid()}") as refused:
            await Journal.open(db)
        assert refused.value.pid == os.getpid()
    finally:
        await journal.close()
    again = await Journal.open(db)  # released on close
    await again.close()
    assert lock.holder(db) is None


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    lock.lock_path(db).write_text(dead.stdout)
    held = JournalLock.acquire(db)
    try:
        assert lock.holder(db) == os.getpid()
    finally:
        held.release()
