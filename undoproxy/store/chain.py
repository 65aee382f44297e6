"""The journal's keyed hash chain: every version of every step, session, approval and archive
row (`TABLES`; `archives` records what retention removed, `archiving.py`).

`chain` is an append-only table (seq, tbl, row_id, version, prev_hash, hash, key_id,
row_hash). Each insert or update of a row of a chained table appends one entry, in the same
transaction: the row's version (1 when inserted, then 2, 3, ...) and

    row_hash = SHA-256(canonical(table, row as stored after the change))
    hash     = HMAC-SHA256(chain key, prev_hash, table, row_id, row_hash)

(the four as one message, each after its length: `64:<prev_hash>5:steps...`), where
prev_hash is the hash of the entry before it (64 zeros for the first) and key_id names
the chain key (`ChainKey.id`). Every entry is thus authenticated on its own, the link to the
one before it included: an entry edited, inserted, moved, deleted (its successor's prev_hash
no longer fits) or appended without the key fails its own check, whether or not its row has
changed since. The version is not in the HMAC: it follows from the order, which is.

The chain key is derived from the credentials key with HKDF-SHA256
(`CredentialBox.derive(KEY_PURPOSE)`), so it lives outside the journal, next to that key
(`state_dir/credentials.key` or UNDOPROXY_CREDENTIALS_KEY). Why derived and not a file of its
own: replicas and containers already share the credentials key, and a replica whose key
differs refuses to start (`claim_key`), so every writer of a journal has the same chain key
with nothing new to distribute, back up or lose apart from it (a second file could be
restored without the first, or differ between replicas, and leave a journal unverifiable);
and the derivation is one-way, so the HMAC key is not the key that encrypts credentials.

The canonical form is JSON with sorted keys and no spaces, `[table, {column: value}]`, over
every column of the row as SQLite returns it: text as a string (non-ASCII escaped), integers
as integers, reals in Python's shortest exact repr (1 and 1.0 differ), a blob as
{"sha256": its digest}; NULL columns are left out, so a migration that adds a nullable column
keeps every hash valid (one that adds a column with a non-NULL default must rehash the latest
entries).

Entries written before keyed chains have no key_id and no row_hash: their hash is
SHA-256(prev_hash || "\n" || canonical), which anyone can recompute. When undoproxy first opens
such a journal with a key, it appends a keying entry (tbl `chain`, row_id `keyed`) over the
unkeyed head; from then on every entry is keyed, and rewriting the unkeyed part would change
the prev_hash the keying entry authenticates.

How entries are written: the journal writer's connection (and no other) carries TEMP triggers
AFTER INSERT and AFTER UPDATE on the chained tables, which keep the row's NEW values and its
version for the transaction; the writer hashes the transaction's new entries and appends them
just before its COMMIT (`install` returns that step). So every change made through the one
write path — a single row, an executemany batch or a set-based UPDATE (`WHERE
status='held'`) — gets its entry from the row exactly as committed, in the transaction that
changed it; a rolled-back batch takes its entries with it. A connection without the triggers
(the sqlite3 CLI, another program) changes rows without entries, and without the key it
cannot write one: that is what `verify` detects (chainscan.py streams the journal;
chain_verify.py checks each entry's key and each row's content, for it, for archive files
and for archiving before it cuts the chain).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import aiosqlite

GENESIS = "0" * 64
# What the chain covers, in backfill order; `archives`: what retention removed (archiving.py).
TABLES = ("sessions", "steps", "approvals", "archives")
KEY_PURPOSE = b"undoproxy journal chain v1"  # HKDF info of the chain key
KEYING_TABLE, KEYING_ROW = "chain", "keyed"  # the keying entry (see the module docstring)
# SQLite's (after main's 005_session_counts and 006_archives); PostgreSQL's is
# postgres/schema.py's.
KEYED_MIGRATION = "007_keyed_chain"

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
# Both NULL in an entry from before keyed chains.
ADD_KEYS = """
ALTER TABLE chain ADD COLUMN key_id TEXT;
ALTER TABLE chain ADD COLUMN row_hash TEXT
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


def row_hash(payload: bytes) -> str:
    """SHA-256 of a row's canonical form, hex: what a keyed entry says its row was."""
    return hashlib.sha256(payload).hexdigest()


def entry_hash(prev_hash: str, payload: bytes) -> str:
    """An unkeyed entry's hash (from before keyed chains): SHA-256 of the previous entry's
    hash and a row's canonical form, hex."""
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + payload).hexdigest()


class KeySource(Protocol):
    """What a chain key is derived from: the credentials key (`CredentialBox`)."""

    def derive(self, purpose: bytes) -> bytes:
        """A key for `purpose`, derived one-way from this one."""
        ...


@dataclass(frozen=True)
class ChainKey:
    """The key every new entry is authenticated with (HMAC-SHA256). `id` names it in each
    entry: a digest of a fixed text under the key, which reveals nothing of it."""

    secret: bytes = field(repr=False)

    @classmethod
    def of(cls, source: KeySource) -> ChainKey:
        """The chain key of an installation, derived from its credentials key."""
        return cls(source.derive(KEY_PURPOSE))

    @cached_property
    def id(self) -> str:
        """16 hex digits that name this key."""
        return hmac.digest(self.secret, b"undoproxy chain key id", "sha256").hex()[:16]

    @cached_property
    def _hmac(self) -> hmac.HMAC:
        # Keyed once; each entry copies it (half the cost of hmac.digest, which keys anew).
        return hmac.new(self.secret, digestmod=hashlib.sha256)

    def entry_hash(self, prev_hash: str, table: str, row_id: str, row_digest: str) -> str:
        """A keyed entry's hash (see the module docstring), hex."""
        mac = self._hmac.copy()
        mac.update(_fields(prev_hash, table, row_id, row_digest))
        return mac.hexdigest()


def _fields(*values: str) -> bytes:
    """The strings as one message that no other strings make: each after its length."""
    return "".join(f"{len(v)}:{v}" for v in values).encode()


def keyring(*sources: KeySource) -> dict[str, ChainKey]:
    """The chain keys of these credentials keys, by id (what `verify` checks entries with)."""
    keys = [ChainKey.of(source) for source in sources]
    return {key.id: key for key in keys}


def keying_row_hash(key_id: str) -> str:
    """The row_hash of the keying entry: what it stands for, the key that begins."""
    return row_hash(canonical(KEYING_TABLE, [("id", KEYING_ROW), ("key_id", key_id)]))


def keying_entry(prev_hash: str, version: int, key: ChainKey) -> tuple[Any, ...]:
    """(tbl, row_id, version, prev_hash, hash, key_id, row_hash) of a keying entry."""
    digest = keying_row_hash(key.id)
    entry = key.entry_hash(prev_hash, KEYING_TABLE, KEYING_ROW, digest)
    return (KEYING_TABLE, KEYING_ROW, version, prev_hash, entry, key.id, digest)


INSERT_ENTRY = (
    "INSERT INTO main.chain (tbl, row_id, version, prev_hash, hash, key_id, row_hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def install(conn: sqlite3.Connection, key: ChainKey) -> Callable[[], None]:
    """Make every insert and update of a chained table on `conn` append its chain entry,
    keyed with `key`; returns `append`, to be called in each transaction just before its
    COMMIT. Keys the chain first when its last entry is unkeyed (`key_the_chain`).

    Call it once on the journal writer's connection, after the migrations: the triggers name
    the columns the tables have now. A trigger copies the row as stored, with its table, id
    and version, into one TEMP table with untyped columns (so every value keeps its type and
    bytes): plain SQL, no Python inside SQLite's step. `append` then reads the transaction's
    new entries in order, hashes them in one pass (the same canonical form and hashes as
    `verify` computes from the rows) and appends them to `chain` in one statement. (A Python
    call per entry from inside the trigger had to win the GIL back from the event loop twice
    per mutation, and cost 12 % of journaled mutations at 8 clients: bench/README.md; the
    entries are written once, with their hash, and `append` is four statements per
    transaction.)
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
    key_the_chain(conn, key)
    key_id, keyed = key.id, key.entry_hash

    def append() -> None:
        pending = conn.execute("SELECT * FROM temp.chain_new ORDER BY chain_seq").fetchall()
        if not pending:
            return
        head = conn.execute("SELECT hash FROM main.chain ORDER BY seq DESC LIMIT 1").fetchone()
        prev = str(head[0]) if head else GENESIS
        entries = []
        for _, table, row_id, version, *values in pending:
            names = columns[table]
            digest = row_hash(canonical(table, zip(names, values[: len(names)], strict=True)))
            entry = keyed(prev, table, row_id, digest)
            entries.append((table, row_id, version, prev, entry, key_id, digest))
            prev = entry
        conn.executemany(INSERT_ENTRY, entries)
        conn.execute("DELETE FROM temp.chain_new")

    return append


def key_the_chain(conn: sqlite3.Connection, key: ChainKey) -> None:
    """Append the keying entry, in a transaction of its own, when the chain's last entry is
    unkeyed (a journal from before keyed chains, or one such an undoproxy wrote to since)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        last = conn.execute(
            "SELECT hash, key_id FROM main.chain ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if last is not None and last[1] is None:
            (version,) = conn.execute(
                "SELECT coalesce(max(version), 0) + 1 FROM main.chain WHERE tbl=? AND row_id=?",
                (KEYING_TABLE, KEYING_ROW),
            ).fetchone()
            conn.execute(INSERT_ENTRY, keying_entry(str(last[0]), int(version), key))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA main.table_info({table})")]


async def backfill(conn: aiosqlite.Connection) -> None:
    """Chain the rows a journal already has (migration 004, inside its transaction): unkeyed,
    as chains were then; the writer keys the chain when it opens the journal."""
    async with conn.execute(f"SELECT {_LAST}") as cur:
        row = await cur.fetchone()
    prev = str(row[0]) if row else GENESIS
    for table in TABLES:
        if not await _exists(conn, table):  # a later migration creates it
            continue
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


async def _exists(conn: aiosqlite.Connection, table: str) -> bool:
    async with conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)) as cur:
        return await cur.fetchone() is not None
