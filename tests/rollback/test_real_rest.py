"""Plain REST rollbacks end `rolled_back` with every step `compensated`, on real servers this
project never wrote (tests/support/rest_servers.py), with no rules at all: json-server (a
deleted resource comes back by POST to its collection, at its own URL) and Kinto (records in an
envelope whose `last_modified` the server sets on every write, tombstones on DELETE). The
servers' real state after the rollback is compared with their state before the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.rollback.helpers import details, statuses
from tests.support import rest_servers
from tests.support.proc import Undoproxy

ORDERS = [
    {"id": 1, "item": "book", "qty": 1, "notes": {"gift": False}},
    {"id": 2, "item": "pen", "qty": 3, "notes": {"gift": True}},
    {"id": 3, "item": "lamp", "qty": 1, "notes": {}},
]


@pytest.fixture
def json_server() -> Iterator[rest_servers.Server]:
    server = rest_servers.json_server({"orders": ORDERS, "customers": [{"id": 1, "name": "A"}]})
    yield server
    server.stop()


def orders(server: rest_servers.Server) -> Any:
    return requests.get(f"{server.base_url}/orders", timeout=10).json()


def test_an_agents_orders_session_on_json_server_is_rolled_back_and_verified(
    up: Undoproxy, json_server: rest_servers.Server, session_id: str
) -> None:
    before = orders(json_server)
    base = f"{json_server.base_url}/orders"
    with up.agent(session_id) as agent:
        assert agent.post(base, json={"item": "desk", "qty": 2}).status_code == 201
        assert agent.put(f"{base}/1", json={"item": "book", "qty": 5}).status_code == 200
        assert agent.patch(f"{base}/2", json={"qty": 9, "notes": {"gift": False}}).ok
        assert agent.delete(f"{base}/3").status_code == 200
        made = agent.post(base, json={"item": "tmp"}).json()["id"]
        assert agent.delete(f"{base}/{made}").ok
    assert orders(json_server) != before

    report = up.rollback(session_id)
    assert report["state"] == "rolled_back", report
    assert statuses(report) == ["compensated"] * 6, report
    # the DELETE undone by POST to the collection came back at its own URL: restored
    assert any("back at its own URL" in d for d in details(report)), details(report)
    assert orders(json_server) == before
    assert all(s["evidence"]["read"].startswith("GET ") for s in report["steps"])


@pytest.fixture
def kinto() -> Iterator[rest_servers.Server]:
    server = rest_servers.kinto()
    yield server
    server.stop()


RECORDS = "/v1/buckets/b/collections/c/records"


def kinto_records(server: rest_servers.Server) -> dict[str, Any]:
    """Each record's data without `last_modified` (which only the server sets)."""
    r = requests.get(server.base_url + RECORDS, auth=rest_servers.KINTO_USER, timeout=10)
    return {
        rec["id"]: {k: v for k, v in rec.items() if k != "last_modified"}
        for rec in r.json()["data"]
    }


def test_a_kinto_session_is_rolled_back_and_server_set_fields_are_reported(
    up: Undoproxy, kinto: rest_servers.Server, session_id: str
) -> None:
    auth = rest_servers.KINTO_USER
    base = kinto.base_url + RECORDS
    for rid, data in (("r1", {"name": "Ada", "plan": "free"}), ("r2", {"name": "Bo"})):
        r = requests.put(f"{base}/{rid}", json={"data": data}, auth=auth, timeout=10)
        assert r.status_code == 201, r.text
    before = kinto_records(kinto)
    with up.agent(session_id) as agent:
        agent.auth = auth
        assert agent.put(f"{base}/r1", json={"data": {"name": "Eve"}}).status_code == 200
        assert agent.patch(f"{base}/r2", json={"data": {"plan": "pro"}}).ok
        assert agent.put(f"{base}/r3", json={"data": {"name": "new"}}).status_code == 201
        assert agent.post(base, json={"data": {"name": "posted"}}).status_code == 201
        assert agent.delete(f"{base}/r2").ok
    assert kinto_records(kinto) != before

    report = up.rollback(session_id)
    assert report["state"] == "rolled_back", report
    assert statuses(report) == ["compensated"] * 5, report
    assert kinto_records(kinto) == before
    # restored records are as before but for the one field only the server sets
    assert any("server-set fields differ: data.last_modified" in d for d in details(report))
