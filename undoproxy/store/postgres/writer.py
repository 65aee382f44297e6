"""The one write path to a PostgreSQL journal, and the hash chain written with it.

The queue, group commit, withdrawal and timeouts are every writer's (`QueuedWriter`, see
`undoproxy.store.writer`); a batch runs here in one PostgreSQL transaction on the writer's own
connection. A write is durable once its transaction has committed (PostgreSQL's
`synchronous_commit`, on by default, flushes the WAL first).

The keyed hash chain (`undoproxy.store.chain`): PostgreSQL has no Python triggers, so the
writer appends the entries itself. Every INSERT or UPDATE of a chained table (`sessions`,
`steps`, `approvals`, `archives`) runs with `RETURNING *`, and each row it returns — the row
exactly as committed, whatever the statement (one row, set-based, or one of a `write_all`
unit such as an archive batch's) — gets its entry, computed with the same
`canonical`, `row_hash` and `ChainKey.entry_hash` as on SQLite, inserted in the same
transaction. `key_the_chain` appends the keying entry when a replica opens a journal whose
last entry is unkeyed (one from before keyed chains). Replicas share one chain: before
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

from undoproxy.credentials import CredentialBox
from undoproxy.store import chain
from undoproxy.store.postgres.schema import CHAIN
from undoproxy.store.postgres.sql import changed_table, translate
from undoproxy.store.writer import MANY, QueuedWriter, _Op

log = logging.getLogger(__name__)
Connect = Callable[[], Awaitable[asyncpg.Connection]]
_INSERT_ENTRY = (
    "INSERT INTO chain (tbl, row_id, version, prev_hash, hash, key_id, row_hash) VALUES ($1, "
    "$2, (SELECT coalesce(max(version), 0) + 1 FROM chain WHERE tbl = $1 AND row_id = $2), "
    "$3, $4, $5, $6)"
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

    def __init__(
        self,
        conn: asyncpg.Connection,
        connect: Connect,
        *,
        timeout: float = 5.0,
        chain_key: chain.ChainKey | None = None,
    ):
        self._conn: asyncpg.Connection | None = conn
        self._connect = connect
        # The installation's (PgJournal.connect passes it), else this process's own key.
        self.chain_key = chain_key or chain.ChainKey.of(CredentialBox.for_this_process())
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
            chained = _Chained(conn, self.chain_key)
            for op in batch:
                if op.sql == MANY:  # several statements, one unit (`write_all`)
                    statements: Any = op.params
                    op.result = [await chained.run(sql, params) for sql, params in statements]
                else:
                    op.result = await chained.run(op.sql, op.params)
            await chained.append()

    @staticmethod
    def _database_failed(exc: Exception) -> bool:
        return isinstance(exc, _CONNECTION_ERRORS)


class _Chained:
    """One transaction's statements, each chained row's keyed entry computed as it is
    returned."""

    def __init__(self, conn: asyncpg.Connection, key: chain.ChainKey) -> None:
        self.conn = conn
        self.key = key
        self.head: str | None = None
        self.entries: list[tuple[str, str, str, str, str, str]] = []

    async def run(self, sql: str, params: Any) -> list[dict[str, Any]] | None:
        """Run one statement; the rows it changed when it writes a chained table."""
        conn = self.conn
        statement = translate(sql)
        args = statement.args(params)
        table = changed_table(sql)
        if table not in chain.TABLES:
            await conn.execute(statement.sql, *args)
            return None
        if self.head is None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", CHAIN)
            head = await conn.fetchval("SELECT hash FROM chain ORDER BY seq DESC LIMIT 1")
            self.head = head or chain.GENESIS
        rows = await conn.fetch(statement.sql + " RETURNING *", *args)
        key_id, keyed = self.key.id, self.key.entry_hash
        for row in rows:
            digest = chain.row_hash(chain.canonical(table, row.items()))
            entry = keyed(self.head, table, row["id"], digest)
            self.entries.append((table, row["id"], self.head, entry, key_id, digest))
            self.head = entry
        return [dict(r) for r in rows]

    async def append(self) -> None:
        """Append the transaction's entries to the chain (before its commit)."""
        if self.entries:
            await self.conn.executemany(_INSERT_ENTRY, self.entries)


async def key_the_chain(conn: asyncpg.Connection, key: chain.ChainKey) -> None:
    """Append the keying entry when the chain's last entry is unkeyed (`chain.key_the_chain`
    on PostgreSQL), under the chain lock: of replicas starting at once, one keys it."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", CHAIN)
        last = await conn.fetchrow("SELECT hash, key_id FROM chain ORDER BY seq DESC LIMIT 1")
        if last is None or last["key_id"] is not None:
            return
        version = await conn.fetchval(
            "SELECT coalesce(max(version), 0) + 1 FROM chain WHERE tbl = $1 AND row_id = $2",
            chain.KEYING_TABLE,
            chain.KEYING_ROW,
        )
        await conn.execute(
            "INSERT INTO chain (tbl, row_id, version, prev_hash, hash, key_id, row_hash) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            *chain.keying_entry(str(last["hash"]), int(version), key),
        )


def returned(result: Any) -> list[dict[str, Any]]:
    """The rows a chained write returned (none on SQLite, whose writer returns None)."""
    return list(result) if isinstance(result, list) else []
