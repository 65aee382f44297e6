"""deploy/docker-compose.yml, really brought up: PostgreSQL, two undoproxy replicas and the
HAProxy load balancer, each a container on the host's network, on free loopback ports. Agents
go through the load balancer and through each replica directly; the replicas act as one:
one journal, approvals decided on either, one rollback at a time.

The images are built on the local Debian base image (docker/ci-setup.sh): undoproxy's with
`docker build` (shared with tests/test_container.py), PostgreSQL's and HAProxy's by Compose
itself from the compose file. They are kept for the next run (Docker's layer cache); the
containers and volumes are removed at teardown.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import yaml

from tests.support import holding, rest
from tests.support.containers import (
    COMPOSE_FILE,
    IMAGE_VARIABLES,
    REPO,
    TEST_IMAGE,
    TEST_LB_IMAGE,
    TEST_POSTGRES_IMAGE,
    Compose,
    Docker,
    admin_request,
    free_port,
    ready_compose,
    ready_docker,
)
from tests.support.servers import ThreadedServer

SECRET = "sk-agent-compose-SECRET-7"  # the upstream refuses any other credentials
AUTH = {"Authorization": f"Bearer {SECRET}"}
# Held for a person: changing an item (PATCH). Creating and replacing pass.
HOLD_PATCH = {
    "name": "hold-item-changes",
    "match": {"host": "127.0.0.1", "method": "PATCH", "path": "/items/**"},
    "action": "hold",
    "risk": "high",
}
T = TypeVar("T")
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent")


def in_thread(fn: Callable[[], T]) -> Future[T]:
    return _POOL.submit(fn)


@dataclass
class Endpoint:
    """A proxy and admin address pair: a replica's own, or the load balancer's."""

    name: str
    proxy_port: int
    admin_port: int
    token: str = ""
    ca_bundle: str = ""

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return admin_request(self.admin_port, self.token, method, path, **kwargs)

    def agent(self, session: str) -> requests.Session:
        """An agent's session through this address: a new connection, trusting only the CA
        bundle the replicas share, with the credentials the upstream checks."""
        s = requests.Session()
        s.trust_env = False
        s.proxies = {"https": f"http://{session}:x@127.0.0.1:{self.proxy_port}"}
        s.verify = self.ca_bundle
        s.headers.update(AUTH)
        return s

    def steps(self, session: str) -> list[dict[str, Any]]:
        r = self.api("GET", f"/api/sessions/{session}")
        return list(r.json()["steps"]) if r.status_code == 200 else []

    def requests_counted(self) -> float:
        """The replica's own `undoproxy_requests_total`, all labels summed."""
        text = self.api("GET", "/metrics").text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("undoproxy_requests_total{")
        )


@dataclass
class Deployment:
    compose: Compose
    docker: Docker
    lb: Endpoint
    a: Endpoint
    b: Endpoint
    db_port: int


# Containers start in seconds, not milliseconds: a longer wait, polled less often.
until = functools.partial(holding.until, timeout=30, every=0.1)


def config_dir(directory: Path) -> Path:
    """deploy/undoproxy/config.yaml as shipped, plus what this test's upstream needs: its
    self-signed certificate accepted, and item changes held for approval."""
    config = yaml.safe_load((REPO / "deploy" / "undoproxy" / "config.yaml").read_text())
    config["proxy"]["upstream_insecure"] = True
    config["rules"] = [HOLD_PATCH]
    config["approvals"] = {"timeout": "120s"}
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    directory.chmod(0o755)  # read by the containers' user (uid 10001) through the bind mount
    (directory / "config.yaml").chmod(0o644)
    return directory


def lb_servers_up(logs: str) -> bool:
    """HAProxy's last word on each server is not DOWN (it starts them UP, logs each change)."""
    last: dict[str, str] = {}
    for backend, server, status in re.findall(r"Server (\w+)/(\w) is (UP|DOWN)", logs):
        last[f"{backend}/{server}"] = status
    return "DOWN" not in last.values()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    docker = ready_docker()
    command = ready_compose(docker)
    work = tmp_path_factory.mktemp("compose")
    docker.build_once(TEST_IMAGE, work / "build.log")
    ports = {name: free_port() for name in ("lb", "lb_admin", "a", "a_admin", "b", "b_admin", "db")}
    password = f"pg-{uuid.uuid4().hex}"
    compose = Compose(
        command,
        COMPOSE_FILE,
        f"undoproxy-test-{uuid.uuid4().hex[:8]}",
        {
            "UNDOPROXY_DB_PASSWORD": password,
            "UNDOPROXY_PROXY_PORT": str(ports["lb"]),
            "UNDOPROXY_ADMIN_PORT": str(ports["lb_admin"]),
            "UNDOPROXY_A_PROXY_PORT": str(ports["a"]),
            "UNDOPROXY_A_ADMIN_PORT": str(ports["a_admin"]),
            "UNDOPROXY_B_PROXY_PORT": str(ports["b"]),
            "UNDOPROXY_B_ADMIN_PORT": str(ports["b_admin"]),
            "UNDOPROXY_DB_PORT": str(ports["db"]),
            "UNDOPROXY_CONFIG_DIR": str(config_dir(work / "config")),
            **IMAGE_VARIABLES,
        },
    )
    compose.build(docker, {"db": TEST_POSTGRES_IMAGE, "lb": TEST_LB_IMAGE})
    lb = Endpoint("lb", ports["lb"], ports["lb_admin"])
    a = Endpoint("replica-a", ports["a"], ports["a_admin"])
    b = Endpoint("replica-b", ports["b"], ports["b_admin"])
    try:
        # replica-b waits for replica-a's health check (it creates the shared state first).
        compose("up", "--detach", "--no-build", timeout=300)
        for replica in (a, b):

            def banner(r: Endpoint = replica) -> bool:
                return "Agents: eval" in compose.logs(r.name)

            until(banner, timeout=90, what=f"{replica.name} printed its banner")
        until(lambda: lb_servers_up(compose.logs("lb")), what="HAProxy has both replicas up")
        replica_a = compose.container("replica-a")
        token = docker.copy_out(replica_a, "/data/admin-token").decode().strip()
        bundle = work / "ca-bundle.pem"
        bundle.write_bytes(docker.copy_out(replica_a, "/data/ca-bundle.pem"))
        for endpoint in (lb, a, b):
            endpoint.token, endpoint.ca_bundle = token, str(bundle)
        yield Deployment(compose, docker, lb, a, b, ports["db"])
    except BaseException:
        (work / "compose.log").write_text(compose.logs())
        print(f"compose logs: {work / 'compose.log'}\n{compose.logs()[-6000:]}")
        raise
    finally:
        compose.down()
        leftover = compose("ps", "-q", check=False).stdout.split()
        assert not leftover, f"containers left after down: {leftover}"


@pytest.fixture(scope="module")
def upstream(
    upstream_cert: tuple[Path, Path],
) -> Iterator[tuple[ThreadedServer, rest.RestState]]:
    """A REST API on 127.0.0.1 (HTTPS, self-signed) whose items the tests change and restore."""
    state = rest.RestState(token=SECRET)
    state.items = {"1": {"id": "1", "name": "Ada", "tier": "gold"}}
    server = rest.serve(state, upstream_cert)
    yield server, state
    server.stop()


def session_name() -> str:
    return f"dc-{uuid.uuid4().hex[:8]}"


def test_the_replicas_serve_one_ca_one_token_and_one_journal_behind_the_load_balancer(
    deployment: Deployment,
) -> None:
    compose, lb, a, b = deployment.compose, deployment.lb, deployment.a, deployment.b
    db_url = f"postgresql://undoproxy@127.0.0.1:{deployment.db_port}/undoproxy"
    banners = {r.name: compose.logs(r.name) for r in (a, b)}
    for replica in (a, b):
        assert f"journal  {db_url}" in banners[replica.name], banners[replica.name]
        assert f"proxy    http://127.0.0.1:{replica.proxy_port}" in banners[replica.name]
    assert "(generated; kept in /data/admin-token)" in banners["replica-a"]
    assert "token    kept in /data/admin-token" in banners["replica-b"]  # read, not made
    assert compose.env["UNDOPROXY_DB_PASSWORD"] not in compose.logs()
    # One CA whichever address an agent or a person reaches; one admin token for all.
    cas = {e.name: e.api("GET", "/ca.pem") for e in (lb, a, b)}
    assert {r.status_code for r in cas.values()} == {200}
    assert len({r.content for r in cas.values()}) == 1
    assert cas["lb"].content.startswith(b"-----BEGIN CERTIFICATE-----")
    for endpoint in (lb, a, b):
        assert endpoint.api("GET", "/api/sessions").status_code == 200
        wrong = requests.get(
            f"http://127.0.0.1:{endpoint.admin_port}/api/sessions",
            headers={"Authorization": "Bearer not-the-token-at-all"},
            proxies={"http": "", "https": ""},
            timeout=30,
        )
        assert wrong.status_code == 401
    # The CLI in a replica's container finds its admin address and the shared token.
    cli = deployment.docker(
        "exec", compose.container("replica-b"), "undoproxy", "sessions", check=False
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def test_a_sessions_mutations_through_the_load_balancer_and_each_replica_are_one_journal(
    deployment: Deployment, upstream: tuple[ThreadedServer, rest.RestState]
) -> None:
    lb, a, b = deployment.lb, deployment.a, deployment.b
    server, state = upstream
    session = session_name()
    counted = {r.name: r.requests_counted() for r in (a, b)}
    names = []
    for i in range(6):  # a new connection each: HAProxy deals them out in turn
        with lb.agent(session) as agent:
            created = agent.post(f"{server.base_url}/items", json={"name": f"lb-{i}"})
        assert created.status_code == 201, created.text
        names.append(f"lb-{i}")
    for replica in (a, b):
        with replica.agent(session) as agent:
            created = agent.post(f"{server.base_url}/items", json={"name": replica.name})
        assert created.status_code == 201, created.text
        names.append(replica.name)
    # Both replicas took some of the load balancer's connections (each counts its own).
    for replica in (a, b):
        assert replica.requests_counted() >= counted[replica.name] + 2, replica.name
    created_names = [item["name"] for item in state.items.values() if item["name"] in names]
    assert sorted(created_names) == sorted(names)
    # One session, its steps in order, the same through every admin address.
    for endpoint in (lb, a, b):

        def settled(e: Endpoint = endpoint) -> list[dict[str, Any]]:
            found = e.steps(session)
            return found if [s["status"] for s in found] == ["succeeded"] * 8 else []

        seen = until(settled, what=f"8 steps succeeded through {endpoint.name}")
        assert [s["seq"] for s in seen] == list(range(1, 9))
        assert [s["method"] for s in seen] == ["POST"] * 8
        assert [s["url"] for s in seen] == [f"{server.base_url}/items"] * 8


def wait_pending(endpoint: Endpoint, session: str) -> dict[str, Any]:
    def pending() -> dict[str, Any] | None:
        r = endpoint.api("GET", f"/api/approvals?state=pending&session={session}")
        assert r.status_code == 200, r.text
        found = r.json()["approvals"]
        return dict(found[0]) if found else None

    return until(pending, what=f"an approval pending for {session} on {endpoint.name}")


@pytest.mark.parametrize("held_via, decided_on", [("a", "b"), ("lb", "lb")])
def test_a_request_held_on_one_replica_is_approved_on_another_and_reaches_the_upstream(
    deployment: Deployment,
    upstream: tuple[ThreadedServer, rest.RestState],
    held_via: str,
    decided_on: str,
) -> None:
    server, state = upstream
    via: Endpoint = getattr(deployment, held_via)
    decider: Endpoint = getattr(deployment, decided_on)
    session = session_name()
    tier = f"platinum-{uuid.uuid4().hex[:6]}"

    def change() -> requests.Response:
        with via.agent(session) as agent:
            return agent.patch(f"{server.base_url}/items/1", json={"tier": tier}, timeout=120)

    agent = in_thread(change)
    approval = wait_pending(decider, session)
    assert approval["method"] == "PATCH" and approval["url"] == f"{server.base_url}/items/1"
    assert state.items["1"]["tier"] != tier  # held: nothing reached the upstream yet
    decided = decider.api("POST", f"/api/approvals/{approval['id']}/approve", json={"by": "ops"})
    assert decided.status_code == 200, decided.text
    response = agent.result(60)
    assert response.status_code == 200, response.text
    assert response.json()["tier"] == tier and state.items["1"]["tier"] == tier
    for endpoint in (deployment.a, deployment.b):
        shown = endpoint.api("GET", f"/api/approvals/{approval['id']}").json()
        assert shown["state"] == "approved" and shown["decided_by"] == "ops"
    # The first decision won everywhere: a second one, on the other replica, is refused.
    other = deployment.a if decided_on == "b" else deployment.b
    again = other.api("POST", f"/api/approvals/{approval['id']}/deny", json={})
    assert again.status_code == 409, again.text


def test_a_rollback_started_on_a_restores_the_upstream_and_b_refuses_a_second_one(
    deployment: Deployment, upstream: tuple[ThreadedServer, rest.RestState]
) -> None:
    lb, a, b = deployment.lb, deployment.a, deployment.b
    server, state = upstream
    before = state.snapshot()
    session = session_name()
    with lb.agent(session) as agent:
        made = agent.post(f"{server.base_url}/items", json={"name": "via lb"})
        assert made.status_code == 201, made.text
        replaced = agent.put(f"{server.base_url}/items/1", json={"name": "Grace", "tier": "x"})
        assert replaced.status_code == 200, replaced.text
    with b.agent(session) as agent:
        made_b = agent.post(f"{server.base_url}/items", json={"name": "via b"})
        assert made_b.status_code == 201, made_b.text
    assert state.items != before
    # (A step's outcome is journaled just after the agent has its answer; a rollback on another
    # replica would wait for it, but this test compares A's view of the session first.)
    until(
        lambda: [s["status"] for s in a.steps(session)] == ["succeeded"] * 3,
        what="A sees the session's 3 steps succeeded",
    )

    gate = asyncio.Event()
    server.call(lambda: setattr(state, "gate", gate))  # compensations now wait at the upstream
    sent_before = len(state.log)
    results: list[requests.Response] = []
    first = threading.Thread(
        target=lambda: results.append(a.api("POST", f"/api/sessions/{session}/rollback", json={}))
    )
    first.start()
    try:
        until(
            lambda: b.api("GET", f"/api/sessions/{session}").json()["state"] == "rolling_back",
            what="B sees the rollback A runs",
        )
        for other in (b, lb):
            second = other.api("POST", f"/api/sessions/{session}/rollback", json={})
            assert second.status_code == 409, (other.name, second.text)
            assert second.json()["error"] == "conflict"
        # The session takes no more mutations while it is rolled back, on either replica.
        with b.agent(session) as agent:
            refused = agent.post(f"{server.base_url}/items", json={"name": "late"})
        assert refused.status_code == 409, refused.text
    finally:
        server.call(gate.set)
        first.join(90)
        server.call(lambda: setattr(state, "gate", None))
    assert results and results[0].status_code == 200, results and results[0].text
    report = results[0].json()
    assert report["state"] == "rolled_back", report
    assert [s["status"] for s in report["steps"]] == ["compensated"] * 3
    assert state.items == before  # exactly as before the session
    writes = [(m, p) for m, p in state.log[sent_before:] if m != "GET"]
    assert sorted(writes) == sorted(
        [
            ("DELETE", f"/items/{made.json()['id']}"),
            ("DELETE", f"/items/{made_b.json()['id']}"),
            ("PUT", "/items/1"),
        ]
    )  # one compensation each, sent once
    for endpoint in (lb, a, b):  # the others hear of it through PostgreSQL (NOTIFY)

        def rolled_back(e: Endpoint = endpoint) -> bool:
            return bool(e.api("GET", f"/api/sessions/{session}").json()["state"] == "rolled_back")

        until(rolled_back, what=f"{endpoint.name} shows the session rolled back")
    # Done: a rollback asked again on the other replica finds every step compensated already
    # (the refused late POST was never forwarded) and sends nothing.
    sent_after = len(state.log)
    again = b.api("POST", f"/api/sessions/{session}/rollback", json={})
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "rolled_back"
    assert [(s["seq"], s["status"], s["detail"]) for s in again.json()["steps"]] == [
        (4, "skipped", "never forwarded (denied)"),
        *[(seq, "skipped", "already compensated by an earlier rollback") for seq in (3, 2, 1)],
    ]
    assert [(m, p) for m, p in state.log[sent_after:] if m != "GET"] == []
    assert state.items == before
