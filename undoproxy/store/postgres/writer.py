"""The one write path to a PostgreSQL journal, and the hash chain written with it.

The queue, group commit, withdrawal and timeouts are every writer's (`QueuedWriter`, see
`undoproxy.store.writer`); a batch runs here in one PostgreSQL transaction on the writer's own
connection. A write is durable once its transaction has committed (PostgreSQL's
`synchronous_commit`, on by default, flushes the WAL first).

The hash chain (`undoproxy.store.chain`): PostgreSQL has no Python triggers, so the writer
appends the entries itself. Every INSERT or UPDATE of `sessions`, `steps` or `approvals` runs
with `RETURNING *`, and each row it returns — the row exactly as committed, whatever the
statement (one row or set-based) — gets its entry, computed with the same `canonical` and
`entry_hash` as on SQLite, inserted in the same transaction. Replicas share one chain: before
its first chained statement a transaction takes `pg_advisory_xact_lock(CHAIN)` and reads the
head, so chain writes from all replicas follow each other, one transaction at a time, and the
lock goes with the commit or rollback. The same lock makes `max(seq) + 1` (how a step is
numbered in its session across replicas, `PgJournal`) free of races.

What a chained statement returns — the rows it changed — is the result of `write()`, so a
caller can tell a conditional UPDATE that changed nothing (`[]`) from one that did.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from undoproxy.store import chain
from undoproxy.store.postgres.schema import CHAIN
from undoproxy.store.postgres.sql import changed_table, translate
from undoproxy.store.writer import QueuedWriter, _Op

log = logging.getLogger(__name__)
Connect = Callable[[], Awaitable[asyncpg.Connection]]
_INSERT_ENTRY = (
    "INSERT INTO chain (tbl, row_id, version, prev_hash, hash) VALUES ($1, $2, "
    "(SELECT coalesce(max(version), 0) + 1 FROM chain WHERE tbl = $1 AND row_id = $2), $3, $4)"
)
_CONNECTION_ERRORS = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    OSError,
    TimeoutError,
)


class PgWriter(QueuedWriter):
    """Writes batches on one connection, reconnecting (through `connect`) when it was lost."""

    def __init__(self, conn: asyncpg.Connection, connect: Connect, *, timeout: float = 5.0):
        self._conn: asyncpg.Connection | None = conn
        self._connect = connect
        super().__init__(timeout=timeout)

    async def _close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _execute(self, batch: list[_Op]) -> None:
        if self._conn is None or self._conn.is_closed():
            self._conn = None
            self._conn = await self._connect()
        conn = self._conn
        async with conn.transaction():
            head: str | None = None
            entries: list[tuple[str, str, str, str]] = []
            for op in batch:
                statement = translate(op.sql)
                args = statement.args(op.params)
                table = changed_table(op.sql)
                if table not in chain.TABLES:
                    await conn.execute(statement.sql, *args)
                    op.result = None
                    continue
                if head is None:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", CHAIN)
                    head = await conn.fetchval("SELECT hash FROM chain ORDER BY seq DESC LIMIT 1")
                    head = head or chain.GENESIS
                rows = await conn.fetch(statement.sql + " RETURNING *", *args)
                for row in rows:
                    digest = chain.entry_hash(head, chain.canonical(table, row.items()))
                    entries.append((table, row["id"], head, digest))
                    head = digest
                op.result = [dict(r) for r in rows]
            if entries:
                await conn.executemany(_INSERT_ENTRY, entries)

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        return isinstance(exc, _CONNECTION_ERRORS)


def returned(result: Any) -> list[dict[str, Any]]:
    """The rows a chained write returned (none on SQLite, whose writer returns None)."""
    return list(result) if isinstance(result, list) else []
