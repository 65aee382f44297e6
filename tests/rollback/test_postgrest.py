"""Rollback of row writes through PostgREST's HTTP API (SQL over HTTP, Supabase's
`/rest/v1`), made by the vendor's Python client (postgrest-py) through undoproxy, with zero
rules: only the `postgrest` pack on the server's host.

PostgREST itself installs from neither PyPI, npm nor Debian: the server is a faithful fake
over SQLite following its documented API (tests/support/postgrest.py). Before each write
undoproxy reads the table's primary key from the OpenAPI description and the rows the write's
filters match; rollback puts them back and reads them back by key.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rollback.helpers import details, rollback_ends
from tests.support.postgrest import PostgrestFake, dump, serve
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

try:
    from postgrest import SyncPostgrestClient
except ImportError:  # pragma: no cover
    from tests.support.ci import skip_or_fail

    skip_or_fail("postgrest (postgrest-py) is not installed: pip install -e '.[test]'", module=True)

TOKEN = "pgrst-SECRET-11"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PostgrestFake, ThreadedServer]]:
    fake, running = serve(tmp_path_factory.mktemp("postgrest"), TOKEN)
    yield fake, running
    running.stop()


@pytest.fixture(scope="module")
def up(
    tmp_path_factory: pytest.TempPathFactory, server: tuple[PostgrestFake, ThreadedServer]
) -> Iterator[Undoproxy]:
    config = {"packs": [{"name": "postgrest", "hosts": [f"127.0.0.1:{server[1].port}"]}]}
    instance = Undoproxy(tmp_path_factory.mktemp("pgrst-proxy"), config).start()
    yield instance
    instance.stop()


@pytest.fixture
def table(server: tuple[PostgrestFake, ThreadedServer], session_id: str) -> str:
    fake, _ = server
    name = f"todos_{session_id.replace('-', '_')}"
    with fake.db() as con:
        con.execute(f"create table {name} (id integer primary key, task text, done integer)")
        con.executemany(
            f"insert into {name} values (?, ?, ?)",
            [(1, "write", 0), (2, "test", 0), (3, "ship", 1)],
        )
    return name


def client(
    server: tuple[PostgrestFake, ThreadedServer], up: Undoproxy, session: str
) -> SyncPostgrestClient:
    return SyncPostgrestClient(
        server[1].base_url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        proxy=up.proxy_url(session),
    )


def test_inserts_updates_upserts_and_deletes_by_filter_are_undone(
    server: tuple[PostgrestFake, ThreadedServer], up: Undoproxy, table: str, session_id: str
) -> None:
    fake, _ = server
    before = dump(fake, table)
    db = client(server, up, session_id)
    db.from_(table).insert({"task": "agent"}).execute()
    db.from_(table).insert([{"id": 10, "task": "a"}, {"id": 11, "task": "b"}]).execute()
    db.from_(table).update({"done": 1}).eq("done", 0).execute()
    db.from_(table).upsert([{"id": 2, "task": "TEST"}, {"id": 12, "task": "new"}]).execute()
    db.from_(table).delete().eq("id", 3).execute()
    db.from_(table).delete().eq("task", "nothing-matches").execute()
    assert dump(fake, table) != before

    report = rollback_ends(up, session_id, "rolled_back", ["skipped"] + ["compensated"] * 5)
    assert "found no row it matches" in details(report)[0]
    assert dump(fake, table) == before


def test_a_filter_with_no_key_in_sight_stays_honest(
    server: tuple[PostgrestFake, ThreadedServer], up: Undoproxy, table: str, session_id: str
) -> None:
    """An insert whose answer lists no rows (`return=minimal`) names nothing it made."""
    from postgrest.types import ReturnMethod

    db = client(server, up, session_id)
    db.from_(table).insert({"task": "quiet"}, returning=ReturnMethod.minimal).execute()
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "return=representation" in details(report)[0]
