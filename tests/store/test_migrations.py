"""A journal written by an older undoproxy opens in a newer one with everything kept (SQLite,
whose journals predate PostgreSQL's), and a journal opened again is as it was (both)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.store.backends import StoreUnderTest
from undoproxy.store import schema
from undoproxy.store.journal import Journal
from undoproxy.store.records import Session


async def test_an_old_sqlite_journal_is_migrated_in_place_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in schema.MIGRATIONS[:2]:  # what undoproxy 0.1 created
        old.executescript(sql)
        old.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
    now = time.time()
    old.execute(
        "INSERT INTO sessions VALUES ('s1', 'tok', 'fix bug', NULL, 'open', ?, ?)", (now, now)
    )
    old.execute(
        "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
        "is_mutation, status) VALUES ('st1', 's1', 1, ?, ?, 'POST', 'https://a.test/x', 1, "
        "'succeeded')",
        (now, now),
    )
    old.close()

    journal = await Journal.open(path)
    try:
        session = journal.sessions["s1"]
        assert (session.intent, session.frozen) == ("fix bug", False)
        [step] = await journal.steps("s1")
        assert (step.method, step.status, step.intent, step.meta) == (
            "POST",
            "succeeded",
            None,
            None,
        )
        await journal.set_frozen("s1", True)
        await journal.set_setting("freeze_all", "1")
        assert await journal.setting("freeze_all") == "1"
    finally:
        await journal.close()

    again = await Journal.open(path)  # applied once: opening again changes nothing
    try:
        assert again.sessions["s1"].frozen is True
        assert await again.setting("freeze_all") == "1"
        names = [r["name"] for r in await again.query("SELECT name FROM migrations")]
        assert names == [name for name, _ in schema.MIGRATIONS]
    finally:
        await again.close()


async def test_a_journal_opened_again_keeps_everything_and_applies_no_migration_twice(
    store: StoreUnderTest,
) -> None:
    journal = await store.open()
    try:
        journal.add_session(Session(id="s1", intent="fix bug"))
        await journal.set_frozen("s1", True)
        await journal.set_setting("freeze_all", "1")
    finally:
        await journal.close()
    again = await store.open()
    try:
        assert (again.sessions["s1"].intent, again.sessions["s1"].frozen) == ("fix bug", True)
        assert await again.setting("freeze_all") == "1"
        assert again.frozen_all is True
    finally:
        await again.close()
    names = [row[0] for row in await store.rows("SELECT name FROM migrations ORDER BY name")]
    assert names == sorted(store.migrations)
