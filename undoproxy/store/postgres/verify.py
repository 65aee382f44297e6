"""`undoproxy verify` on a PostgreSQL journal: the same check as on SQLite
(`chain_verify.check`).

Read-only, in one REPEATABLE READ transaction (the rows and the chain as of one moment, while
replicas keep writing). The rows are read as asyncpg returns them, which is how the writer
hashed them (`PgWriter`), so a row edited with `psql` in any column no longer matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg

from undoproxy.store import chain_verify
from undoproxy.store.chain import TABLES, ChainKey
from undoproxy.store.postgres.schema import KEYED_MIGRATION


async def verify(
    url: str, *, heads: Iterable[str] = (), keys: Mapping[str, ChainKey] | None = None
) -> chain_verify.Report:
    """Check the chain of the journal at `url` with `keys`; NoChain when it has none."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            if not await conn.fetchval("SELECT to_regclass('chain') IS NOT NULL"):
                if await conn.fetchval("SELECT to_regclass('migrations') IS NOT NULL"):
                    # Every PostgreSQL journal was created with its chain.
                    raise chain_verify.NoChain(
                        "the journal had a hash chain, and its table was dropped"
                    )
                raise chain_verify.NoChain(
                    "the journal has no hash chain yet: start undoproxy once to create it"
                )
            keyed = await conn.fetchval(
                "SELECT count(*) = 2 FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'chain' AND column_name IN "
                "('key_id', 'row_hash')"
            )
            columns = "key_id, row_hash" if keyed else "NULL, NULL"
            entries = [
                (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])
                for r in await conn.fetch(
                    f"SELECT seq, tbl, row_id, version, prev_hash, hash, {columns} "
                    "FROM chain ORDER BY seq"
                )
            ]
            tables: dict[str, list[tuple[int, dict[str, Any]]]] = {}
            for table in TABLES:
                rows = await conn.fetch(f"SELECT * FROM {table} ORDER BY created_at, id")
                tables[table] = [(i, dict(r)) for i, r in enumerate(rows, 1)]
            migrated = await conn.fetchval(
                "SELECT to_regclass('migrations') IS NOT NULL"
            ) and await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM migrations WHERE name = $1)", KEYED_MIGRATION
            )
            report = chain_verify.check(
                entries,
                lambda table: tables[table],
                keys or {},
                keyed_by_migration=bool(migrated),
            )
            missing = [
                chain_verify.missing_head(head)
                for head in heads
                if not await conn.fetchval("SELECT 1 FROM chain WHERE hash=$1", head)
            ]
    finally:
        await conn.close()
    return dataclasses.replace(report, problems=missing + report.problems)
