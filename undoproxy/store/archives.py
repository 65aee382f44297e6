"""Retention that keeps the proof: what `undoproxy archive` removed from the journal.

(The archiving itself is `archiving.py`; this module holds the record it leaves.)
"""

from __future__ import annotations

TABLE = """
CREATE TABLE archives (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    idle_before REAL NOT NULL,
    sessions INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    approvals INTEGER NOT NULL,
    session_ids TEXT NOT NULL,
    chain_seq INTEGER NOT NULL,
    chain_hash TEXT NOT NULL,
    entries INTEGER NOT NULL,
    file TEXT,
    sha256 TEXT NOT NULL
);
CREATE INDEX archives_by_chain ON archives (chain_seq);
CREATE TABLE archive_guard (ok INTEGER CHECK (ok = 1))
"""
POSTGRES = """
CREATE TABLE archives (
    id text PRIMARY KEY,
    created_at double precision NOT NULL,
    idle_before double precision NOT NULL,
    sessions bigint NOT NULL,
    steps bigint NOT NULL,
    approvals bigint NOT NULL,
    session_ids text NOT NULL,
    chain_seq bigint NOT NULL,
    chain_hash text NOT NULL,
    entries bigint NOT NULL,
    file text,
    sha256 text NOT NULL
);
CREATE INDEX archives_by_chain ON archives (chain_seq);
CREATE TABLE archive_guard (ok integer CHECK (ok = 1));
"""
