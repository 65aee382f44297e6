"""Each session's counts are kept with its steps, and every list is read a page at a time
with its total, on both stores (`[sqlite]`, `[postgres]`)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.store.backends import StoreUnderTest
from tests.store.helpers import a_step, an_approval
from undoproxy.store import approvals, listing, schema
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session
from undoproxy.store.sessionindex import SessionIndex


async def test_counts_follow_every_write_of_a_step(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        journal.add_session(Session(id="empty"))
        first = a_step(journal, "s1")
        await journal.write_ahead(first)
        journal.record(a_step(journal, "s1", is_mutation=False, status="succeeded"))
        held = a_step(journal, "s1", status="held", action="hold")
        await journal.write_ahead(held)
        await journal.writer.write(approvals.INSERT, an_approval("s1", held).to_row())
        await journal.update_now(first, action="hold")  # a change of action moves the count
        await journal.update_now(held, status="denied")  # a status change moves nothing
        await journal.writer.flush()
        counts = await journal.step_counts(["s1", "empty", "nobody"])
        assert counts == {"s1": {"steps": 3, "mutations": 2, "held": 2}}
        await store.sql(f"DELETE FROM approvals WHERE step_id='{held.id}'")
        await store.sql(f"DELETE FROM steps WHERE id='{held.id}'")  # by hand: uncounted too
        assert await journal.step_counts(["s1"]) == {"s1": {"steps": 2, "mutations": 1, "held": 1}}
    finally:
        await journal.close()


async def test_sessions_come_a_page_at_a_time_with_their_total(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        now = time.time()
        for n in range(7):
            journal.add_session(Session(id=f"s{n}", created_at=now + n // 2))  # ties too
        journal.record(a_step(journal, "s6"))
        await journal.set_session_state("s1", "committed")
        await journal.writer.flush()
        seen, cursor = [], None
        while True:
            page = await listing.sessions(journal, limit=3, cursor=cursor)
            assert page.total == 7 and len(page.items) <= 3
            seen += [row["id"] for row in page.items]
            if page.next is None:
                break
            cursor = page.next
        assert seen == ["s6", "s5", "s4", "s3", "s2", "s1", "s0"]
        newest = (await listing.sessions(journal, limit=1)).items[0]
        assert (newest["steps"], newest["mutations"], newest["held"], newest["frozen"]) == (
            1,
            1,
            0,
            False,
        )
        committed = await listing.sessions(journal, state="committed")
        assert [r["id"] for r in committed.items] == ["s1"] and committed.total == 1
        assert committed.next is None
        with pytest.raises(listing.BadCursor):
            await listing.sessions(journal, cursor="not-a-cursor")
    finally:
        await journal.close()


async def test_steps_and_approvals_come_a_page_at_a_time(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        steps = [a_step(journal, "s1", status="held") for _ in range(5)]
        for step in steps:
            await journal.write_ahead(step)
            approval = an_approval("s1", step)
            await journal.writer.write(approvals.INSERT, approval.to_row())
        page = await listing.steps(journal, "s1", limit=2)
        assert ([s.seq for s in page.items], page.total) == ([1, 2], 5)
        page = await listing.steps(journal, "s1", limit=2, cursor=page.next)
        assert [s.seq for s in page.items] == [3, 4]
        last = await listing.steps(journal, "s1", limit=2, cursor=page.next)
        assert ([s.seq for s in last.items], last.next) == ([5], None)
        newest = await listing.steps(journal, "s1", limit=2, newest_first=True, exchange=False)
        assert [s.seq for s in newest.items] == [5, 4] and newest.items[0].request_body is None
        older = await listing.steps(journal, "s1", limit=9, newest_first=True, cursor=newest.next)
        assert [s.seq for s in older.items] == [3, 2, 1]
        held = await listing.approvals(journal, state="pending", limit=4)
        assert (len(held.items), held.total) == (4, 5) and held.next is not None
        rest = await listing.approvals(journal, state="pending", limit=4, cursor=held.next)
        assert len(rest.items) == 1 and rest.next is None
        assert await listing.pending_by_session(journal, ["s1", "s2"]) == {"s1": 5}
    finally:
        await journal.close()


@pytest.mark.parametrize(
    ("value", "size"), [(None, 100), ("1", 1), (str(listing.MAX_PAGE), listing.MAX_PAGE)]
)
def test_a_page_size_is_checked(value: str | None, size: int) -> None:
    assert listing.page_size(value, 100) == size


@pytest.mark.parametrize("value", ["0", str(listing.MAX_PAGE + 1), "-1", "x", ""])
def test_a_page_size_past_the_limit_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="limit must be a number from 1 to"):
        listing.page_size(value, 100)


async def test_closed_sessions_leave_memory_and_come_back_on_demand(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        for n in range(3):
            journal.add_session(Session(id=f"s{n}"))
            await journal.write_ahead(a_step(journal, f"s{n}"))
        await journal.set_session_state("s0", "committed")
        await journal.set_session_state("s1", "rolling_back")
    finally:
        await journal.close()
    again = await store.open()
    try:
        assert sorted(again.sessions) == ["s1", "s2"]  # open ones only: s0 is committed
        s0 = await again.find_session("s0")
        assert s0 is not None and s0.state == "committed" and "s0" in again.sessions
        # Numbered after the steps it had (on PostgreSQL, by the database as it commits).
        again.record(a_step(again, "s0", is_mutation=False, status="succeeded"))
        await again.writer.flush()
        assert [s.seq for s in await again.steps("s0")] == [1, 2]
        assert await again.find_session("nobody") is None
        fresh = await again.admit("new")
        assert fresh.state == "open" and "new" in again.sessions
    finally:
        await again.close()


def test_only_so_many_closed_sessions_stay_in_memory() -> None:
    forgotten: list[str] = []
    index = SessionIndex(closed_kept=2, forgotten=forgotten.append)
    for n in range(4):
        index[f"c{n}"] = Session(id=f"c{n}", state="committed")
        index[f"o{n}"] = Session(id=f"o{n}")
    assert index.get("c2") is not None  # used: kept over c3
    index["c4"] = Session(id="c4", state="rolled_back")
    assert forgotten == ["c0", "c1", "c3"]
    assert sorted(index) == ["c2", "c4", "o0", "o1", "o2", "o3"]
    open_one = index["o0"]
    open_one.state = "committed"
    index.place(open_one)
    assert index.open_count == 3 and forgotten[-1] == "c2"


async def test_an_old_sqlite_journal_gets_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in schema.MIGRATIONS[:3]:
        old.executescript(sql)
        old.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
    old.execute("INSERT INTO sessions VALUES ('s1', 't', NULL, NULL, 'open', 1, 1, 0)")
    for seq, (mutation, action) in enumerate([(1, "hold"), (0, None), (1, "log")], 1):
        old.execute(
            "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
            "is_mutation, status, action) VALUES (?, 's1', ?, ?, 1, 'POST', 'u', ?, 'x', ?)",
            (f"st{seq}", seq, float(seq), mutation, action),
        )
    old.close()
    journal = await Journal.open(path)
    try:
        assert await journal.step_counts(["s1"]) == {"s1": {"steps": 3, "mutations": 2, "held": 1}}
        assert a_step(journal, "s1").seq == 4
    finally:
        await journal.close()
