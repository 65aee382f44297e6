"""Snapshots before mutations, snapshot failures, and explicit compensation templates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import received
from tests.support import rest
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from tests.test_rollback import AUTH, SECRET

RULES = {
    "rules": [
        {
            "name": "careful-update",
            "match": {"method": "PUT", "path": "/echo/careful/{id}"},
            "snapshot": {"url": "/echo/snapshots-fail?status=503"},
            "compensate": "restore",
        },
        {
            "name": "reckless-update",
            "match": {"method": "PUT", "path": "/echo/reckless/{id}"},
            "snapshot": {"url": "/echo/snapshots-fail?status=500"},
            "compensate": "restore",
            "on_snapshot_error": "proceed",
        },
        {
            "name": "create-item",
            "match": {"method": "POST", "path": "/items"},
            "compensate": {"method": "DELETE", "url": "/items/${response.body.id}"},
        },
        {
            "name": "rename-item",
            "match": {"method": "PATCH", "path": "/items/{id}"},
            "compensate": {
                "method": "PATCH",
                "url": "/items/{id}",
                "body": {"name": "${snapshot.body.name}"},
            },
        },
    ],
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("snapshots"), RULES).start()
    yield instance
    instance.stop()


@pytest.fixture
def api(upstream_cert: tuple[Path, Path]) -> Iterator[tuple[ThreadedServer, rest.RestState]]:
    state = rest.RestState(token=SECRET, items={"7": {"id": "7", "name": "seven"}})
    server = rest.serve(state, upstream_cert)
    yield server, state
    server.stop()


def test_a_failed_snapshot_blocks_the_mutation(
    up: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    before = len(received(tls_upstream))
    with up.agent(session_id, headers=AUTH) as s:
        r = s.put(f"{tls_upstream.base_url}/echo/careful/1", json={"name": "x"})
    assert r.status_code == 502
    body = r.json()
    assert body["error"] == "undoproxy_snapshot_failed"
    [step] = up.steps(session_id)
    assert body["step"] == step["id"]
    assert "HTTP 503" in body["detail"]
    got = received(tls_upstream)[before:]
    assert [r.method for r in got] == ["GET"] * 3  # the snapshot was retried; no PUT was sent
    assert step["status"] == "failed" and "snapshot" in step["error"]


def test_on_snapshot_error_proceed_forwards_and_marks_the_step_irreversible(
    up: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        r = s.put(f"{tls_upstream.base_url}/echo/reckless/1", json={"name": "x"})
    assert r.status_code == 200
    assert received(tls_upstream)[-1].method == "PUT"
    [step] = up.rollback(session_id)["steps"]
    assert step["status"] == "irreversible"
    assert "on_snapshot_error: proceed" in step["detail"]


def test_explicit_templates_from_the_response_and_the_snapshot(
    up: Undoproxy, api: tuple[ThreadedServer, rest.RestState], session_id: str
) -> None:
    server, state = api
    with up.agent(session_id, headers=AUTH) as s:
        created = s.post(f"{server.base_url}/items", json={"name": "new"}).json()
        s.patch(f"{server.base_url}/items/7", json={"name": "renamed"}).raise_for_status()
    shown = up.steps(session_id)
    comps = [(st["compensation"]["method"], st["compensation"]["url"]) for st in shown]
    assert comps == [
        ("DELETE", f"{server.base_url}/items/{created['id']}"),
        ("PATCH", f"{server.base_url}/items/7"),
    ]
    report = up.rollback(session_id)
    assert report["state"] == "rolled_back"
    assert state.items == {"7": {"id": "7", "name": "seven"}}


def test_rolling_back_a_session_denies_its_held_requests(
    tmp_path: Path, api: tuple[ThreadedServer, rest.RestState], session_id: str
) -> None:
    from tests.support.holding import in_thread, wait_pending

    server, state = api
    rules = {
        "rules": [
            {
                "name": "hold-deletes",
                "action": "hold",
                "match": {"method": "DELETE", "path": "/items/{id}"},
            }
        ]
    }
    held_up = Undoproxy(tmp_path, rules).start()
    try:
        with held_up.agent(session_id, headers=AUTH) as s:
            s.post(f"{server.base_url}/items", json={"name": "made"}).raise_for_status()
            waiting = in_thread(lambda: s.delete(f"{server.base_url}/items/7", timeout=30))
            approval = wait_pending(held_up, session_id)
            report = held_up.rollback(session_id)
            answer = waiting.result(30)
        assert answer.status_code == 403
        assert answer.json()["reason"].startswith("the session is being rolled back")
        assert "7" in state.items and ("DELETE", "/items/7") not in state.log
        late = held_up.api("POST", f"/api/approvals/{approval['id']}/approve", json={})
        assert late.status_code == 409
        assert report["state"] == "rolled_back"
    finally:
        held_up.stop()
