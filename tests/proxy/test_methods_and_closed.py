"""Which requests are mutations, and where they may not go: real proxy, real upstream.

Every method but GET/HEAD/OPTIONS/PROPFIND/REPORT/SEARCH is a mutation (WebDAV's MKCOL, MOVE,
LOCK, ... and methods undoproxy has never heard of); a closed session takes no mutations;
a signed request is irreversible rather than blocked by a snapshot it cannot sign; the
agent's credentials go only to the origin it sent its request to.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import received
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

WRITES = ["MKCOL", "MOVE", "COPY", "PROPPATCH", "LOCK", "UNLOCK", "PURGE", "MKCALENDAR", "FROB"]
READS = ["GET", "HEAD", "OPTIONS", "PROPFIND", "REPORT", "SEARCH"]


@pytest.fixture(scope="module")
def denying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(
        tmp_path_factory.mktemp("deny"), {"defaults": {"mutations": "deny"}}
    ).start()
    yield instance
    instance.stop()


@pytest.mark.parametrize("method", WRITES)
def test_defaults_deny_refuses_every_method_that_is_not_a_read(
    denying: Undoproxy, tls_upstream: ThreadedServer, session_id: str, method: str
) -> None:
    marker = f"/dav/{uuid.uuid4().hex}/"
    with denying.agent(session_id) as agent:
        r = agent.request(method, tls_upstream.base_url + marker, timeout=30)
    assert r.status_code == 403
    assert r.json()["error"] == "undoproxy_blocked"
    assert [x for x in received(tls_upstream) if x.path == marker] == []
    [step] = denying.steps(session_id)
    assert step["method"] == method and step["status"] == "denied"


@pytest.mark.parametrize("method", READS)
def test_reads_pass_under_defaults_deny(
    denying: Undoproxy, tls_upstream: ThreadedServer, session_id: str, method: str
) -> None:
    marker = f"/dav/{uuid.uuid4().hex}"
    with denying.agent(session_id) as agent:
        r = agent.request(method, tls_upstream.base_url + marker, timeout=30)
    assert r.status_code == 200
    assert [x.method for x in received(tls_upstream) if x.path == marker] == [method]


def test_defaults_hold_holds_a_move_until_a_person_decides(
    tmp_path_factory: pytest.TempPathFactory, tls_upstream: ThreadedServer, session_id: str
) -> None:
    holding = Undoproxy(tmp_path_factory.mktemp("hold"), {"defaults": {"mutations": "hold"}})
    holding.start()
    try:
        marker = f"/dav/{uuid.uuid4().hex}"
        agent = holding.agent(session_id)
        waiting = in_thread(
            lambda: agent.request(
                "MOVE", tls_upstream.base_url + marker, headers={"Destination": "/x"}, timeout=60
            )
        )
        approval = wait_pending(holding, session_id)
        # Held: the upstream has seen nothing while the request waits for a person.
        assert [x for x in received(tls_upstream) if x.path == marker] == []
        assert decide(holding, approval["id"], "deny", reason="no").status_code == 200
        answer = waiting.result(30)
        assert answer.status_code == 403
        assert answer.headers["X-Undoproxy-Decision"] == "denied"
        assert [x for x in received(tls_upstream) if x.path == marker] == []
    finally:
        holding.stop()


def test_an_unknown_method_is_journaled_as_an_irreversible_mutation(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/dav/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        assert agent.request("MKCOL", tls_upstream.base_url + marker).status_code == 200
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    report = proxy.rollback(session_id)
    # Nothing can undo it: the session must not claim it was rolled back.
    assert report["state"] == "rollback_incomplete"
    [result] = report["steps"]
    assert result["status"] == "irreversible"
    assert "MKCOL" in result["detail"]


def test_a_rolled_back_session_takes_no_more_mutations(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/closed/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        assert agent.get(tls_upstream.base_url + marker).status_code == 200
        report = proxy.rollback(session_id)
        assert report["state"] == "rolled_back"
        refused = agent.put(tls_upstream.base_url + marker, json={"late": True})
        read = agent.get(tls_upstream.base_url + marker)
    assert refused.status_code == 409
    assert refused.json()["error"] == "undoproxy_session_closed"
    assert refused.json()["state"] == "rolled_back"
    assert read.status_code == 200  # reads still pass
    assert [x.method for x in received(tls_upstream) if x.path == marker] == ["GET", "GET"]


def test_a_committed_session_takes_no_more_mutations(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/closed/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        assert agent.get(tls_upstream.base_url + marker).status_code == 200
        assert proxy.api("POST", f"/api/sessions/{session_id}/commit").status_code == 200
        refused = agent.delete(tls_upstream.base_url + marker)
    assert refused.status_code == 409
    assert refused.json()["error"] == "undoproxy_session_closed"
    assert [x.method for x in received(tls_upstream) if x.path == marker] == ["GET"]


def test_a_signed_request_is_forwarded_as_irreversible_without_a_snapshot(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/bucket/{uuid.uuid4().hex}"
    signed = {
        "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261123/us-east-1/s3/"
        "aws4_request, SignedHeaders=host;x-amz-date, Signature=abc123",
        "X-Amz-Date": "20261123T120000Z",
        "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
    }
    with proxy.agent(session_id, headers=signed) as agent:
        r = agent.put(tls_upstream.base_url + marker, data=b"object bytes")
    assert r.status_code == 200
    # No snapshot GET replayed the PUT's signature: only the PUT itself arrived.
    assert [x.method for x in received(tls_upstream) if x.path == marker] == ["PUT"]
    report = proxy.rollback(session_id)
    [result] = report["steps"]
    assert result["status"] == "irreversible"
    assert "AWS Signature Version 4" in result["detail"]
    assert report["state"] == "rollback_incomplete"


@pytest.mark.parametrize("credentials", ["origin", "forward"])
def test_a_snapshot_on_another_origin_is_never_read_and_the_step_is_irreversible(
    tmp_path_factory: pytest.TempPathFactory,
    tls_upstream: ThreadedServer,
    plain_upstream: ThreadedServer,
    session_id: str,
    credentials: str,
) -> None:
    # A read of another origin shows nothing about the resource the agent changed: it could
    # only "verify" an undo that never touched it. Whatever the rule says of credentials.
    rules = [
        {
            "name": "snapshot-elsewhere",
            "match": {"method": "PUT", "path": "/pinned/**"},
            "snapshot": {"url": "${request.body.target}"},
            "compensate": "restore",
            "credentials": credentials,
        }
    ]
    instance = Undoproxy(tmp_path_factory.mktemp("pin"), {"rules": rules}).start()
    try:
        marker = uuid.uuid4().hex
        elsewhere = f"{plain_upstream.base_url}/steal/{marker}"
        with instance.agent(session_id, headers={"Authorization": "Bearer agent-secret"}) as a:
            r = a.put(f"{tls_upstream.base_url}/pinned/{marker}", json={"target": elsewhere})
        assert r.status_code == 200
        assert [x for x in received(plain_upstream) if x.path == f"/steal/{marker}"] == []
        # The agent's own origin did get its credentials with the PUT.
        [put] = [x for x in received(tls_upstream) if x.path == f"/pinned/{marker}"]
        assert put.headers["Authorization"] == "Bearer agent-secret"
        report = instance.rollback(session_id)
        assert [s["status"] for s in report["steps"]] == ["irreversible"]
        assert "another origin" in report["steps"][0]["detail"]
    finally:
        instance.stop()


def test_the_snapshot_get_carries_credentials_but_not_request_specific_headers(
    tmp_path_factory: pytest.TempPathFactory, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = f"/things/{uuid.uuid4().hex}"
    headers = {
        "Authorization": "Bearer agent-secret",
        "If-Match": '"v1"',
        "Idempotency-Key": "k-1",
        "Digest": "sha-256=abc",
        "Accept": "application/json",
    }
    proxy = Undoproxy(tmp_path_factory.mktemp("snaphdr")).start()
    try:
        with proxy.agent(session_id, headers=headers) as agent:
            assert agent.put(tls_upstream.base_url + marker, json={"a": 1}).status_code == 200
        get, put = [x for x in received(tls_upstream) if x.path == marker]
        assert (get.method, put.method) == ("GET", "PUT")
        assert get.headers["Authorization"] == "Bearer agent-secret"
        assert get.headers["Accept"] == "application/json"
        for name in ("If-Match", "Idempotency-Key", "Digest"):
            assert name not in get.headers
            assert name in put.headers
    finally:
        proxy.stop()


def test_a_rule_decides_the_kind_whatever_the_method(
    tmp_path_factory: pytest.TempPathFactory, tls_upstream: ThreadedServer, session_id: str
) -> None:
    rules = [
        {
            "name": "search-by-post",
            "match": {"method": "POST", "path": "/search/**"},
            "kind": "read",
        },
        {
            "name": "get-that-acts",
            "match": {"method": "GET", "path": "/trigger/**"},
            "kind": "mutation",
            "action": "deny",
        },
    ]
    config = {"defaults": {"mutations": "deny"}, "rules": rules}
    instance = Undoproxy(tmp_path_factory.mktemp("kind"), config).start()
    try:
        marker = uuid.uuid4().hex
        with instance.agent(session_id) as agent:
            search = agent.post(f"{tls_upstream.base_url}/search/{marker}", json={"q": "x"})
            trigger = agent.get(f"{tls_upstream.base_url}/trigger/{marker}")
        assert search.status_code == 200  # a read: defaults.mutations: deny does not apply
        assert trigger.status_code == 403  # a mutation the rule denies
        assert [x.path.split("/")[1] for x in received(tls_upstream) if marker in x.path] == [
            "search"
        ]
        shown = instance.steps(session_id)
        assert [(s["method"], s["kind"]) for s in shown] == [("POST", "read"), ("GET", "mutation")]
        report = instance.rollback(session_id)
        # The read is never part of a rollback; the denied GET was never forwarded.
        assert [s["status"] for s in report["steps"]] == ["skipped"]
    finally:
        instance.stop()


def test_the_intent_header_is_kept_with_the_step_and_never_forwarded(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    why = "close the duplicate ticket the user reported"
    with proxy.agent(session_id, headers={"X-Undoproxy-Intent": why}) as agent:
        assert agent.post(f"{tls_upstream.base_url}/tickets/{marker}", json={}).ok
    [got] = [x for x in received(tls_upstream) if marker in x.path]
    assert not any(name.lower() == "x-undoproxy-intent" for name in got.headers)
    [step] = proxy.steps(session_id)
    assert step["intent"] == why
    shown = proxy.cli("show", session_id)
    assert f"#1: {why}" in shown.stdout


@pytest.mark.parametrize("credentials", ["origin", "forward"])
def test_a_compensation_on_another_origin_gets_credentials_only_if_the_rule_forwards_them(
    tmp_path_factory: pytest.TempPathFactory,
    tls_upstream: ThreadedServer,
    plain_upstream: ThreadedServer,
    session_id: str,
    credentials: str,
) -> None:
    rules = [
        {
            "name": "undo-elsewhere",
            "match": {"method": "POST", "path": "/orders/**"},
            "compensate": {"method": "DELETE", "url": "${request.body.undo}"},
            "credentials": credentials,
        }
    ]
    instance = Undoproxy(tmp_path_factory.mktemp("cpin"), {"rules": rules}).start()
    try:
        marker = uuid.uuid4().hex
        undo = f"{plain_upstream.base_url}/undo/{marker}"
        with instance.agent(session_id, headers={"Authorization": "Bearer agent-secret"}) as a:
            assert a.post(f"{tls_upstream.base_url}/orders/{marker}", json={"undo": undo}).ok
        instance.api("POST", f"/api/sessions/{session_id}/rollback")
        at_other_host = [x for x in received(plain_upstream) if x.path == f"/undo/{marker}"]
        [sent] = [x for x in at_other_host if x.method == "DELETE"]
        if credentials == "origin":  # nothing undoproxy sent there carried them
            assert all("Authorization" not in x.headers for x in at_other_host)
        else:
            assert sent.headers["Authorization"] == "Bearer agent-secret"
    finally:
        instance.stop()
