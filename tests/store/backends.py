"""The two stores under test (the `store` fixture of conftest.py): SQLite and PostgreSQL.

A store under test opens journals at one place (a
temporary file, or a fresh database of the test cluster), and reaches into the database the
way a person with `sqlite3` or `psql` would: plain SQL outside undoproxy, the chain's rows,
another connection that holds a lock. What only SQLite has (file modes, the one-process
lock, WAL) is tested in the `test_sqlite_*` modules; what only PostgreSQL has (replicas) in
tests/store_pg.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import asyncpg

from tests.support.postgres import Cluster
from undoproxy.credentials import CredentialBox
from undoproxy.events import EventBus
from undoproxy.store import chain, chain_verify, chainscan, schema
from undoproxy.store.journal import Journal
from undoproxy.store.postgres import schema as pg_schema
from undoproxy.store.postgres.journal import PgJournal
from undoproxy.store.postgres.sql import translate
from undoproxy.store.postgres.verify import verify as pg_verify
from undoproxy.store.postgres.writer import PgWriter
from undoproxy.store.sqlite_writer import JournalWriter
from undoproxy.store.writer import QueuedWriter as Writer


def _keys() -> dict[str, chain.ChainKey]:
    """The chain keys of the journals tests open: without a box, this process's own."""
    return chain.keyring(CredentialBox.for_this_process())


class StoreUnderTest(Protocol):
    """One journal location on one backend (see the module docstring)."""

    name: str
    duplicate: str  # how the database words a duplicate key (a regex)
    lock_timeout: str  # how it words giving up on a lock (a regex)
    migrations: list[str]  # the names of the store's migrations, all applied once

    async def open(self) -> Journal:
        """Open (create, migrate, recover) the journal."""

    async def open_bounded(self, lock_wait_ms: int) -> Journal:
        """The journal, its writer giving up on a lock after `lock_wait_ms`."""

    async def writer(self, *, lock_wait_ms: int | None, timeout: float) -> Writer:
        """A started writer of its own on the (migrated) journal."""

    async def sql(self, statement: str) -> None:
        """Run a statement outside undoproxy (a person at sqlite3/psql)."""

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        """A query's rows, outside undoproxy."""

    async def entries(self) -> list[tuple[str, str, int]]:
        """The chain, in order: (table, row id, version)."""

    async def verify(
        self, heads: Iterable[str] = (), keys: dict[str, chain.ChainKey] | None = None
    ) -> chain_verify.Report:
        """`undoproxy verify`'s check, with `keys` (default: the key the tests' journals are
        keyed with)."""

    async def rebuild_chain(self) -> None:
        """Recompute the whole chain from the rows, as someone who knows the scheme but not
        the key could: unkeyed."""

    async def before_keys(self) -> None:
        """Make a journal as an undoproxy from before keyed chains left it: every migration
        before the keyed chain's (session counts and archives included), session s1 with
        steps st1 and st2, their unkeyed chain."""

    def upsert_step(self, columns: Iterable[str]) -> str:
        """SQL that writes a whole steps row again (`:name` parameters)."""

    async def hold(self) -> None:
        """Another connection takes the write lock(s) the writer needs, until `release`."""

    async def release(self) -> None:
        """Let go of what `hold` took."""


# The rows of a journal from before keyed chains (`before_keys`), in SQL both databases take.
_OLD_ROWS: list[tuple[str, tuple[Any, ...]]] = [
    (
        "INSERT INTO sessions (id, token, state, created_at, updated_at, frozen) "
        "VALUES ('s1', 'tok', 'open', 1.0, 1.0, 0)",
        (),
    ),
    *(
        (
            "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
            "is_mutation, status, request_body_len) VALUES (?, 's1', ?, 1.5, 2.0, 'POST', "
            "'https://a.test/x', 1, 'succeeded', 0)",
            (f"st{seq}", seq),
        )
        for seq in (1, 2)
    ),
]


class SqliteStore:
    """A journal file in a temporary directory."""

    name = "sqlite"
    duplicate = "UNIQUE"
    lock_timeout = "locked"
    migrations = [name for name, _ in schema.MIGRATIONS]

    def __init__(self, directory: Path) -> None:
        self.path = directory / "journal.db"
        self._blocker: sqlite3.Connection | None = None

    async def open(self) -> Journal:
        return await Journal.open(self.path)

    async def open_bounded(self, lock_wait_ms: int) -> Journal:
        await (await Journal.open(self.path)).close()
        read = await schema.connect(self.path)
        read.row_factory = aiosqlite.Row
        journal = Journal(
            JournalWriter(self.path, busy_timeout_ms=lock_wait_ms),
            read,
            EventBus(),
        )
        journal.writer.start()
        return journal

    async def writer(self, *, lock_wait_ms: int | None, timeout: float) -> Writer:
        await (await Journal.open(self.path)).close()
        wait = 600_000 if lock_wait_ms is None else lock_wait_ms
        w = JournalWriter(self.path, busy_timeout_ms=wait, timeout=timeout)
        w.start()
        return w

    async def sql(self, statement: str) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(statement)
        db.close()

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.path)
        try:
            return list(db.execute(query))
        finally:
            db.close()

    async def entries(self) -> list[tuple[str, str, int]]:
        return [
            (t, r, v)
            for t, r, v in await self.rows("SELECT tbl, row_id, version FROM chain ORDER BY seq")
        ]

    async def verify(
        self, heads: Iterable[str] = (), keys: dict[str, chain.ChainKey] | None = None
    ) -> chain_verify.Report:
        found = keys if keys is not None else _keys()
        return await asyncio.to_thread(
            chainscan.verify_sqlite, self.path, heads=list(heads), keys=found
        )

    async def rebuild_chain(self) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute("DELETE FROM chain")
            db.row_factory = sqlite3.Row
            prev, seq = chain.GENESIS, 0
            for table in chain.TABLES:
                for row in db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall():
                    seq += 1
                    digest = chain.entry_hash(prev, chain.canonical(table, dict(row).items()))
                    db.execute(
                        "INSERT INTO chain (seq, tbl, row_id, version, prev_hash, hash) "
                        "VALUES (?, ?, ?, 1, ?, ?)",
                        (seq, table, row["id"], prev, digest),
                    )
                    prev = digest
        db.close()

    async def before_keys(self) -> None:
        old = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            await old.execute(
                "CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            for name, sql in schema.MIGRATIONS:  # as that undoproxy migrated: SQL, then Python
                if name == chain.KEYED_MIGRATION:
                    break
                await old.executescript(sql)
                if name in schema.AFTER:
                    await schema.AFTER[name](old)
                await old.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
            for statement, params in _OLD_ROWS:
                await old.execute(statement, params)
        finally:
            await old.close()
        await self.rebuild_chain()

    def upsert_step(self, columns: Iterable[str]) -> str:
        names = list(columns)
        marks = ", ".join(f":{c}" for c in names)
        return f"INSERT OR REPLACE INTO steps ({', '.join(names)}) VALUES ({marks})"

    async def hold(self) -> None:
        self._blocker = sqlite3.connect(self.path, isolation_level=None)
        self._blocker.execute("BEGIN IMMEDIATE")

    async def release(self) -> None:
        if self._blocker is not None:
            self._blocker.execute("ROLLBACK")
            self._blocker.close()
            self._blocker = None


class PgStore:
    """A fresh database of the test cluster."""

    name = "postgres"
    duplicate = "duplicate key"
    lock_timeout = "lock timeout"
    migrations = [name for name, _ in pg_schema.MIGRATIONS]

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.url = cluster.database()
        self._blocker: asyncpg.Connection | None = None

    def _url(self, lock_wait_ms: int | None) -> str:
        # asyncpg passes unknown DSN parameters to the server as settings.
        return self.url if lock_wait_ms is None else f"{self.url}?lock_timeout={lock_wait_ms}"

    async def open(self) -> Journal:
        return await PgJournal.connect(self.url, replica="r1")

    async def open_bounded(self, lock_wait_ms: int) -> Journal:
        return await PgJournal.connect(self._url(lock_wait_ms), replica="r1")

    async def writer(self, *, lock_wait_ms: int | None, timeout: float) -> Writer:
        await (await self.open()).close()
        url = self._url(lock_wait_ms)
        w = PgWriter(
            await pg_schema.connect(url, "w"), lambda: pg_schema.connect(url, "w"), timeout=timeout
        )
        w.start()
        return w

    async def sql(self, statement: str) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(self.url)
        try:
            return [tuple(r) for r in await conn.fetch(query)]
        finally:
            await conn.close()

    async def entries(self) -> list[tuple[str, str, int]]:
        return [
            (t, r, v)
            for t, r, v in await self.rows("SELECT tbl, row_id, version FROM chain ORDER BY seq")
        ]

    async def verify(
        self, heads: Iterable[str] = (), keys: dict[str, chain.ChainKey] | None = None
    ) -> chain_verify.Report:
        return await pg_verify(self.url, heads=heads, keys=keys if keys is not None else _keys())

    async def rebuild_chain(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM chain")
                prev = chain.GENESIS
                for table in chain.TABLES:
                    for row in await conn.fetch(f"SELECT * FROM {table} ORDER BY created_at, id"):
                        digest = chain.entry_hash(prev, chain.canonical(table, row.items()))
                        await conn.execute(
                            "INSERT INTO chain (tbl, row_id, version, prev_hash, hash) "
                            "VALUES ($1, $2, 1, $3, $4)",
                            table,
                            row["id"],
                            prev,
                            digest,
                        )
                        prev = digest
        finally:
            await conn.close()

    async def before_keys(self) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute(
                "CREATE TABLE migrations (name text PRIMARY KEY, applied_at double precision "
                "NOT NULL)"
            )
            for name, sql in pg_schema.MIGRATIONS:
                if name == pg_schema.KEYED_MIGRATION:
                    break
                await conn.execute(sql)
                await conn.execute("INSERT INTO migrations VALUES ($1, 0)", name)

            async def run(statement: str, params: tuple[Any, ...] = ()) -> None:
                await conn.execute(translate(statement).sql, *params)

            for statement, params in _OLD_ROWS:
                await run(statement, params)
        finally:
            await conn.close()
        await self.rebuild_chain()

    def upsert_step(self, columns: Iterable[str]) -> str:
        names = list(columns)
        marks = ", ".join(f":{c}" for c in names)
        updates = ", ".join(f"{c}=excluded.{c}" for c in names if c != "id")
        return (
            f"INSERT INTO steps ({', '.join(names)}) VALUES ({marks}) "
            f"ON CONFLICT (id) DO UPDATE SET {updates}"
        )

    async def hold(self) -> None:
        self._blocker = await asyncpg.connect(self.url)
        await self._blocker.execute("BEGIN")
        await self._blocker.execute(
            "LOCK TABLE sessions, steps, approvals, settings IN ACCESS EXCLUSIVE MODE"
        )

    async def release(self) -> None:
        if self._blocker is not None:
            await self._blocker.execute("ROLLBACK")
            await self._blocker.close()
            self._blocker = None
