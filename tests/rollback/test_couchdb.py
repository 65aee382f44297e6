"""Rollback against a real CouchDB-compatible server (PouchDB Server over TLS), the agent a
`requests` client with the database user's Basic auth, through undoproxy.

Each test reads every document directly from the server before and after (never through the
proxy), compares them apart from `_rev` (every write changes it, an undo included), and
asserts what the report says about each step.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.rollback.helpers import details, rollback_ends, statuses
from tests.support.couchdb import AGENT, Couch
from tests.support.proc import Undoproxy

BEFORE = {
    "order-7": {"status": "new", "items": 2, "lines": [{"sku": "A1", "qty": 2}]},
    "order-8": {"status": "paid", "items": 1},
    "order-9": {"status": "void", "items": 0},
    "_design/reports": {"views": {"by_status": {"map": "function (d) { emit(d.status); }"}}},
}


@pytest.fixture(scope="module")
def couch(
    tmp_path_factory: pytest.TempPathFactory, upstream_cert: tuple[Path, Path]
) -> Iterator[Couch]:
    server = Couch(tmp_path_factory.mktemp("couch"), upstream_cert).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    """undoproxy with the couchdb pack on the server's host: every CouchDB write is known."""
    config = {"packs": [{"name": "couchdb", "hosts": ["127.0.0.1"]}]}
    instance = Undoproxy(tmp_path_factory.mktemp("couch-named"), config).start()
    yield instance
    instance.stop()


@pytest.fixture
def db(couch: Couch) -> str:
    name = f"shop-{uuid.uuid4().hex[:8]}"
    couch.create_db(name, BEFORE)
    return name


@pytest.fixture
def url(couch: Couch, db: str) -> str:
    """The test's database."""
    return f"{couch.base_url}/{db}"


def agent(proxy: Undoproxy, session: str, auth: tuple[str, str] = AGENT) -> requests.Session:
    s = proxy.agent(session, headers={"Accept": "application/json"})
    s.auth = auth
    return s


def rules(proxy: Undoproxy, session: str) -> list[str | None]:
    """The rule each mutation step matched, oldest first."""
    r = proxy.api("GET", f"/api/sessions/{session}")
    assert r.status_code == 200, r.text
    return [s["rule"] for s in r.json()["steps"] if s["method"] != "GET"]


def current(s: requests.Session, url: str) -> dict[str, Any]:
    r = s.get(url)
    assert r.status_code == 200, r.text
    return dict(r.json())


def edit(s: requests.Session, url: str, **changes: Any) -> requests.Response:
    """PUT the document at `url` back with `changes`, at the revision it has now."""
    return s.put(url, json={**current(s, url), **changes})


def delete(s: requests.Session, url: str) -> requests.Response:
    """DELETE the document at `url`, at the revision it has now."""
    return s.delete(url, params={"rev": current(s, url)["_rev"]})


def test_documents_created_updated_deleted_and_posted_come_back(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    with agent(named, session_id) as s:
        assert s.put(f"{url}/order-10", json={"status": "new", "items": 5}).status_code == 201
        r = edit(s, f"{url}/order-7", status="shipped", lines=[])
        assert r.status_code == 201, r.text
        assert delete(s, f"{url}/order-8").status_code == 200
        r = s.post(url, json={"status": "draft", "items": 0})
        assert r.status_code == 201, r.text
    assert couch.docs(db) != before
    assert rules(named, session_id) == [
        "couchdb/write-document",
        "couchdb/update-document",
        "couchdb/delete-document",
        "couchdb/post-document",
    ]

    report = rollback_ends(named, session_id, "rolled_back", ["compensated"] * 4)
    assert all("read back" in d for d in details(report))
    assert couch.docs(db) == before


def test_a_document_written_twice_at_a_revision_is_restored(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    doc = f"{url}/order-7"
    with agent(named, session_id) as s:
        rev = current(s, doc)["_rev"]
        for status in ("packed", "shipped"):
            r = s.put(doc, params={"rev": rev}, json={**BEFORE["order-7"], "status": status})
            assert r.status_code == 201, r.text
            rev = r.json()["rev"]

    plan = named.rollback(session_id, dry_run=True)
    assert statuses(plan) == ["planned", "planned"]
    rollback_ends(named, session_id, "rolled_back", ["compensated", "compensated"])
    assert couch.docs(db) == before


def test_bulk_docs_are_undone_document_by_document_on_any_host(
    up: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    """No config: _bulk_docs is CouchDB's alone, so the pack takes it on any host."""
    before = couch.docs(db)
    with agent(up, session_id) as s:
        seven = current(s, f"{url}/order-7")
        eight = current(s, f"{url}/order-8")
        docs = [
            {"_id": "order-10", "status": "new", "items": 3},
            {**seven, "status": "shipped"},
            {"_id": "order-8", "_rev": eight["_rev"], "_deleted": True},
            {"_id": "order-9", "_rev": "1-00000000000000000000000000000000", "status": "x"},
        ]
        r = s.post(f"{url}/_bulk_docs", json={"docs": docs})
        assert r.status_code == 201, r.text
        assert [row.get("error") for row in r.json()] == [None, None, None, "conflict"]
    assert rules(up, session_id) == ["couchdb/bulk-docs"]
    assert couch.docs(db) != before

    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert couch.docs(db) == before


def test_writes_that_name_a_revision_are_recognised_on_any_host(
    up: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    with agent(up, session_id) as s:
        assert edit(s, f"{url}/order-7", items=99).status_code == 201
        assert delete(s, f"{url}/order-9").status_code == 200
        r = edit(s, f"{url}/_design/reports", views={})
        assert r.status_code == 201, r.text
    assert rules(up, session_id) == [
        "couchdb/update-document",
        "couchdb/delete-document",
        "couchdb/update-design-document",
    ]

    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 3)
    assert couch.docs(db) == before


def test_a_created_database_is_deleted_after_the_documents_put_in_it(
    named: Undoproxy, couch: Couch, session_id: str
) -> None:
    name = f"made-{uuid.uuid4().hex[:8]}"
    url = f"{couch.base_url}/{name}"
    with agent(named, session_id, couch.admin) as s:
        assert s.put(url).status_code == 201
        assert s.put(f"{url}/note", json={"text": "hello"}).status_code == 201
    rollback_ends(named, session_id, "rolled_back", ["compensated", "compensated"])
    with couch.direct() as s:
        assert s.get(url).status_code == 404


def test_deleting_a_database_is_irreversible_and_nothing_is_written_back(
    up: Undoproxy, couch: Couch, url: str, session_id: str
) -> None:
    with agent(up, session_id, couch.admin) as s:
        assert s.delete(url).status_code == 200
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "database" in details(report)[0]
    with couch.direct() as s:
        assert s.get(url).status_code == 404  # no empty database "restored" in its place


def test_someone_elses_later_edit_is_a_conflict_and_force_restores_without_the_old_rev(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    doc = f"{url}/order-7"
    with agent(named, session_id) as s:
        rev = current(s, doc)["_rev"]
        r = s.put(doc, params={"rev": rev}, json={**BEFORE["order-7"], "status": "packed"})
        assert r.status_code == 201, r.text
    with couch.direct() as s:  # a person edits it after the agent
        assert edit(s, doc, status="held by a person").status_code == 201

    report = rollback_ends(named, session_id, "rollback_incomplete", ["conflict"])
    assert "nothing was overwritten" in details(report)[0]
    assert couch.docs(db)["order-7"]["status"] == "held by a person"

    rollback_ends(named, session_id, "rolled_back", ["compensated"], force=True)
    assert couch.docs(db) == before


def test_a_created_document_someone_changed_is_not_deleted(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    doc = f"{url}/order-10"
    with agent(named, session_id) as s:
        assert s.put(doc, json={"status": "new"}).status_code == 201
    with couch.direct() as s:
        assert edit(s, doc, status="kept").status_code == 201

    rollback_ends(named, session_id, "rollback_incomplete", ["conflict"])
    assert couch.docs(db)["order-10"]["status"] == "kept"

    # names the revision it has now
    rollback_ends(named, session_id, "rolled_back", ["compensated"], force=True)
    assert "order-10" not in couch.docs(db)


def test_a_deleted_document_someone_recreated_is_not_overwritten(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    doc = f"{url}/order-8"
    with agent(named, session_id) as s:
        assert delete(s, doc).status_code == 200
    with couch.direct() as s:
        assert s.put(doc, json={"status": "re-entered"}).status_code == 201

    rollback_ends(named, session_id, "rollback_incomplete", ["conflict"])
    assert couch.docs(db)["order-8"] == {"_id": "order-8", "status": "re-entered"}


def test_a_target_that_answers_401_is_failed_never_gone(
    named: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    with agent(named, session_id) as s:
        assert delete(s, f"{url}/order-8").status_code == 200
        assert s.put(f"{url}/order-11", json={"status": "new"}).status_code == 201
    couch.set_agent_password("changed-by-the-admin")
    try:
        report = rollback_ends(named, session_id, "rollback_incomplete", ["failed", "failed"])
    finally:
        couch.set_agent_password(AGENT[1])
    assert all("401" in d for d in details(report))
    assert "order-8" not in couch.docs(db) and "order-11" in couch.docs(db)

    # readable again: the retry undoes both
    rollback_ends(named, session_id, "rolled_back", ["compensated", "compensated"])
    assert couch.docs(db) == before


def test_a_bulk_write_someone_changed_since_is_a_conflict_and_force_undoes_it(
    up: Undoproxy, couch: Couch, db: str, url: str, session_id: str
) -> None:
    before = couch.docs(db)
    with agent(up, session_id) as s:
        seven = current(s, f"{url}/order-7")
        docs = [{**seven, "status": "shipped"}, {"_id": "order-10", "status": "new"}]
        assert s.post(f"{url}/_bulk_docs", json={"docs": docs}).status_code == 201
    with couch.direct() as s:
        assert edit(s, f"{url}/order-10", status="taken over").status_code == 201
    after = couch.docs(db)

    report = rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert "nothing was overwritten" in details(report)[0]
    assert couch.docs(db) == after  # neither document was touched

    # each names the revision it has now
    rollback_ends(up, session_id, "rolled_back", ["compensated"], force=True)
    assert couch.docs(db) == before
