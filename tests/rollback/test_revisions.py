"""Documents with CouchDB-style revisions: every write must name the current `_rev`.

A restore must name the revision the document has now (the snapshot's is stale once the agent
wrote), compare bodies without `_rev` (every write changes it), and never aim at a stale
`?rev=` from the agent's URL.
"""

from __future__ import annotations

from typing import Any

from tests.rollback.helpers import AUTH, details, rollback_ends, statuses
from tests.support import objects
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

ORIGINAL = {"status": "new", "items": 2}


def body(store: objects.StoreState, doc_id: str = "order-7") -> dict[str, Any] | None:
    doc = store.doc(doc_id)
    return None if doc is None else {k: v for k, v in doc.items() if k not in ("_id", "_rev")}


def test_a_restore_names_the_current_revision(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    store.write_doc("order-7", ORIGINAL)
    with up.agent(session_id, headers=AUTH) as s:
        doc = s.get(f"{server.base_url}/db/order-7").json()
        r = s.put(f"{server.base_url}/db/order-7", json={**doc, "status": "shipped"})
        assert r.status_code == 201, r.text
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert body(store) == ORIGINAL
    assert len(store.docs["order-7"]) == 3  # a new revision, not a rewrite of history


def test_a_document_written_twice_with_rev_in_the_query(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    rev = store.write_doc("order-7", ORIGINAL)
    with up.agent(session_id, headers=AUTH) as s:
        for status in ("packed", "shipped"):
            r = s.put(
                f"{server.base_url}/db/order-7?rev={rev}", json={**ORIGINAL, "status": status}
            )
            assert r.status_code == 201, r.text
            rev = r.json()["rev"]
    plan = up.rollback(session_id, dry_run=True)
    report = up.rollback(session_id)
    assert statuses(plan) == ["planned", "planned"]
    assert (report["state"], statuses(report)) == ("rolled_back", ["compensated", "compensated"])
    assert body(store) == ORIGINAL
    assert all("rev=" not in r.path for r in store.requests("PUT")[2:])


def test_force_over_a_later_edit_targets_the_document_not_the_old_revision(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    rev = store.write_doc("order-7", ORIGINAL)
    with up.agent(session_id, headers=AUTH) as s:
        r = s.put(f"{server.base_url}/db/order-7?rev={rev}", json={**ORIGINAL, "status": "packed"})
        assert r.status_code == 201, r.text
    store.write_doc("order-7", {**ORIGINAL, "status": "held by a person"})
    report = up.rollback(session_id)
    assert statuses(report) == ["conflict"] and "status" in details(report)[0]
    assert body(store) == {**ORIGINAL, "status": "held by a person"}
    rollback_ends(up, session_id, "rolled_back", ["compensated"], force=True)
    assert body(store) == ORIGINAL


def test_a_deleted_document_comes_back(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    rev = store.write_doc("order-7", ORIGINAL)
    with up.agent(session_id, headers=AUTH) as s:
        assert s.delete(f"{server.base_url}/db/order-7?rev={rev}").status_code == 200
    assert store.doc("order-7") is None
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert body(store) == ORIGINAL
