"""Schema as named migrations, applied once each and recorded in the `migrations` table;
the pragmas and file modes every connection to the journal relies on."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite

from undoproxy.store import archives, chain, counts

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "001_sessions_and_steps",
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            token TEXT NOT NULL,
            intent TEXT,
            agent TEXT,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TABLE steps (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            method TEXT NOT NULL,
            url TEXT NOT NULL,
            is_mutation INTEGER NOT NULL,
            rule TEXT,
            risk TEXT,
            action TEXT,
            captures TEXT,
            request_headers TEXT,
            request_body BLOB,
            request_body_len INTEGER NOT NULL DEFAULT 0,
            request_body_sha256 TEXT,
            status TEXT NOT NULL,
            response_status INTEGER,
            response_headers TEXT,
            response_body BLOB,
            response_body_len INTEGER,
            duration_ms REAL,
            error TEXT,
            snapshot TEXT,
            compensation TEXT,
            compensation_status TEXT,
            compensation_detail TEXT,
            credentials BLOB,
            UNIQUE (session_id, seq)
        );
        CREATE INDEX steps_by_session ON steps (session_id, seq);
        CREATE INDEX steps_by_status ON steps (status);
    """,
    ),
    (
        "002_approvals",
        """
        CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions(id),
            step_id TEXT NOT NULL REFERENCES steps(id),
            step_ids TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            method TEXT NOT NULL,
            url TEXT NOT NULL,
            rule TEXT,
            risk TEXT,
            state TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            decided_at REAL,
            decided_by TEXT,
            reason TEXT,
            context TEXT
        );
        CREATE INDEX approvals_by_state ON approvals (state, created_at);
        CREATE INDEX approvals_by_session ON approvals (session_id, created_at);
    """,
    ),
    (
        "003_intent_meta_resolve_freeze",
        """
        ALTER TABLE steps ADD COLUMN intent TEXT;
        ALTER TABLE steps ADD COLUMN meta TEXT;
        ALTER TABLE steps ADD COLUMN resolved_by TEXT;
        ALTER TABLE steps ADD COLUMN resolved_at REAL;
        ALTER TABLE steps ADD COLUMN resolved_reason TEXT;
        ALTER TABLE sessions ADD COLUMN frozen INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE settings (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            updated_at REAL NOT NULL
        );
    """,
    ),
    # The hash chain (chain.py); the rows a journal already has are chained as they are now.
    ("004_chain", chain.CREATE),
    # Each session's counts, kept by triggers with its steps (counts.py); filled from the
    # steps a journal already has.
    ("005_session_counts", counts.TABLE),
    # What retention removed, chained (archives.py).
    ("006_archives", archives.TABLE),
    # Keyed entries (chain.py): the entries before it stay as they were, and the writer keys
    # the chain when it opens the journal (chain.key_the_chain). After 005 and 006, which
    # journals already have.
    (chain.KEYED_MIGRATION, chain.ADD_KEYS),
)
# Work a migration does in Python after its SQL, in the same transaction.
AFTER: dict[str, Callable[[aiosqlite.Connection], Awaitable[None]]] = {
    "004_chain": chain.backfill,
    "005_session_counts": counts.create_sqlite_triggers,
}

PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    # FULL: every commit fsyncs the WAL, so a committed write-ahead row survives an OS crash or
    # a power loss, not only a crash of undoproxy (NORMAL's guarantee). The writer commits in
    # groups, so concurrent requests share one fsync.
    "PRAGMA synchronous=FULL",
    "PRAGMA foreign_keys=ON",
)
FILE_MODE = 0o600  # the journal holds session proxy tokens in clear
SIDE_FILES = ("-wal", "-shm", "-journal")


def create_private(path: Path) -> None:
    """Create the journal file mode 0600 if missing, and make it and its side files 0600.

    SQLite creates -wal and -shm with the mode of the database file, so a private database
    keeps them private too; existing ones (from an older undoproxy) are tightened here.
    Call it before this process opens any connection to `path`: closing a descriptor of the
    database file drops every POSIX lock the process holds on it, SQLite's included, and
    another process would then take this one's connections for gone and reset the WAL.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    for suffix in SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", FILE_MODE)


async def connect(path: Path, *, busy_timeout_ms: int = 2000) -> aiosqlite.Connection:
    """Open the journal with the pragmas undoproxy relies on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = await aiosqlite.connect(str(path), isolation_level=None)
    await conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    for pragma in PRAGMAS:
        await conn.execute(pragma)
    return conn


def connect_sync(path: Path, *, busy_timeout_ms: int = 2000) -> sqlite3.Connection:
    """A plain connection, for the journal's writer process (see sqlite_child.py)."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    for pragma in PRAGMAS:
        conn.execute(pragma)
    return conn


async def migrate(conn: aiosqlite.Connection) -> list[str]:
    """Apply the migrations not yet recorded; returns the names applied."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    async with conn.execute("SELECT name FROM migrations") as cur:
        done = {row[0] for row in await cur.fetchall()}
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in sql.split(";"):
                if statement.strip():
                    await conn.execute(statement)
            if name in AFTER:
                await AFTER[name](conn)
            await conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied
