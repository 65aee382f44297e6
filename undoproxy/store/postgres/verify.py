"""`undoproxy verify` on a PostgreSQL journal: the same check as on SQLite (`chain.check`).

Read-only, in one REPEATABLE READ transaction (the rows and the chain as of one moment, while
replicas keep writing). The rows are read as asyncpg returns them, which is how the writer
hashed them (`PgWriter`), so a row edited with `psql` in any column no longer matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import asyncpg

from undoproxy.store import chain


async def verify(url: str, *, heads: Iterable[str] = ()) -> chain.Report:
    """Check the chain of the journal at `url`; NoChain when it has none."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            if not await conn.fetchval("SELECT to_regclass('chain') IS NOT NULL"):
                if await conn.fetchval("SELECT to_regclass('migrations') IS NOT NULL"):
                    # Every PostgreSQL journal was created with its chain.
                    raise chain.NoChain("the journal had a hash chain, and its table was dropped")
                raise chain.NoChain(
                    "the journal has no hash chain yet: start undoproxy once to create it"
                )
            entries = [
                (r["seq"], r["tbl"], r["row_id"], r["version"], r["prev_hash"], r["hash"])
                for r in await conn.fetch(
                    "SELECT seq, tbl, row_id, version, prev_hash, hash FROM chain ORDER BY seq"
                )
            ]
            tables: dict[str, list[tuple[int, dict[str, Any]]]] = {}
            for table in chain.TABLES:
                rows = await conn.fetch(f"SELECT * FROM {table} ORDER BY created_at, id")
                tables[table] = [(i, dict(r)) for i, r in enumerate(rows, 1)]
            report = chain.check(entries, lambda table: tables[table])
            missing = [
                chain.Problem(
                    (0, 0),
                    "chain",
                    head,
                    "this head, recorded earlier, is no longer in the chain: it was rewritten "
                    "or cut",
                )
                for head in heads
                if not await conn.fetchval("SELECT 1 FROM chain WHERE hash=$1", head)
            ]
    finally:
        await conn.close()
    return dataclasses.replace(report, problems=missing + report.problems)
