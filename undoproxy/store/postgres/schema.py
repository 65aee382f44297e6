"""The PostgreSQL schema as named migrations, applied under an advisory lock at start.

The tables and columns are SQLite's (`undoproxy.store.schema`), with PostgreSQL's types
chosen so that every value reads back as the same Python type (REAL -> double precision,
INTEGER -> integer/bigint, BLOB -> bytea): the hash chain's canonical form is then the same
function of a row on both. Additions for many replicas:
- `steps.replica`, `approvals.replica`: the replica that inserted the row, filled by the
  database from the writer connection's `undoproxy.replica` setting (`connect`), so that a
  replica's crash recovery touches only its own rows;
- `replicas`: one row per running replica, its heartbeat (see `replicas.py`).

Several replicas may start at once: `migrate` runs under `pg_advisory_lock(MIGRATE)`, so one
applies what is missing and the others then find it applied.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from undoproxy.store import archives, chain, counts

# Advisory lock keys. One bigint key each for the global locks; two int keys (class, hash of
# a name) for the per-session and per-replica ones.
MIGRATE = 0x756E646F_0001  # "undo" + 1
CHAIN = 0x756E646F_0002  # every write of chained rows, across replicas, one at a time
REPLICA_CLASS = 0x756E_6402  # (class, hashtext(replica name)): the replica is alive
CHANNEL = "undoproxy"  # LISTEN/NOTIFY channel of journal events
KEYED_MIGRATION = "pg_005_keyed_chain"

_STEP_COLUMNS = """
    id text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions(id),
    seq integer NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    method text NOT NULL,
    url text NOT NULL,
    is_mutation integer NOT NULL,
    rule text,
    risk text,
    action text,
    captures text,
    request_headers text,
    request_body bytea,
    request_body_len bigint NOT NULL DEFAULT 0,
    request_body_sha256 text,
    status text NOT NULL,
    response_status integer,
    response_headers text,
    response_body bytea,
    response_body_len bigint,
    duration_ms double precision,
    error text,
    snapshot text,
    compensation text,
    compensation_status text,
    compensation_detail text,
    credentials bytea,
    intent text,
    meta text,
    resolved_by text,
    resolved_at double precision,
    resolved_reason text,
    replica text DEFAULT current_setting('undoproxy.replica', true),
    UNIQUE (session_id, seq)
"""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "pg_001_journal",
        f"""
        CREATE TABLE sessions (
            id text PRIMARY KEY,
            token text NOT NULL,
            intent text,
            agent text,
            state text NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            frozen integer NOT NULL DEFAULT 0
        );
        CREATE TABLE steps ({_STEP_COLUMNS});
        CREATE INDEX steps_by_session ON steps (session_id, seq);
        CREATE INDEX steps_by_status ON steps (status);
        CREATE TABLE approvals (
            id text PRIMARY KEY,
            session_id text NOT NULL REFERENCES sessions(id),
            step_id text NOT NULL REFERENCES steps(id),
            step_ids text NOT NULL,
            fingerprint text NOT NULL,
            method text NOT NULL,
            url text NOT NULL,
            rule text,
            risk text,
            state text NOT NULL,
            created_at double precision NOT NULL,
            expires_at double precision NOT NULL,
            decided_at double precision,
            decided_by text,
            reason text,
            context text,
            replica text DEFAULT current_setting('undoproxy.replica', true)
        );
        CREATE INDEX approvals_by_state ON approvals (state, created_at);
        CREATE INDEX approvals_by_session ON approvals (session_id, created_at);
        CREATE TABLE settings (
            name text PRIMARY KEY,
            value text NOT NULL,
            updated_at double precision NOT NULL
        );
        CREATE TABLE chain (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            tbl text NOT NULL,
            row_id text NOT NULL,
            version integer NOT NULL,
            prev_hash text NOT NULL,
            hash text NOT NULL
        );
        CREATE UNIQUE INDEX chain_by_row ON chain (tbl, row_id, version);
        CREATE TABLE replicas (
            name text PRIMARY KEY,
            backend_pid integer NOT NULL,
            host text NOT NULL,
            heartbeat double precision NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            seen_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX steps_by_replica ON steps (replica, status);
        CREATE INDEX approvals_by_replica ON approvals (replica, state);
        """,
    ),
    (
        # A rollback's lease on its session (`leases.py`): who holds it and until when, in
        # the database's clock; every `compensating` mark is fenced on it.
        "pg_002_rollback_leases",
        """
        CREATE TABLE rollback_leases (
            session_id text PRIMARY KEY,
            token text NOT NULL,
            until double precision NOT NULL
        );
        """,
    ),
    # Each session's counts, kept by a trigger with its steps (store/counts.py).
    ("pg_003_session_counts", counts.POSTGRES),
    # What retention removed, chained (store/archives.py).
    ("pg_004_archives", archives.POSTGRES),
    # Keyed chain entries (store/chain.py); the replica that opens the journal first keys it.
    # After the migrations main shipped first (pg_003, pg_004), whatever a journal has.
    (KEYED_MIGRATION, chain.ADD_KEYS),
)


async def connect(
    url: str, replica: str, *, lock_timeout_ms: int | None = None, **kwargs: Any
) -> asyncpg.Connection:
    """A connection whose inserts into `steps` and `approvals` name `replica`; with
    `lock_timeout_ms`, a statement waiting longer than that for a lock fails."""
    settings = {"application_name": f"undoproxy {replica}"[:63]}
    if lock_timeout_ms is not None:
        settings["lock_timeout"] = str(lock_timeout_ms)
    conn: asyncpg.Connection = await asyncpg.connect(url, server_settings=settings, **kwargs)
    await conn.execute("SELECT set_config('undoproxy.replica', $1, false)", replica)
    return conn


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply the migrations not yet recorded, one replica at a time; the names applied."""
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATE)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations "
            "(name text PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        done = {r["name"] for r in await conn.fetch("SELECT name FROM migrations")}
        applied = []
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES ($1, $2)", name, time.time()
                )
            applied.append(name)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATE)
