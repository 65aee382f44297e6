"""The write path: a write that gives up is withdrawn, and its caller is told the truth.

The writer is made slow for real: another connection holds the database's write lock, so the
writer's batch waits inside SQLite until the test lets go.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosqlite
import pytest

from undoproxy.errors import JournalError
from undoproxy.events import EventBus
from undoproxy.store import schema
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session, Step
from undoproxy.store.writer import JournalWriter

INSERT_SESSION = (
    "INSERT INTO sessions (id, token, state, created_at, updated_at) VALUES (?, ?, ?, 0, 0)"
)


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    """A migrated journal file, not open."""
    path = tmp_path / "journal.db"
    journal = await Journal.open(path)
    await journal.close()
    return path


@pytest.fixture
def blocker(db: Path) -> Iterator[sqlite3.Connection]:
    """Another connection to the journal; `hold(blocker)` takes its write lock."""
    conn = sqlite3.connect(db, isolation_level=None)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


@pytest.fixture
async def writer(db: Path) -> AsyncIterator[JournalWriter]:
    """A writer that waits as long as it takes for the lock and gives callers 0.2 s."""
    w = JournalWriter(schema.connect_sync(db, busy_timeout_ms=600_000), timeout=0.2)
    w.start()
    yield w
    await w.close()


def hold(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def release(conn: sqlite3.Connection) -> None:
    conn.execute("ROLLBACK")


async def executing(writer: JournalWriter) -> None:
    """Until the writer's current batch is inside SQLite."""
    while not writer.executing:
        await asyncio.sleep(0.01)


def session_ids(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


async def test_a_write_still_queued_at_its_timeout_is_withdrawn_and_never_commits(
    db: Path, blocker: sqlite3.Connection, writer: JournalWriter
) -> None:
    hold(blocker)
    first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
    await executing(writer)  # the first batch is waiting for the lock inside SQLite

    with pytest.raises(JournalError, match="withdrawn"):
        await writer.write(INSERT_SESSION, ("refused", "t", "open"))
    writer.submit(INSERT_SESSION, ("after", "t", "open"))
    release(blocker)

    await first  # executing when its timeout ran out: it waited and was committed
    await writer.flush()
    assert session_ids(db) == {"first", "after"}
    assert writer.withdrawn == 1


async def test_a_cancelled_write_still_queued_is_withdrawn(
    db: Path, blocker: sqlite3.Connection, writer: JournalWriter
) -> None:
    hold(blocker)
    first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
    await executing(writer)
    second = asyncio.create_task(writer.write(INSERT_SESSION, ("cancelled", "t", "open")))
    await asyncio.sleep(0)  # queued
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    release(blocker)

    await first
    await writer.flush()
    assert session_ids(db) == {"first"}


async def test_a_write_that_fails_while_executing_says_so_and_leaves_no_row(
    db: Path, blocker: sqlite3.Connection
) -> None:
    writer = JournalWriter(schema.connect_sync(db, busy_timeout_ms=50), timeout=600)
    writer.start()
    try:
        hold(blocker)
        with pytest.raises(JournalError, match="locked"):
            await writer.write(INSERT_SESSION, ("locked-out", "t", "open"))
        release(blocker)
        await writer.flush()
    finally:
        await writer.close()
    assert session_ids(db) == set()


async def test_awaited_journal_changes_stay_as_they_were_when_the_write_fails(
    db: Path, blocker: sqlite3.Connection
) -> None:
    read = await schema.connect(db)
    read.row_factory = aiosqlite.Row
    journal = Journal(JournalWriter(schema.connect_sync(db, busy_timeout_ms=50)), read, EventBus())
    journal.writer.start()
    try:
        session = journal.add_session(Session(id="s1"))
        step = Step(
            id="st_1",
            session_id="s1",
            seq=1,
            method="PUT",
            url="https://x.test/a",
            is_mutation=True,
            status="succeeded",
        )
        await journal.write_ahead(step)

        hold(blocker)
        with pytest.raises(JournalError):
            await journal.update_now(step, compensation_status="compensating")
        with pytest.raises(JournalError):
            await journal.set_session_state("s1", "rolling_back")
        release(blocker)

        assert step.compensation_status is None
        assert session.state == "open"
        committed = await journal.step("st_1")
        assert committed is not None and committed.compensation_status is None
    finally:
        await journal.close()


async def test_a_batched_write_commits_although_nobody_waits_for_it(
    db: Path, writer: JournalWriter
) -> None:
    writer.submit(INSERT_SESSION, ("batched", "t", "open"))
    while "batched" not in session_ids(db):  # no flush: it lingers a moment, then commits
        await asyncio.sleep(0.01)


async def test_one_bad_row_fails_alone(db: Path, blocker: sqlite3.Connection) -> None:
    writer = JournalWriter(schema.connect_sync(db, busy_timeout_ms=600_000), timeout=600)
    writer.start()
    try:
        hold(blocker)  # so that the two below queue up and share the next batch
        first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
        await executing(writer)
        dup = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
        other = asyncio.create_task(writer.write(INSERT_SESSION, ("other", "t", "open")))
        await asyncio.sleep(0)
        release(blocker)
        await first
        with pytest.raises(JournalError, match="UNIQUE"):
            await dup
        await other
    finally:
        await writer.close()
    assert session_ids(db) == {"first", "other"}
