"""`store`: each test of the store's behaviour runs on SQLite and on a real PostgreSQL.

Test ids read `[sqlite]` / `[postgres]` (tests/store/backends.py). What only SQLite has (file
modes, the one-process lock, WAL, journals from before the chain) is tested in the
`test_sqlite_*` modules and tests named so; what only PostgreSQL has (replicas sharing a
journal) in tests/store_pg.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.store.backends import PgStore, SqliteStore, StoreUnderTest


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    """The journal's location on SQLite, then on PostgreSQL (the test cluster)."""
    under_test: SqliteStore | PgStore
    if request.param == "sqlite":
        under_test = SqliteStore(tmp_path)
    else:
        under_test = PgStore(request.getfixturevalue("pg_cluster"))
    yield under_test
    await under_test.release()
