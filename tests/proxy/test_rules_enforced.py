"""Rules enforced in the real proxy: deny answers 403 and forwards nothing; allow passes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import received
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES = {
    "defaults": {"mutations": "deny"},
    "rules": [
        {
            "name": "no-deleting-customers",
            "risk": "critical",
            "action": "deny",
            "reason": "agents may not delete customers",
            "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/echo/customers/{id}"},
        },
        {
            "name": "create-orders",
            "risk": "low",
            "action": "allow",
            "match": {
                "method": "POST",
                "path": "/echo/shops/{shop}/orders",
                "body": {"$.amount": {"lte": 100}},
            },
        },
    ],
}


@pytest.fixture(scope="module")
def ruled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("rules"), RULES).start()
    yield instance
    instance.stop()


@pytest.mark.parametrize("upstream_name", ["tls_upstream", "plain_upstream"])
def test_deny_is_answered_403_and_nothing_reaches_the_upstream(
    ruled: Undoproxy, upstream_name: str, request: pytest.FixtureRequest, session_id: str
) -> None:
    upstream: ThreadedServer = request.getfixturevalue(upstream_name)
    marker = uuid.uuid4().hex
    with ruled.agent(session_id) as s:
        r = s.delete(f"{upstream.base_url}/echo/customers/{marker}")
    assert r.status_code == 403
    assert r.headers["X-Undoproxy-Decision"] == "denied"
    assert r.json() == {
        "error": "undoproxy_blocked",
        "rule": "no-deleting-customers",
        "reason": "agents may not delete customers",
    }
    assert [x for x in received(upstream) if marker in x.path] == []
    [step] = ruled.steps(session_id)
    assert (step["status"], step["rule"], step["risk"]) == (
        "denied",
        "no-deleting-customers",
        "critical",
    )
    assert step["captures"] == {"id": marker}
    assert step["response_status"] == 403


def test_allow_passes_and_the_journal_names_the_rule(
    ruled: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    shop = uuid.uuid4().hex
    with ruled.agent(session_id) as s:
        r = s.post(f"{tls_upstream.base_url}/echo/shops/{shop}/orders", json={"amount": 40})
    assert r.status_code == 200
    [order] = [x for x in received(tls_upstream) if shop in x.path]  # arrived, exactly once
    assert (order.method, json.loads(order.body)) == ("POST", {"amount": 40})
    [step] = ruled.steps(session_id)
    assert (step["status"], step["rule"], step["action"]) == ("succeeded", "create-orders", "allow")
    assert step["captures"] == {"shop": shop}


def test_unmatched_mutations_get_defaults_mutations(
    ruled: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    shop = uuid.uuid4().hex
    url = f"{plain_upstream.base_url}/echo/shops/{shop}/orders"
    with ruled.agent(session_id) as s:
        too_big = s.post(url, json={"amount": 500})
        read = s.get(url)
    assert too_big.status_code == 403
    assert too_big.json()["rule"] == "defaults.mutations"
    assert read.status_code == 200  # reads that match no rule pass
    assert [x.method for x in received(plain_upstream) if shop in x.path] == ["GET"]


def test_a_forged_host_header_does_not_dodge_a_host_rule(
    ruled: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    # The tunnel goes to 127.0.0.1; the Host header claims another host, which the upstream
    # may serve: two names, so undoproxy refuses it (tests/proxy/test_names.py has them all).
    marker = uuid.uuid4().hex
    with ruled.agent(session_id) as s:
        r = s.delete(
            f"{tls_upstream.base_url}/echo/customers/{marker}", headers={"Host": "harmless.test"}
        )
    assert r.status_code == 421
    assert r.json()["error"] == "undoproxy_misdirected"
    assert [x for x in received(tls_upstream) if marker in x.path] == []
