"""The journal on a real PostgreSQL, what only it has: replicas sharing one journal and one
chain, `verify` naming a `psql` edit, its permissions. What both stores do is tested on both
(tests/store, the `store` fixture)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tests.store.backends import _keys
from tests.store.helpers import a_step
from tests.support.postgres import Cluster
from undoproxy.errors import UndoproxyError
from undoproxy.store.postgres import schema
from undoproxy.store.postgres.journal import PgJournal
from undoproxy.store.postgres.verify import verify
from undoproxy.store.records import Session


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


EDITS = [
    ("UPDATE steps SET url='https://elsewhere.test/' WHERE seq=2", "steps", "edited outside"),
    ("UPDATE steps SET duration_ms=duration_ms WHERE seq=2", None, None),  # no change: fine
    ("UPDATE steps SET status='compensated' WHERE seq=1", "steps", "edited outside"),
    ("UPDATE sessions SET frozen=1", "sessions", "edited outside"),
    ("DELETE FROM steps WHERE seq=3", "steps", "deleted"),
    (
        "INSERT INTO steps (id, session_id, seq, created_at, updated_at, method, url, "
        "is_mutation, status) VALUES ('st_forged', 's1', 9, 1, 1, 'GET', 'https://x.test/', 0, "
        "'succeeded')",
        "steps",
        "added to the database outside",
    ),
    ("DELETE FROM chain WHERE seq=(SELECT max(seq) - 1 FROM chain)", "steps", "chain entry"),
]


@pytest.mark.parametrize(("sql", "table", "what"), EDITS)
async def test_verify_names_a_change_made_with_psql(
    pg_url: str, pg_cluster: Cluster, sql: str, table: str | None, what: str | None
) -> None:
    journal = await PgJournal.connect(pg_url)
    try:
        journal.add_session(Session(id="s1"))
        for _ in range(3):
            step = a_step(journal, "s1", duration_ms=2.5)
            await journal.write_ahead(step)
            journal.update(step, status="succeeded")
        await journal.writer.flush()
    finally:
        await journal.close()
    assert (await verify(pg_url, keys=_keys())).problems == []

    pg_cluster.psql(sql, database_of(pg_url))
    problems = (await verify(pg_url, keys=_keys())).problems
    if table is None:
        assert problems == []
        return
    assert problems, sql
    assert problems[0].table == table
    assert what in str(problems[0])


async def test_replicas_number_one_sessions_steps_in_order_and_share_one_chain(
    pg_url: str,
) -> None:
    a, b = await asyncio.gather(PgJournal.connect(pg_url), PgJournal.connect(pg_url))
    try:
        a.add_session(Session(id="s1"))
        await a.writer.flush()
        assert await b.find_session("s1") is not None
        ids = []
        for i in range(10):
            journal = (a, b)[i % 2]
            step = a_step(journal, "s1")
            await journal.write_ahead(step)
            ids.append(step.id)
        # both at once, too
        more = [a_step(j, "s1") for j in (a, b, a, b)]
        await asyncio.gather(*((a, b)[i % 2].write_ahead(s) for i, s in enumerate(more)))
        steps = await a.steps("s1")
        assert [s.seq for s in steps] == list(range(1, 15))
        assert [s.id for s in steps][:10] == ids
        assert sorted(s.seq for s in more) == [11, 12, 13, 14]
    finally:
        await asyncio.gather(a.close(), b.close())
    assert (await verify(pg_url, keys=_keys())).problems == []


async def test_replicas_starting_at_once_migrate_once(pg_url: str, pg_cluster: Cluster) -> None:
    journals = await asyncio.gather(*(PgJournal.connect(pg_url) for _ in range(4)))
    await asyncio.gather(*(j.close() for j in journals))
    count = pg_cluster.psql("SELECT count(*) FROM migrations", database_of(pg_url))
    assert count == str(len(schema.MIGRATIONS))  # each applied once, not once per replica


async def test_a_session_met_by_two_replicas_at_once_is_one_session(pg_url: str) -> None:
    a, b = await asyncio.gather(PgJournal.connect(pg_url), PgJournal.connect(pg_url))
    try:
        a.ensure_session("default")
        b.ensure_session("default")
        await asyncio.gather(a.writer.flush(), b.writer.flush())
        rows = await a.query("SELECT token FROM sessions WHERE id='default'")
        assert len(rows) == 1
        for journal in (a, b):  # each learns the database's token (its own insert was a no-op)
            for _ in range(100):
                if journal.sessions["default"].token == rows[0]["token"]:
                    break
                await asyncio.sleep(0.05)
            assert journal.sessions["default"].token == rows[0]["token"]
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_user_who_cannot_create_the_schema_is_told_so(
    pg_url: str, pg_cluster: Cluster
) -> None:
    name = f"ro_{database_of(pg_url)}"
    pg_cluster.psql(f"CREATE ROLE {name} LOGIN PASSWORD 'ro-secret'")
    url = pg_url.replace(
        "postgres:" + pg_url.split("postgres:", 1)[1].split("@", 1)[0], f"{name}:ro-secret"
    )
    with pytest.raises(UndoproxyError, match="cannot be used: permission denied") as raised:
        await PgJournal.connect(url)
    assert "ro-secret" not in str(raised.value)


CONNECT_AND_CLOSE = """
import asyncio, logging, sys
from undoproxy.store.postgres import schema
from undoproxy.store.postgres.journal import PgJournal
logging.basicConfig(level=logging.WARNING)
async def main():
    await (await PgJournal.connect(sys.argv[1])).close()
asyncio.run(main())
"""


def test_a_replica_that_closes_its_journal_logs_no_error(pg_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CONNECT_AND_CLOSE, pg_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # e.g. not "the journal's listening connection was lost"
