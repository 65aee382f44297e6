"""The write path: a write that gives up is withdrawn, and its caller is told the truth, on
both stores.

The writer is made slow for real: another connection holds the lock the writer needs (SQLite's
write lock; on PostgreSQL, the tables), so the writer's batch waits inside the database until
the test lets go.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.store.backends import StoreUnderTest
from undoproxy.errors import JournalError
from undoproxy.store.records import Session, Step
from undoproxy.store.writer import QueuedWriter as Writer

INSERT_SESSION = (
    "INSERT INTO sessions (id, token, state, created_at, updated_at) VALUES (?, ?, ?, 0, 0)"
)


@pytest.fixture
async def writer(store: StoreUnderTest) -> AsyncIterator[Writer]:
    """A writer that waits as long as it takes for the lock and gives callers 0.2 s."""
    w = await store.writer(lock_wait_ms=None, timeout=0.2)
    yield w
    await store.release()
    await w.close()


async def executing(writer: Writer) -> None:
    """Until the writer's current batch is inside the database."""
    while not writer.executing:
        await asyncio.sleep(0.01)


async def session_ids(store: StoreUnderTest) -> set[str]:
    return {row[0] for row in await store.rows("SELECT id FROM sessions")}


async def test_a_write_still_queued_at_its_timeout_is_withdrawn_and_never_commits(
    store: StoreUnderTest, writer: Writer
) -> None:
    await store.hold()
    first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
    await executing(writer)  # the first batch is waiting for the lock inside the database

    with pytest.raises(JournalError, match="withdrawn"):
        await writer.write(INSERT_SESSION, ("refused", "t", "open"))
    writer.submit(INSERT_SESSION, ("after", "t", "open"))
    await store.release()

    await first  # executing when its timeout ran out: it waited and was committed
    await writer.flush()
    assert await session_ids(store) == {"first", "after"}
    assert writer.withdrawn == 1


async def test_a_cancelled_write_still_queued_is_withdrawn(
    store: StoreUnderTest, writer: Writer
) -> None:
    await store.hold()
    first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
    await executing(writer)
    second = asyncio.create_task(writer.write(INSERT_SESSION, ("cancelled", "t", "open")))
    await asyncio.sleep(0)  # queued
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    await store.release()

    await first
    await writer.flush()
    assert await session_ids(store) == {"first"}


async def test_a_write_that_fails_while_executing_says_so_and_leaves_no_row(
    store: StoreUnderTest,
) -> None:
    writer = await store.writer(lock_wait_ms=50, timeout=600)
    try:
        await store.hold()
        with pytest.raises(JournalError, match=store.lock_timeout):
            await writer.write(INSERT_SESSION, ("locked-out", "t", "open"))
        await store.release()
        await writer.flush()
    finally:
        await writer.close()
    assert await session_ids(store) == set()


async def test_awaited_journal_changes_stay_as_they_were_when_the_write_fails(
    store: StoreUnderTest,
) -> None:
    journal = await store.open_bounded(lock_wait_ms=50)
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

        await store.hold()
        with pytest.raises(JournalError):
            await journal.update_now(step, status="compensating")
        with pytest.raises(JournalError):
            await journal.set_session_state("s1", "rolling_back")
        await store.release()

        assert step.status == "succeeded"
        assert session.state == "open"
        committed = await journal.step("st_1")
        assert committed is not None and committed.compensation_status is None
    finally:
        await journal.close()


async def test_a_batched_write_commits_although_nobody_waits_for_it(
    store: StoreUnderTest, writer: Writer
) -> None:
    writer.submit(INSERT_SESSION, ("batched", "t", "open"))
    while "batched" not in await session_ids(store):  # no flush: it lingers, then commits
        await asyncio.sleep(0.01)


async def test_one_bad_row_fails_alone(store: StoreUnderTest) -> None:
    writer = await store.writer(lock_wait_ms=None, timeout=600)
    try:
        await store.hold()  # so that the two below queue up and share the next batch
        first = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
        await executing(writer)
        dup = asyncio.create_task(writer.write(INSERT_SESSION, ("first", "t", "open")))
        other = asyncio.create_task(writer.write(INSERT_SESSION, ("other", "t", "open")))
        await asyncio.sleep(0)
        await store.release()
        await first
        with pytest.raises(JournalError, match=store.duplicate):
            await dup
        await other
    finally:
        await writer.close()
    assert await session_ids(store) == {"first", "other"}
