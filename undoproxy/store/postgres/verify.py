"""`undoproxy verify` on a PostgreSQL journal: the same streaming check of the keyed chain as
on SQLite (`chainscan`), in constant memory.

Read-only, in one REPEATABLE READ transaction (the rows and the chain as of one moment, while
replicas keep writing), every pass read through a server-side cursor. The rows are read as
asyncpg returns them, which is how the writer hashed them (`PgWriter`), so a row edited with
`psql` in any column no longer matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import asyncpg

from undoproxy.store import chain, chainscan
from undoproxy.store.chain_verify import NoChain
from undoproxy.store.chainscan import Cut, Head, Progress, Scan, Ticker
from undoproxy.store.postgres.schema import KEYED_MIGRATION

FETCH = 1000  # rows a cursor brings at a time


async def verify(
    url: str,
    *,
    heads: Iterable[str] = (),
    since: str | None = None,
    progress: Progress | None = None,
    archived_heads: Iterable[str] = (),
    keys: Mapping[str, chain.ChainKey] | None = None,
) -> chainscan.Report:
    """Check the chain of the journal at `url` with `keys` (see `chainscan.verify_sqlite`);
    NoChain when it has none, ValueError when `since` is not in the chain."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            if not await conn.fetchval("SELECT to_regclass('chain') IS NOT NULL"):
                if await conn.fetchval("SELECT to_regclass('migrations') IS NOT NULL"):
                    # Every PostgreSQL journal was created with its chain.
                    raise NoChain("the journal had a hash chain, and its table was dropped")
                raise NoChain(
                    "the journal has no hash chain yet: start undoproxy once to create it"
                )
            cut = await pg_cut(conn)
            keyed = await conn.fetchval(
                "SELECT count(*) = 2 FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'chain' AND column_name IN "
                "('key_id', 'row_hash')"
            )
            start = None
            if since is not None:
                found = await conn.fetchrow(
                    f"SELECT seq, {_keyed_select(keyed)} FROM chain WHERE hash=$1", since
                )
                if found is None:
                    raise ValueError(f"the head {since} is not in the chain: verify it all")
                start = Head(int(found[0]), since, found[1])
            migrated = await conn.fetchval(
                "SELECT to_regclass('migrations') IS NOT NULL"
            ) and await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM migrations WHERE name = $1)", KEYED_MIGRATION
            )
            scan = Scan(keys or {}, cut=cut, since=start, keyed_by_migration=bool(migrated))
            await _scan(conn, scan, Ticker(progress), keyed)
            archived = set(archived_heads)
            missing = [
                chainscan.head_problem(head, cut)
                for head in heads
                if head not in archived
                and not await conn.fetchval("SELECT 1 FROM chain WHERE hash=$1", head)
                and not (cut is not None and head == cut.hash)
            ]
            unplaced = [p.row_id for p in scan.problems() if p.table == "steps" and not p.where]
            wheres = {
                r["id"]: f"session {r['session_id']}, #{r['seq']}"
                for r in await conn.fetch(
                    "SELECT id, session_id, seq FROM steps WHERE id = ANY($1)", unplaced
                )
            }
            report = scan.report(lambda ids: wheres)
    finally:
        await conn.close()
    return dataclasses.replace(report, problems=missing + report.problems)


async def pg_cut(conn: asyncpg.Connection) -> Cut | None:
    """The last archive's cut, if the journal was ever archived."""
    if not await conn.fetchval("SELECT to_regclass('archives') IS NOT NULL"):
        return None
    row = await conn.fetchrow(
        "SELECT id, chain_seq, chain_hash FROM archives ORDER BY chain_seq DESC LIMIT 1"
    )
    return Cut(row["id"], int(row["chain_seq"]), row["chain_hash"]) if row else None


def _keyed_select(keyed: bool, alias: str = "") -> str:
    """An entry's key_id and row_hash, as selected (NULLs in a chain from before keyed chains
    that no undoproxy has opened since: it has no such columns)."""
    return f"{alias}key_id, {alias}row_hash" if keyed else "NULL, NULL"


async def _scan(conn: asyncpg.Connection, scan: Scan, ticker: Ticker, keyed: bool) -> None:
    # Entries up to a cut are ignored: an archive deletes them right after its commit.
    floor, low, incremental = chainscan.bounds(scan.cut, scan.since)
    total = await conn.fetchval("SELECT count(*) FROM chain WHERE seq > $1", low)
    n = 0
    async for r in conn.cursor(
        f"SELECT seq, tbl, row_id, prev_hash, hash, {_keyed_select(keyed)} FROM chain "
        "WHERE seq > $1 ORDER BY seq",
        low,
        prefetch=FETCH,
    ):
        n += 1
        scan.entry(*r)
        ticker.tick("chain links", n, total)
    rows_later = (
        " AND (tbl, row_id) IN (SELECT tbl, row_id FROM chain WHERE seq > $2)"
        if incremental
        else ""
    )
    n = 0
    async for r in conn.cursor(
        f"SELECT tbl, row_id, version, seq FROM chain WHERE seq > $1{rows_later} "
        "ORDER BY tbl, row_id, version",
        *((floor, low) if incremental else (floor,)),
        prefetch=FETCH,
    ):
        n += 1
        scan.version(r["tbl"], r["row_id"], r["version"], r["seq"])
        ticker.tick("chain versions", n, total)
    for table in chain.TABLES:
        if not await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table):
            continue
        head = (
            "SELECT c.seq AS _seq, c.prev_hash AS _prev, c.hash AS _hash, "
            f"{_keyed_select(keyed, 'c.')}, t.*"
        )
        if incremental:
            rows = (
                f"{head} FROM chain c JOIN {table} t ON t.id = c.row_id "
                f"WHERE c.tbl = '{table}' AND c.seq > $1 AND c.version = (SELECT max(version) "
                f"FROM chain m WHERE m.tbl = '{table}' AND m.row_id = c.row_id) ORDER BY c.seq"
            )
        else:
            rows = (
                f"{head} FROM {table} t LEFT JOIN LATERAL (SELECT seq, prev_hash, hash, "
                f"{_keyed_select(keyed)} FROM chain WHERE tbl = '{table}' AND row_id = t.id "
                "ORDER BY version DESC LIMIT 1) c ON c.seq > $1 ORDER BY t.created_at, t.id"
            )
        count = await conn.fetchval(f"SELECT count(*) FROM {table}")
        n = 0
        async for r in conn.cursor(rows, low, prefetch=FETCH):
            n += 1
            values = list(r.items())
            entry = None if r["_seq"] is None else (r[0], r[1], r[2], r[3], r[4])
            scan.row(table, n, values[5:], entry)
            ticker.tick(f"{table} rows", n, count)
        async for r in conn.cursor(
            f"SELECT c.row_id, max(c.seq) AS seq FROM chain c WHERE c.tbl = '{table}' "
            f"AND c.seq > $1 AND NOT EXISTS (SELECT 1 FROM {table} t WHERE t.id = c.row_id) "
            "GROUP BY c.row_id",
            low,
            prefetch=FETCH,
        ):
            scan.gone(table, r["row_id"], r["seq"])
