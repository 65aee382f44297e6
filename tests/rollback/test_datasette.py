"""Rollback of writes through Datasette's JSON write API (SQL over HTTP, Datasette 1.0 from
PyPI) made by an agent with an API token through undoproxy, with zero rules: only the
`datasette` pack.

Before each write undoproxy reads the table's primary keys and each row the write names; on
rollback each row is put back and read back at its own URL. The test reads the SQLite file
directly before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.rollback.helpers import details, rollback_ends
from tests.support.proc import Undoproxy
from tests.support.rpcservers import Datasette


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Datasette]:
    server = Datasette(tmp_path_factory.mktemp("datasette"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("ds-proxy"), {"packs": ["datasette"]}).start()
    yield instance
    instance.stop()


@pytest.fixture
def tables(ds: Datasette, session_id: str) -> tuple[str, str]:
    sid = session_id.replace("-", "_")
    notes, tags = f"notes_{sid}", f"tags_{sid}"
    ds.sql(
        f"""
        create table {notes} (id integer primary key, title text, body text);
        insert into {notes} values (1, 'first', 'x'), (2, 'second', 'y'), (3, 'third', null);
        create table {tags} (name text primary key, n integer);
        insert into {tags} values ('a/b', 1), ('c,d', 2);
        """
    )
    return notes, tags


def post(agent: requests.Session, ds: Datasette, path: str, body: dict[str, Any]) -> Any:
    r = agent.post(f"{ds.base_url}/data/{path}", json=body, timeout=30)
    assert r.status_code in (200, 201), r.text
    return r.json()


def test_rows_inserted_upserted_updated_and_deleted_are_undone(
    ds: Datasette, up: Undoproxy, tables: tuple[str, str], session_id: str
) -> None:
    notes, tags = tables
    before = (ds.table(notes), ds.table(tags))
    agent = up.agent(session_id, headers={"Authorization": f"Bearer {ds.token}"})
    post(agent, ds, f"{notes}/-/insert", {"row": {"title": "agent", "body": "new"}})
    post(agent, ds, f"{notes}/-/insert", {"rows": [{"id": 1, "title": "R"}], "replace": True})
    upsert = {"rows": [{"id": 2, "title": "S"}, {"id": 9, "title": "9"}]}
    post(agent, ds, f"{notes}/-/upsert", upsert)
    post(agent, ds, f"{notes}/3/-/update", {"update": {"body": "filled", "title": "T"}})
    post(agent, ds, f"{tags}/a~2Fb/-/delete", {})
    post(agent, ds, f"{tags}/-/insert", {"rows": [{"name": "e f", "n": 5}]})
    made = f"made_{session_id.replace('-', '_')}"
    post(agent, ds, "-/create", {"table": made, "row": {"id": 1, "x": "y"}, "pk": "id"})
    assert (ds.table(notes), ds.table(tags)) != before

    report = rollback_ends(up, session_id, "rolled_back", ["compensated"] * 7)
    assert "1 target as before" in details(report)[1]
    assert (ds.table(notes), ds.table(tags)) == before
    assert ds.table(made) is None


def test_an_insert_whose_rows_cannot_be_told_is_irreversible_and_says_why(
    ds: Datasette, up: Undoproxy, tables: tuple[str, str], session_id: str
) -> None:
    notes, _ = tables
    agent = up.agent(session_id, headers={"Authorization": f"Bearer {ds.token}"})
    post(agent, ds, f"{notes}/-/insert", {"rows": [{"title": "p"}, {"title": "q"}]})
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert '"return": true' in details(report)[0]
