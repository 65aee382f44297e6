"""The journal's hash chain: every version of every step, session and approval row, in order.

`chain` is an append-only table (seq, tbl, row_id, version, prev_hash, hash). Each insert or
update of a row of `steps`, `sessions` or `approvals` appends one entry, in the same
transaction: the row's version (1 when inserted, then 2, 3, ...) and

    hash = SHA-256(prev_hash || "\\n" || canonical(table, row as stored after the change))

where prev_hash is the hash of the entry before it (64 zeros for the first). The canonical
form is JSON with sorted keys and no spaces, `[table, {column: value}]`, over every column of
the row as SQLite returns it: text as a string (non-ASCII escaped), integers as integers,
reals in Python's shortest exact repr (1 and 1.0 differ), a blob as {"sha256": its digest};
NULL columns are left out, so a migration that adds a nullable column keeps every hash valid
(one that adds a column with a non-NULL default must rehash the latest entries).

How entries are written: the journal writer's connection (and no other) carries TEMP triggers
AFTER INSERT and AFTER UPDATE on the three tables, which keep the row's NEW values and its
version for the transaction; the writer hashes the transaction's new entries and appends them
just before its COMMIT (`install` returns that step). So every change made through the one
write path — a single row, an executemany batch or a set-based UPDATE (`WHERE
status='held'`) — gets its entry from the row exactly as committed, in the transaction that
changed it; a rolled-back batch takes its entries with it. A connection without the triggers
(the sqlite3 CLI, another program) changes rows without entries, which is what `verify`
detects.

What `verify` checks (read-only, in one read transaction, so it works while undoproxy runs):
- the links: each entry's prev_hash is the hash of the entry before it (an entry deleted,
  inserted or moved breaks the link at that point), and each row's versions follow each other
  1, 2, 3... (a deleted entry leaves a gap that names its row);
- each row's content: recomputed from the row as stored, it matches the hash of the row's last
  entry (any column edited afterwards, in any way, does not);
- presence: every row has an entry (a row inserted outside undoproxy has none), every row the
  chain names still exists (a deleted row does not).
Nothing in undoproxy deletes these rows; a retention feature would have to chain its deletions
(a tombstone entry) for `verify` to tell them from tampering.
Not covered: `settings`, `migrations` and the chain's own tail. Without a secret, anyone who
can write the file and knows this scheme can recompute the chain, or cut its last entries
together with their rows; `verify` prints the chain's head so that it can be recorded
elsewhere, and `verify --head HASH` later fails if the chain no longer contains it.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiosqlite

GENESIS = "0" * 64
TABLES = ("sessions", "steps", "approvals")  # what the chain covers, in backfill order
_NOUN = {"sessions": "session", "steps": "step", "approvals": "approval"}

CREATE = """
CREATE TABLE chain (
    seq INTEGER PRIMARY KEY,
    tbl TEXT NOT NULL,
    row_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE UNIQUE INDEX chain_by_row ON chain (tbl, row_id, version)
"""
_LAST = f"coalesce((SELECT hash FROM chain ORDER BY seq DESC LIMIT 1), '{GENESIS}')"


# One encoder for every row: json.dumps would build a new one per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical(table: str, row: Iterable[tuple[str, Any]]) -> bytes:
    """The bytes a row's hash covers (see the module docstring)."""
    body = {
        name: {"sha256": hashlib.sha256(value).hexdigest()} if type(value) is bytes else value
        for name, value in row
        if value is not None
    }
    return _ENCODER.encode([table, body]).encode()


def entry_hash(prev_hash: str, payload: bytes) -> str:
    """SHA-256 of the previous entry's hash and a row's canonical form, hex."""
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + payload).hexdigest()


def install(conn: sqlite3.Connection) -> Callable[[], None]:
    """Make every insert and update of a chained table on `conn` append its chain entry;
    returns `seal`, to be called in each transaction just before its COMMIT.

    Call it once on the journal writer's connection, after the migrations: the triggers name
    the columns the tables have now. A trigger copies the row as stored, with its table, id
    and version, into one TEMP table with untyped columns (so every value keeps its type and
    bytes): plain SQL, no Python inside SQLite's step. `seal` then reads the transaction's new
    entries in order, hashes them in one pass (the same canonical form and hash as `verify`
    computes from the rows) and appends them to `chain` in one statement. (A Python call per
    entry from inside the trigger had to win the GIL back from the event loop twice per
    mutation, and cost 12 % of journaled mutations at 8 clients: bench/README.md; the entries
    are written once, with their hash, and the seal is four statements per transaction.)
    """
    columns = {t: _columns(conn, t) for t in TABLES}
    width = max(len(names) for names in columns.values())
    conn.execute("PRAGMA temp_store=MEMORY")  # the entries of one transaction, never a file
    # Untyped columns: each value is kept exactly as stored (no affinity converts it).
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS chain_new (chain_seq INTEGER PRIMARY KEY, tbl, row_id, "
        f"version, {', '.join(f'c{i}' for i in range(width))})"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS temp.chain_new_row ON chain_new (tbl, row_id)")
    for table, names in columns.items():
        into = ", ".join(f"c{i}" for i in range(len(names)))
        new = ", ".join(f"NEW.{n}" for n in names)
        # The row's next version: after its entries of this transaction, else after those of
        # the chain (an insert is 1, unless the id was there before: INSERT OR REPLACE).
        version = (
            "coalesce((SELECT max(version) FROM temp.chain_new "
            f"WHERE tbl='{table}' AND row_id=NEW.id), "
            f"(SELECT max(version) FROM main.chain WHERE tbl='{table}' AND row_id=NEW.id), 0) + 1"
        )
        for event in ("INSERT", "UPDATE"):
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS chain_{table}_{event.lower()} "
                f"AFTER {event} ON main.{table} BEGIN "
                f"INSERT INTO chain_new (tbl, row_id, version, {into}) "
                f"VALUES ('{table}', NEW.id, {version}, {new}); END"
            )

    def seal() -> None:
        pending = conn.execute("SELECT * FROM temp.chain_new ORDER BY chain_seq").fetchall()
        if not pending:
            return
        head = conn.execute("SELECT hash FROM main.chain ORDER BY seq DESC LIMIT 1").fetchone()
        prev = str(head[0]) if head else GENESIS
        entries = []
        for _, table, row_id, version, *values in pending:
            names = columns[table]
            row = zip(names, values[: len(names)], strict=True)
            digest = entry_hash(prev, canonical(table, row))
            entries.append((table, row_id, version, prev, digest))
            prev = digest
        conn.executemany(
            "INSERT INTO main.chain (tbl, row_id, version, prev_hash, hash) VALUES (?, ?, ?, ?, ?)",
            entries,
        )
        conn.execute("DELETE FROM temp.chain_new")

    return seal


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]


async def backfill(conn: aiosqlite.Connection) -> None:
    """Chain the rows a journal already has (migration 004, inside its transaction)."""
    async with conn.execute(f"SELECT {_LAST}") as cur:
        row = await cur.fetchone()
    prev = str(row[0]) if row else GENESIS
    for table in TABLES:
        entries = []
        async with conn.execute(f"SELECT * FROM {table} ORDER BY rowid") as cur:
            names = [d[0] for d in cur.description]
            async for values in cur:
                digest = entry_hash(prev, canonical(table, zip(names, values, strict=True)))
                entries.append((table, values[names.index("id")], 1, prev, digest))
                prev = digest
        await conn.executemany(
            "INSERT INTO chain (tbl, row_id, version, prev_hash, hash) VALUES (?, ?, ?, ?, ?)",
            entries,
        )


@dataclass(frozen=True)
class Problem:
    """One thing `verify` found wrong; `position` orders problems (chain seq, then rowid)."""

    position: tuple[int, int]
    table: str
    row_id: str
    what: str
    where: str = ""  # e.g. "session s1, #3" for a step still in the journal

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{_NOUN.get(self.table, self.table)} {self.row_id}{where}: {self.what}"


@dataclass(frozen=True)
class Report:
    """What `verify` saw: how many rows it checked, the chain's head, and the problems."""

    steps: int
    sessions: int
    approvals: int
    entries: int
    head: str
    problems: list[Problem]


class NoChain(Exception):
    """The journal has no chain table yet (no undoproxy with migration 004 has opened it)."""


def verify(path: Path, *, heads: Iterable[str] = ()) -> Report:
    """Check the chain of the journal at `path`, read-only (undoproxy may be running).

    `heads`: hashes an earlier verify printed; the chain must still contain each of them (what
    came before a recorded head cannot be rewritten without losing it).
    Raises sqlite3.Error when the file cannot be read as a journal, NoChain without a chain.
    """
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None)
    # A text column edited into invalid UTF-8 must be reported, not crash the check.
    conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("BEGIN")  # one snapshot: the rows and the chain as of one commit
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='chain'").fetchone():
            migrated = (
                conn.execute("SELECT 1 FROM sqlite_master WHERE name='migrations'").fetchone()
                and conn.execute("SELECT 1 FROM migrations WHERE name='004_chain'").fetchone()
            )
            if migrated:
                raise NoChain(f"{path} had a hash chain, and its chain table was dropped")
            raise NoChain(f"{path} has no hash chain yet: start undoproxy once to add it")
        report = check(
            conn.execute(
                "SELECT seq, tbl, row_id, version, prev_hash, hash FROM chain ORDER BY seq"
            ),
            lambda table: _sqlite_rows(conn, table),
        )
        missing = [
            Problem(
                (0, 0),
                "chain",
                head,
                "this head, recorded earlier, is no longer in the chain: it was rewritten or cut",
            )
            for head in heads
            if not conn.execute("SELECT 1 FROM chain WHERE hash=?", (head,)).fetchone()
        ]
        return dataclasses.replace(report, problems=missing + report.problems)
    finally:
        conn.close()


def _sqlite_rows(conn: sqlite3.Connection, table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    cur = conn.execute(f"SELECT rowid AS _rowid, * FROM {table} ORDER BY rowid")
    names = [d[0] for d in cur.description][1:]
    for rowid, *values in cur:
        yield rowid, dict(zip(names, values, strict=True))


Entry = tuple[int, str, str, int, str, str]  # seq, tbl, row_id, version, prev_hash, hash


def check(
    chain: Iterable[Entry], rows: Callable[[str], Iterable[tuple[int, dict[str, Any]]]]
) -> Report:
    """Check the chain's entries (in order) against each table's rows, as (position, row)
    pairs with every column; the same check for every store (see the module docstring)."""
    problems: list[Problem] = []
    breaks: list[int] = []  # chain seqs where a link is broken
    gaps: list[tuple[int, int, Problem]] = []  # a row's missing version: between these seqs
    last: dict[tuple[str, str], tuple[int, int, str, str]] = {}  # (table, id) -> last entry
    prev, entries, before_it = GENESIS, 0, "the start"
    for seq, table, row_id, version, prev_hash, digest in chain:
        entries += 1
        if prev_hash != prev:
            breaks.append(seq)
            problems.append(
                Problem(
                    (seq, 0),
                    table,
                    row_id,
                    f"chain entry {seq} does not follow {before_it} "
                    "(an entry was deleted, inserted, moved or edited)",
                )
            )
        prev, before_it = digest, f"entry {seq} ({_NOUN.get(table, table)} {row_id})"
        before = last.get((table, row_id))
        expected = before[1] + 1 if before else 1
        if version > expected:
            what = f"version {expected} is missing from the chain (a chain entry was deleted)"
            gaps.append((before[0] if before else 0, seq, Problem((seq, -1), table, row_id, what)))
        elif version < expected:
            what = f"chain entry {seq} is version {version}, after version {expected - 1}"
            problems.append(Problem((seq, 0), table, row_id, what + " (entries were moved)"))
        last[(table, row_id)] = (seq, version, prev_hash, digest)
    for after, seq, gap in gaps:
        # The missing entry sat where the first broken link after the row's previous entry is.
        i = bisect.bisect_left(breaks, after + 1)
        at = breaks[i] if i < len(breaks) and breaks[i] <= seq else seq
        problems.append(dataclasses.replace(gap, position=(at, -1)))
    counts = {}
    wheres: dict[tuple[str, str], str] = {}  # where each step is, to name it in any problem
    for table in TABLES:
        n = 0
        for rowid, row in rows(table):
            n += 1
            where = f"session {row['session_id']}, #{row['seq']}" if table == "steps" else ""
            wheres[(table, row["id"])] = where
            entry = last.pop((table, row["id"]), None)
            if entry is None:
                problems.append(
                    Problem(
                        (2**62, rowid),
                        table,
                        row["id"],
                        "not in the chain: added to the database outside undoproxy",
                        where,
                    )
                )
                continue
            seq, _, prev_hash, digest = entry
            if entry_hash(prev_hash, canonical(table, row.items())) != digest:
                problems.append(
                    Problem(
                        (seq, 1),
                        table,
                        row["id"],
                        f"its content differs from what undoproxy journaled (chain entry {seq}): "
                        "the row was edited outside undoproxy",
                        where,
                    )
                )
        counts[table] = n
    for (table, row_id), (seq, *_) in last.items():
        problems.append(
            Problem(
                (seq, 2),
                table,
                row_id,
                f"deleted: the chain has it (entry {seq}), the journal does not",
            )
        )
    problems = sorted(
        (
            dataclasses.replace(p, where=p.where or wheres.get((p.table, p.row_id), ""))
            for p in problems
        ),
        key=lambda p: p.position,
    )
    return Report(
        steps=counts["steps"],
        sessions=counts["sessions"],
        approvals=counts["approvals"],
        entries=entries,
        head=prev,
        problems=problems,
    )
