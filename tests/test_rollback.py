"""Rollback against a real REST upstream with real state, through a real undoproxy."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import rest
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

SECRET = "sk-agent-SECRET-123"
AUTH = {"Authorization": f"Bearer {SECRET}"}  # the upstream refuses anything else


@pytest.fixture
def state() -> rest.RestState:
    s = rest.RestState(token=SECRET)
    s.items = {
        "1": {"id": "1", "name": "Ada", "tier": "gold"},
        "2": {"id": "2", "name": "Grace", "tags": ["navy"]},
    }
    return s


@pytest.fixture
def api(state: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = rest.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    """undoproxy with no rules at all: compensations are inferred from the traffic."""
    instance = Undoproxy(tmp_path_factory.mktemp("rollback")).start()
    yield instance
    instance.stop()


def test_create_update_patch_delete_rolled_back_to_the_exact_prior_state(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    before = state.snapshot()
    with up.agent(session_id, headers=AUTH) as s:
        created = s.post(f"{api.base_url}/items", json={"name": "Linus"}).json()
        s.put(
            f"{api.base_url}/items/1", json={"name": "Ada L.", "title": "Countess"}
        ).raise_for_status()
        s.patch(f"{api.base_url}/items/2", json={"rank": "admiral"}).raise_for_status()
        s.delete(f"{api.base_url}/items/1").raise_for_status()
    assert created["id"] in state.items and "1" not in state.items

    report = up.rollback(session_id)
    assert report["state"] == "rolled_back"
    assert [st["status"] for st in report["steps"]] == ["compensated"] * 4
    assert [st["method"] for st in report["steps"]] == ["DELETE", "PATCH", "PUT", "POST"]
    assert state.items == before  # created gone, updated exact (added fields removed), deleted back
    shown = up.api("GET", f"/api/sessions/{session_id}").json()
    assert shown["state"] == "rolled_back"
    assert {st["status"] for st in shown["steps"]} == {"compensated"}


def test_a_second_rollback_sends_nothing_twice(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{api.base_url}/items", json={"name": "once"}).raise_for_status()
    assert up.rollback(session_id)["state"] == "rolled_back"
    sent = len(state.log)
    again = up.rollback(session_id)
    assert again["state"] == "rolled_back"
    assert [(st["status"], st["detail"]) for st in again["steps"]] == [
        ("skipped", "already compensated by an earlier rollback")
    ]
    assert len(state.log) == sent


@pytest.mark.parametrize("etags", [True, False], ids=["etag", "body-compare"])
def test_drift_is_a_conflict_and_nothing_is_overwritten_unless_forced(
    up: Undoproxy,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
    etags: bool,
    upstream_cert: tuple[Path, Path],
) -> None:
    state.etags = etags
    with up.agent(session_id, headers=AUTH) as s:
        s.put(f"{api.base_url}/items/1", json={"name": "by agent"}).raise_for_status()
    # Someone else changes the record afterwards, not through undoproxy.
    requests.put(
        f"{api.base_url}/items/1",
        json={"name": "by a human"},
        verify=str(upstream_cert[0]),
        headers={"Authorization": f"Bearer {SECRET}"},
    ).raise_for_status()

    report = up.rollback(session_id)
    [step] = report["steps"]
    assert (report["state"], step["status"]) == ("rollback_incomplete", "conflict")
    assert "changed since this step" in step["detail"]
    assert state.items["1"]["name"] == "by a human"

    forced = up.rollback(session_id, force=True)
    assert forced["state"] == "rolled_back"
    assert state.items["1"] == {"id": "1", "name": "Ada", "tier": "gold"}


@pytest.mark.parametrize("put_creates", [True, False], ids=["put", "post-fallback"])
def test_recreate_a_deleted_record(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str, put_creates: bool
) -> None:
    state.put_creates = put_creates
    with up.agent(session_id, headers=AUTH) as s:
        s.delete(f"{api.base_url}/items/2").raise_for_status()
    report = up.rollback(session_id)
    [step] = report["steps"]
    if put_creates:
        assert (report["state"], step["status"]) == ("rolled_back", "compensated"), step
        assert state.items["2"] == {"id": "2", "name": "Grace", "tags": ["navy"]}
    else:
        # Its content is back, but under a new URL: not the prior state, so not `compensated`.
        assert (report["state"], step["status"]) == ("rollback_incomplete", "unverified"), step
        assert "POST to the collection" in step["detail"]
        assert "matches the snapshot apart from its id" in step["detail"]
        [back] = [v for v in state.items.values() if v["name"] == "Grace"]
        assert back["tags"] == ["navy"] and "2" not in state.items
        assert f"/items/{back['id']}" in step["detail"]
        assert state.log.count(("POST", "/items")) == 1
        again = up.rollback(session_id)  # never posted twice
        assert again["steps"][0]["status"] == "unverified"
        assert state.log.count(("POST", "/items")) == 1


def test_recreate_conflicts_when_the_record_came_back(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.delete(f"{api.base_url}/items/2").raise_for_status()
    state.items["2"] = {"id": "2", "name": "someone recreated it"}
    [step] = up.rollback(session_id)["steps"]
    assert step["status"] == "conflict"
    assert state.items["2"]["name"] == "someone recreated it"


def test_upstream_down_then_failed_then_a_second_rollback_completes(
    up: Undoproxy, state: rest.RestState, upstream_cert: tuple[Path, Path], session_id: str
) -> None:
    server = rest.serve(state, upstream_cert)
    port = server.port
    with up.agent(session_id, headers=AUTH) as s:
        a = s.post(f"{server.base_url}/items", json={"name": "a"}).json()["id"]
        b = s.post(f"{server.base_url}/items", json={"name": "b"}).json()["id"]
    server.stop()  # the upstream goes down

    first = up.cli("rollback", session_id)
    assert first.returncode == 1
    # undoproxy inferred what the POSTs created, so it must read it before deleting it
    assert "failed: could not read" in first.stdout and "nothing was sent" in first.stdout
    assert "rollback_incomplete" in first.stdout
    assert {a, b} <= set(state.items)

    server = rest.serve(state, upstream_cert, port)
    try:
        second = up.cli("rollback", session_id)
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"session {session_id}: rolled_back" in second.stdout
        assert not {a, b} & set(state.items)
        deletes = [p for m, p in state.log if m == "DELETE"]
        assert sorted(deletes) == sorted([f"/items/{a}", f"/items/{b}"])  # each exactly once
    finally:
        server.stop()


def test_a_busy_upstream_is_retried_honouring_retry_after(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        created = s.post(f"{api.base_url}/items", json={"name": "busy"}).json()["id"]
    state.fail_writes = 2  # the first two DELETEs get 503 with Retry-After: 0
    [step] = up.rollback(session_id)["steps"]
    assert step["status"] == "compensated"
    assert "after 3 attempts" in step["detail"]
    assert created not in state.items
    assert [p for m, p in state.log if m == "DELETE"] == [f"/items/{created}"] * 3


def test_two_rollbacks_of_one_session_cannot_run_at_once(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{api.base_url}/items", json={"name": "slow"}).raise_for_status()
    gate = asyncio.Event()
    api.call(lambda: setattr(state, "gate", gate))  # compensations now wait at the upstream
    results: list[requests.Response] = []
    first = threading.Thread(
        target=lambda: results.append(
            up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        )
    )
    first.start()
    try:
        for _ in range(100):
            shown = up.api("GET", f"/api/sessions/{session_id}").json()
            if shown["state"] == "rolling_back":
                break
            threading.Event().wait(0.05)
        second = up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        assert second.status_code == 409
        assert second.json()["error"] == "conflict"
    finally:
        api.call(gate.set)
        first.join(30)
    assert results[0].json()["state"] == "rolled_back"


def test_commit_then_rollback_is_refused(
    up: Undoproxy, api: ThreadedServer, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{api.base_url}/items", json={"name": "kept"}).raise_for_status()
    assert up.cli("commit", session_id).returncode == 0
    r = up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
    assert r.status_code == 409 and "committed" in r.json()["message"]
    cli = up.cli("rollback", session_id)
    assert cli.returncode == 1 and "committed" in cli.stderr


def test_dry_run_prints_the_plan_and_changes_nothing(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.put(f"{api.base_url}/items/1", json={"name": "dry"}).raise_for_status()
    after = state.snapshot()
    out = up.cli("rollback", session_id, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "would send PUT" in out.stdout and "/items/1" in out.stdout
    assert state.snapshot() == after
    assert up.api("GET", f"/api/sessions/{session_id}").json()["state"] == "open"


def test_unknown_outcome_is_decided_by_re_reading_the_target(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        for how, name in (("before", "never applied"), ("after", "applied, answer lost")):
            item = "1" if how == "after" else "2"
            r = s.put(
                f"{api.base_url}/items/{item}", json={"name": name}, headers={"X-Test-Drop": how}
            )
            assert r.status_code == 502  # the proxy tells the agent the upstream went away
    steps = up.steps(session_id)
    assert [st["status"] for st in steps] == ["unknown", "unknown"]
    assert state.items["1"]["name"] == "applied, answer lost"

    report = up.rollback(session_id)
    by_url = {st["url"].rsplit("/", 1)[1]: st for st in report["steps"]}
    assert by_url["1"]["status"] == "compensated"
    assert by_url["2"]["status"] == "skipped" and "did not take effect" in by_url["2"]["detail"]
    assert state.items["1"] == {"id": "1", "name": "Ada", "tier": "gold"}


def test_an_unidentifiable_creation_is_reported_irreversible(
    up: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{tls_upstream.base_url}/echo/anything", json={"x": 1}).raise_for_status()
    report = up.rollback(session_id)
    [step] = report["steps"]
    assert report["state"] == "rollback_incomplete"
    assert step["status"] == "irreversible"
    assert "names nothing it created" in step["detail"] and "by hand" in step["detail"]


def test_credentials_are_replayed_but_never_shown(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{api.base_url}/items", json={"name": "secretive"}).raise_for_status()
    outputs = [
        up.api("GET", f"/api/sessions/{session_id}").text,
        up.cli("show", session_id).stdout,
        up.cli("export", session_id).stdout,
        up.cli("export", session_id, "--format", "har").stdout,
        up.cli("rollback", session_id).stdout,  # succeeds only with the agent's token
        up.api("GET", f"/api/sessions/{session_id}").text,
    ]
    assert not any(v["name"] == "secretive" for v in state.items.values())
    for text in outputs:
        assert SECRET not in text
    db = sqlite3.connect(up.dir / "journal.db")
    try:
        rows = db.execute("SELECT * FROM steps WHERE session_id=?", (session_id,)).fetchall()
    finally:
        db.close()
    stored = json.dumps(
        [[c.decode("latin-1") if isinstance(c, bytes) else c for c in row] for row in rows]
    )
    assert SECRET not in stored  # not even at rest: the credentials column is encrypted


def test_a_patch_compensation_is_never_retried_blind(
    tmp_path_factory: pytest.TempPathFactory,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
) -> None:
    # PATCH is not idempotent (RFC 5789): a 503 may have been answered after it applied. It is
    # sent once; the next rollback reads the target before it sends anything again.
    rules = [
        {
            "name": "rename",
            "match": {"method": "PATCH", "path": "/items/{id}"},
            "snapshot": True,
            "compensate": {
                "method": "PATCH",
                "url": "/items/{id}",
                "body": {"name": "${snapshot.body.name}"},
            },
        }
    ]
    instance = Undoproxy(tmp_path_factory.mktemp("patch-once"), {"rules": rules}).start()
    try:
        with instance.agent(session_id, headers=AUTH) as s:
            assert s.patch(f"{api.base_url}/items/1", json={"name": "Eve"}).ok
        state.fail_writes = 1
        [first] = instance.rollback(session_id)["steps"]
        assert first["status"] == "failed" and "503" in first["detail"], first
        assert [m for m, p in state.log if p == "/items/1"].count("PATCH") == 2  # agent + 1
        [second] = instance.rollback(session_id)["steps"]
        # read first: not as before, and with no after-image nobody can say it is still as the
        # agent left it (someone may have changed it since): a person decides
        assert second["status"] == "failed", second
        assert "what the step left is unknown" in second["detail"]
        assert state.items["1"]["name"] == "Eve"
        assert [m for m, p in state.log if p == "/items/1"].count("PATCH") == 2  # not again
    finally:
        instance.stop()
