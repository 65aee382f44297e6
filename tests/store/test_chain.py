"""The hash chain: every write path appends entries, verify recomputes them from the rows,
on both stores (`[sqlite]`, `[postgres]`)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from tests.store.backends import StoreUnderTest, _keys
from tests.store.helpers import a_step, an_approval
from undoproxy.errors import JournalError
from undoproxy.lifecycle import Settlement, StepStatus
from undoproxy.store import approvals, chain, chain_verify, chainscan, schema
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session

# A rollback's verdict as the journal takes it: a read-back is its evidence.
VERIFIED = Settlement("compensated", "ok", StepStatus.COMPENSATED, evidence="GET answered 404")
LAST_HASH = "SELECT hash FROM chain ORDER BY seq DESC LIMIT 1"


def chain_of(path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as db:
        return list(db.execute("SELECT tbl, row_id, version FROM chain ORDER BY seq"))


def test_canonical_form_keeps_every_type_apart() -> None:
    forms = {
        chain.canonical("steps", [("a", v)])
        for v in (1, 1.0, "1", b"1", 1.0000000000000002, "", b"", None, 0)
    }
    assert len(forms) == 9
    assert chain.canonical("steps", [("a", 1), ("b", "x")]) == chain.canonical(
        "steps", [("b", "x"), ("a", 1), ("c", None)]
    )
    assert chain.canonical("steps", [("a", 1)]) != chain.canonical("sessions", [("a", 1)])


async def test_every_write_path_appends_entries_that_verify(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        first = a_step(journal, "s1")
        await journal.write_ahead(first)  # insert, awaited
        journal.update(first, status="succeeded", response_status=201, duration_ms=1.5)
        read = a_step(journal, "s1", is_mutation=False, status="succeeded")
        journal.record(read)  # insert, batched
        await journal.update_now(first, status="compensating")
        await journal.settle(first, VERIFIED)  # a rollback's verdict
        await journal.set_session_state("s1", "rolled_back")
        await journal.set_frozen("s1", True)
        held = a_step(journal, "s1", status="held")
        await journal.write_ahead(held)
        approval = an_approval("s1", held)
        await journal.writer.write(approvals.INSERT, approval.to_row())
        await approvals.expire_stale(journal)  # set-based updates of both tables
        await journal.set_frozen("s1", False)
        await journal.set_session_state("s1", "open")  # a mutation is written ahead only so
        left_pending = a_step(journal, "s1")
        await journal.write_ahead(left_pending)
    finally:
        await journal.close()
    again = await store.open()  # recovery: pending -> unknown, through the writer
    try:
        step = await again.step(left_pending.id)
        assert step is not None and step.status == "unknown"
        assert [s.seq for s in await again.steps("s1")] == [1, 2, 3, 4]
    finally:
        await again.close()

    entries = await store.entries()
    versions = {(table, row_id): version for table, row_id, version in entries}
    assert versions[("steps", first.id)] == 4
    assert versions[("steps", read.id)] == 1
    assert versions[("steps", held.id)] == 2  # held -> denied by expire_stale
    assert versions[("steps", left_pending.id)] == 2  # pending -> unknown at restart
    assert versions[("sessions", "s1")] == 5
    assert versions[("approvals", approval.id)] == 2
    report = await store.verify()
    assert report.problems == []
    assert (report.steps, report.sessions, report.approvals, report.entries) == (
        4,
        1,
        1,
        len(entries),
    )
    [(last,)] = await store.rows("SELECT hash FROM chain ORDER BY seq DESC LIMIT 1")
    assert report.head == last


async def test_a_row_a_batch_could_not_write_has_no_entry(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        step = a_step(journal, "s1")
        journal.record(step)
        journal.record(step)  # the same id again: this batch fails, is retried row by row
        other = a_step(journal, "s1")
        journal.record(other)
        await journal.writer.flush()
        with pytest.raises(JournalError, match=store.duplicate):
            await journal.write_ahead(step)
        assert [s.id for s in await journal.steps("s1")] == [step.id, other.id]
    finally:
        await journal.close()
    assert [e[1] for e in await store.entries()] == ["s1", step.id, other.id]
    assert (await store.verify()).problems == []


async def test_an_sqlite_journal_from_before_the_chain_gets_one_at_migration(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in schema.MIGRATIONS[:3]:  # 001-003: no chain
        old.executescript(sql)
        old.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
    old.execute(
        "INSERT INTO sessions (id, token, state, created_at, updated_at) "
        "VALUES ('s1', 'tok', 'open', 1, 1)"
    )
    for seq in (1, 2):
        old.execute(
            "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
            "is_mutation, status, request_body) VALUES (?, 's1', ?, 1.5, 2, 'POST', "
            "'https://a.test/x', 1, 'succeeded', X'00ff')",
            (f"st{seq}", seq),
        )
    old.close()
    with pytest.raises(chain_verify.NoChain):
        chainscan.verify_sqlite(path)

    journal = await Journal.open(path)
    try:
        # Backfilled unkeyed, as chains were then; keyed by the writer when it opened it.
        assert chain_of(path) == [
            ("sessions", "s1", 1),
            ("steps", "st1", 1),
            ("steps", "st2", 1),
            ("chain", "keyed", 1),
        ]
        step = await journal.step("st2")
        assert step is not None
        await journal.settle(step, VERIFIED)  # after the upgrade: chained
    finally:
        await journal.close()
    report = chainscan.verify_sqlite(path, keys=_keys())
    assert (report.problems, report.steps, report.entries) == ([], 2, 5)
    assert (report.keyed_from, report.unkeyed) == (4, 3)

    with sqlite3.connect(path) as db:
        db.execute("UPDATE steps SET url='https://b.test/x' WHERE id='st1'")
    [problem] = chainscan.verify_sqlite(path, keys=_keys()).problems
    assert (problem.table, problem.row_id, problem.where) == ("steps", "st1", "session s1, #1")


async def test_a_nullable_column_added_later_keeps_every_hash(store: StoreUnderTest) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        await journal.write_ahead(a_step(journal, "s1"))
    finally:
        await journal.close()
    await store.sql("ALTER TABLE steps ADD COLUMN later TEXT")
    assert (await store.verify()).problems == []


async def test_verify_reads_one_snapshot_while_the_writer_writes(store: StoreUnderTest) -> None:
    journal = await store.open()

    async def agent() -> None:
        for _ in range(100):
            step = a_step(journal, "s1")
            await journal.write_ahead(step)
            journal.update(step, status="succeeded")

    try:
        journal.add_session(Session(id="s1"))
        writing = asyncio.create_task(agent())
        checks = 0
        while not writing.done() or checks == 0:
            report = await store.verify()
            assert report.problems == []
            checks += 1
        await writing
    finally:
        await journal.close()
    assert (await store.verify()).steps == 100


async def test_a_dropped_chain_is_not_mistaken_for_an_old_journal(store: StoreUnderTest) -> None:
    journal = await store.open()
    await journal.close()
    await store.sql("DROP TABLE chain")
    with pytest.raises(chain_verify.NoChain, match="dropped"):
        await store.verify()


async def test_a_row_replaced_through_the_writer_gets_its_next_version(
    store: StoreUnderTest,
) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        step = a_step(journal, "s1")
        await journal.write_ahead(step)
        step.status = "succeeded"
        row = step.to_row(journal.box.encrypt)
        await journal.writer.write(store.upsert_step(row), row)
    finally:
        await journal.close()
    assert (await store.entries())[1:] == [("steps", step.id, 1), ("steps", step.id, 2)]
    assert (await store.verify()).problems == []


async def test_a_chain_rebuilt_without_the_key_fails_and_so_does_a_recorded_head(
    store: StoreUnderTest,
) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1"))
        for _ in range(3):
            await journal.write_ahead(a_step(journal, "s1"))
    finally:
        await journal.close()
    recorded = (await store.verify()).head
    assert (await store.verify(heads=[recorded])).problems == []

    # Someone who knows the scheme, not the key, edits a step and rebuilds the whole chain.
    await store.sql("UPDATE steps SET url='https://elsewhere.test/' WHERE seq=2")
    await store.rebuild_chain()
    [lost] = (await store.verify()).problems
    assert (lost.table, lost.row_id) == ("chain", (await store.rows(LAST_HASH))[0][0])
    assert "no chain entry is keyed, though undoproxy keyed this journal" in str(lost)
    problems = (await store.verify(heads=[recorded])).problems
    assert (problems[0].table, problems[0].row_id) == ("chain", recorded)
    assert "no longer in the chain" in str(problems[0])
