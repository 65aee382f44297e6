"""Real `undoproxy run` replicas sharing one real PostgreSQL database act as one undoproxy."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import rest
from tests.support.holding import approvals, decide, in_thread, wait_pending, wait_state
from tests.support.postgres import PASSWORD, Cluster
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

SECRET = "sk-agent-SECRET-123"
AUTH = {"Authorization": f"Bearer {SECRET}"}
HOLD = [
    {
        "name": "hold-held",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/held/**"},
        "action": "hold",
        "risk": "high",
    }
]


def replica_state(config: dict[str, Any]) -> str:
    return str(config["state_dir"])


class Replicas:
    """Replicas of one undoproxy: one database, one state dir (CA, credentials key, token)."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.state_dir = root / "state"
        self.started: list[Undoproxy] = []

    def config(self, **extra: Any) -> dict[str, Any]:
        return {
            "store": {"url": self.url, "heartbeat": "0.5s"},
            "state_dir": str(self.state_dir),
            "approvals": {"timeout": "60s"},
            "rules": HOLD,
            **extra,
        }

    def start(self, name: str, **extra: Any) -> Undoproxy:
        replica = Undoproxy(self.root / name, self.config(**extra))
        replica.state_dir = Path(replica_state(self.config(**extra)))
        self.started.append(replica.start(timeout=60))
        return replica

    def stop(self) -> None:
        for replica in self.started:
            replica.stop()


@pytest.fixture(scope="module")
def cluster_db(pg_cluster: Cluster) -> str:
    return pg_cluster.database()


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory, cluster_db: str) -> Iterator[Replicas]:
    replicas = Replicas(tmp_path_factory.mktemp("replicas"), cluster_db)
    replicas.start("a")  # first alone: it creates the state dir's CA and keys
    replicas.start("b")
    yield replicas
    replicas.stop()


@pytest.fixture
def a(group: Replicas) -> Undoproxy:
    return group.started[0]


@pytest.fixture
def b(group: Replicas) -> Undoproxy:
    return group.started[1]


def until(check: Callable[[], Any], timeout: float = 20, what: str = "") -> Any:
    """Poll `check` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


def steps(proxy: Undoproxy, session: str) -> list[dict[str, Any]]:
    r = proxy.api("GET", f"/api/sessions/{session}")
    return list(r.json()["steps"]) if r.status_code == 200 else []


def test_the_banner_names_the_database_without_its_password(a: Undoproxy) -> None:
    banner = "".join(a.output)
    assert "journal  postgresql://postgres:***@127.0.0.1:" in banner
    assert PASSWORD not in banner


def test_one_sessions_steps_through_both_replicas_are_one_session_in_order(
    a: Undoproxy, b: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    for i in range(6):
        proxy = (a, b)[i % 2]
        r = proxy.agent(session_id).post(f"{plain_upstream.base_url}/n/{i}", json={"i": i})
        assert r.status_code == 200
    for proxy in (a, b):
        seen = until(lambda p=proxy: len(steps(p, session_id)) == 6 and steps(p, session_id))
        assert [s["seq"] for s in seen] == [1, 2, 3, 4, 5, 6]
        assert [s["url"].rsplit("/", 1)[1] for s in seen] == ["0", "1", "2", "3", "4", "5"]


def test_a_step_journaled_via_a_is_an_event_on_b(
    a: Undoproxy, b: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    stream = requests.get(
        b.admin_url + "/api/events",
        headers={"Authorization": f"Bearer {b.token}"},
        stream=True,
        timeout=30,
    )
    lines = stream.iter_lines(decode_unicode=True)
    assert next(lines).startswith("retry:")
    a.agent(session_id).put(f"{plain_upstream.base_url}/ev", json={}).raise_for_status()
    seen: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith("data: "):
            data = json.loads(line[6:])
            if data.get("session_id") == session_id and data.get("method") == "PUT":
                seen.append(data)
                if data["status"] == "succeeded":
                    break
    stream.close()
    assert seen[-1]["status"] == "succeeded"


def test_an_approval_decided_on_b_releases_the_request_held_on_a(
    a: Undoproxy, b: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/held/{uuid.uuid4().hex}"
    agent = in_thread(lambda: a.agent(session_id).post(url, json={"go": 1}, timeout=60))
    approval = wait_pending(b, session_id)  # held on A, pending on B's page too
    assert approval["method"] == "POST" and approval["url"] == url
    decided = decide(b, approval["id"], "approve", by="bob")
    assert decided.status_code == 200, decided.text
    released = time.monotonic()
    response = agent.result(30)
    # The contract's 1 s, with a margin for this shared machine.
    assert time.monotonic() - released < 2.5
    assert response.status_code == 200 and response.json()["body"] == {"go": 1}
    assert wait_state(a, approval["id"], "approved")["decided_by"] == "bob"
    again = decide(a, approval["id"], "deny")
    assert again.status_code == 409


def test_an_approval_denied_on_b_refuses_the_request_held_on_a(
    a: Undoproxy, b: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/held/{uuid.uuid4().hex}"
    agent = in_thread(lambda: a.agent(session_id).post(url, json={}, timeout=60))
    approval = wait_pending(b, session_id)
    assert decide(b, approval["id"], "deny", reason="no").status_code == 200
    response = agent.result(30)
    assert response.status_code == 403
    assert response.json()["error"] == "undoproxy_denied"


def test_a_freeze_on_b_denies_what_a_holds_and_stops_a_forwarding(
    a: Undoproxy, b: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/held/{uuid.uuid4().hex}"
    agent = in_thread(lambda: a.agent(session_id).post(url, json={}, timeout=60))
    approval = wait_pending(b, session_id)
    assert b.api("POST", f"/api/sessions/{session_id}/freeze").status_code == 200
    response = agent.result(30)
    assert response.status_code == 403 and "frozen" in response.json()["reason"]
    assert wait_state(b, approval["id"], "denied")["decided_by"] == "undoproxy"

    def mutation_refused() -> dict[str, Any] | None:
        r = a.agent(session_id).put(f"{plain_upstream.base_url}/f", json={})
        return dict(r.json()) if r.status_code == 403 else None

    refused = until(mutation_refused, what="A refuses the frozen session's mutations")
    assert refused["error"] == "undoproxy_frozen"


@pytest.fixture
def state() -> rest.RestState:
    s = rest.RestState(token=SECRET)
    s.items = {"1": {"id": "1", "name": "Ada"}}
    return s


@pytest.fixture
def api(state: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = rest.serve(state, upstream_cert)
    yield server
    server.stop()


def test_a_rollback_running_on_a_is_refused_on_b_then_restores_everything(
    a: Undoproxy, b: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    before = state.snapshot()
    with a.agent(session_id, headers=AUTH) as s:
        s.post(f"{api.base_url}/items", json={"name": "via a"}).raise_for_status()
    with b.agent(session_id, headers=AUTH) as s:
        s.put(f"{api.base_url}/items/1", json={"name": "via b"}).raise_for_status()
    gate = asyncio.Event()
    api.call(lambda: setattr(state, "gate", gate))  # compensations now wait at the upstream
    results: list[requests.Response] = []
    first = threading.Thread(
        target=lambda: results.append(a.api("POST", f"/api/sessions/{session_id}/rollback"))
    )
    first.start()
    try:
        until(
            lambda: b.api("GET", f"/api/sessions/{session_id}").json()["state"] == "rolling_back",
            what="B sees the rollback A runs",
        )
        second = b.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        assert second.status_code == 409, second.text
        assert second.json()["error"] == "conflict"
        # The session takes no more mutations, on either replica.
        with b.agent(session_id, headers=AUTH) as s:
            refused = s.post(f"{api.base_url}/items", json={"name": "late"})
        assert refused.status_code == 409
    finally:
        api.call(gate.set)
        first.join(60)
    assert results[0].status_code == 200, results[0].text
    assert results[0].json()["state"] == "rolled_back"
    assert state.items == before
    compensations = [(m, p) for m, p in state.log if m in ("DELETE", "PUT")]
    assert len(compensations) == len(set(compensations)) + 1  # the agent's PUT, then one each


def test_verify_checks_the_shared_chain_and_names_a_psql_edit(
    a: Undoproxy, plain_upstream: ThreadedServer, pg_cluster: Cluster, cluster_db: str
) -> None:
    session = f"v-{uuid.uuid4().hex[:8]}"
    a.agent(session).post(f"{plain_upstream.base_url}/v", json={}).raise_for_status()
    ok = a.cli("verify", "-c", str(a.config_path))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("ok: ")
    database = cluster_db.rsplit("/", 1)[1]
    pg_cluster.psql(
        f"UPDATE steps SET url='https://evil.test/' WHERE session_id='{session}'", database
    )
    failed = a.cli("verify", "-c", str(a.config_path))
    assert failed.returncode == 1
    assert failed.stdout.startswith("FAILED: step ")
    assert f"session {session}, #1" in failed.stdout and "edited outside undoproxy" in failed.stdout
    pg_cluster.psql(  # put it back as it was, for the tests after this one
        f"UPDATE steps SET url='{plain_upstream.base_url}/v' WHERE session_id='{session}'",
        database,
    )


def test_a_replica_with_another_credentials_key_refuses_to_start(
    group: Replicas, tmp_path: Path
) -> None:
    other = Undoproxy(tmp_path / "c", group.config(state_dir=str(tmp_path / "own-state")))
    other.state_dir = tmp_path / "own-state"
    with pytest.raises(RuntimeError) as refused:
        other.start(timeout=60)
    assert "credentials key" in str(refused.value)
    assert "is not the one the journal" in str(refused.value)
    assert other.proc is not None and other.proc.wait(15) != 0


@pytest.fixture
def silent_upstream() -> Iterator[str]:
    """An http:// URL whose server accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def test_a_replica_killed_leaves_nothing_pending_and_the_others_keep_serving(
    group: Replicas,
    b: Undoproxy,
    plain_upstream: ThreadedServer,
    silent_upstream: str,
    session_id: str,
) -> None:
    c = group.start("c")
    in_flight = in_thread(
        lambda: c.agent(session_id).post(f"{silent_upstream}/never", json={}, timeout=60)
    )
    held = in_thread(
        lambda: c.agent(session_id).post(f"{plain_upstream.base_url}/held/x", json={}, timeout=60)
    )
    approval = wait_pending(b, session_id)
    until(
        lambda: [s for s in steps(b, session_id) if s["status"] == "pending"],
        what="the request C forwarded is pending",
    )
    c.kill()
    for future in (in_flight, held):
        with pytest.raises(requests.RequestException):
            future.result(30)

    # B settles what C left: the contract allows 60 s; the test's heartbeat is 0.5 s.
    settled = until(
        lambda: (
            all(s["status"] not in ("pending", "held") for s in steps(b, session_id))
            and steps(b, session_id)
        ),
        timeout=60,
        what="C's steps settled",
    )
    assert {s["url"].rsplit("/", 1)[1]: s["status"] for s in settled} == {
        "never": "unknown",
        "x": "denied",
    }
    assert wait_state(b, approval["id"], "expired", timeout=60)["state"] == "expired"
    assert not approvals(b, state="pending", session=session_id)
    r = b.agent(session_id).post(f"{plain_upstream.base_url}/after", json={})  # B serves on
    assert r.status_code == 200


def test_a_compensation_in_flight_when_its_replica_dies_is_never_sent_again(
    group: Replicas,
    b: Undoproxy,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
) -> None:
    before = state.snapshot()
    c = group.start("c2")
    with c.agent(session_id, headers=AUTH) as s:
        created = s.post(f"{api.base_url}/items", json={"name": "via c"}).json()["id"]
    gate = asyncio.Event()
    api.call(lambda: setattr(state, "gate", gate))  # the compensation waits at the upstream
    in_thread(lambda: c.api("POST", f"/api/sessions/{session_id}/rollback", json={}))
    until(
        lambda: [s for s in steps(b, session_id) if s["status"] == "compensating"],
        what="C marked the step compensating and sent its compensation",
    )
    until(lambda: ("DELETE", f"/items/{created}") in state.log, what="the DELETE arrived")
    c.kill()
    until(
        lambda: (
            b.api("GET", f"/api/sessions/{session_id}").json()["state"] == "rollback_incomplete"
        ),
        timeout=60,
        what="B sees that C's rollback stopped with C",
    )
    api.call(gate.set)  # the upstream now applies the DELETE C sent before it died
    until(lambda: created not in state.items, what="the upstream applied the DELETE")

    report = b.api("POST", f"/api/sessions/{session_id}/rollback", json={})
    assert report.status_code == 200, report.text
    assert report.json()["state"] == "rolled_back"
    assert [st["status"] for st in report.json()["steps"]] == ["compensated"]
    assert state.log.count(("DELETE", f"/items/{created}")) == 1  # read, never resent
    assert state.items == before
