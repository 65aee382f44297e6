"""Rollback of etcd v3 writes made over its JSON gateway, against a real etcd (Debian's
etcd-server), with zero rules: only the `etcd` pack.

Every call is a `POST` whose body names base64 keys; undoproxy reads the keys before each
write (a `/v3/kv/range`, itself a POST), undoes from that read and proves the undo by ranging
again. Each test reads the whole keyspace directly before and after.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.rollback.helpers import details, rollback_ends
from tests.support.proc import Undoproxy
from tests.support.rpcservers import Etcd


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = Etcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("etcd-proxy"), {"packs": ["etcd"]}).start()
    yield instance
    instance.stop()


@pytest.fixture
def prefix(etcd: Etcd, session_id: str) -> str:
    """A key prefix of the test's own, with three keys in it."""
    name = f"/{session_id}/"
    for key, value in (("a", "1"), ("b", "2"), ("c", "3")):
        put = {"key": b64(name + key), "value": b64(value)}
        requests.post(f"{etcd.base_url}/v3/kv/put", json=put, timeout=10).raise_for_status()
    return name


def call(agent: requests.Session, etcd: Etcd, what: str, body: dict[str, Any]) -> Any:
    r = agent.post(f"{etcd.base_url}/v3/{what}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_puts_deletes_txns_and_leases_are_undone(
    etcd: Etcd, up: Undoproxy, prefix: str, session_id: str
) -> None:
    before = etcd.keyspace()
    agent = up.agent(session_id)
    end = b64(prefix[:-1] + "0")  # the range_end of the prefix: "/" + 1
    call(agent, etcd, "kv/put", {"key": b64(prefix + "a"), "value": b64("agent")})  # overwrite
    call(agent, etcd, "kv/put", {"key": b64(prefix + "a"), "value": b64("again")})  # twice
    call(agent, etcd, "kv/put", {"key": b64(prefix + "new"), "value": b64("made")})  # create
    call(agent, etcd, "kv/deleterange", {"key": b64(prefix + "b")})  # one key
    call(agent, etcd, "kv/deleterange", {"key": b64(prefix + "nothing")})  # nothing there
    txn = {
        "compare": [{"key": b64(prefix + "c"), "target": "VALUE", "value": b64("3")}],
        "success": [
            {"request_put": {"key": b64(prefix + "c"), "value": b64("txn")}},
            {"request_put": {"key": b64(prefix + "t"), "value": b64("txn")}},
        ],
        "failure": [{"request_delete_range": {"key": b64(prefix), "range_end": end}}],
    }
    assert call(agent, etcd, "kv/txn", txn).get("succeeded") is True
    lease = call(agent, etcd, "lease/grant", {"TTL": 300})["ID"]
    call(agent, etcd, "kv/deleterange", {"key": b64(prefix), "range_end": end})  # the prefix
    assert etcd.keyspace() != before

    report = rollback_ends(
        up,
        session_id,
        "rolled_back",
        ["compensated"] * 3 + ["skipped"] + ["compensated"] * 4,
    )
    assert "found no key" in details(report)[3]
    assert etcd.keyspace() == before
    ttl = requests.post(f"{etcd.base_url}/v3/lease/timetolive", json={"ID": lease}, timeout=10)
    assert ttl.json()["TTL"] == "-1"  # the lease the agent took is revoked


def test_a_key_changed_since_the_agent_is_a_conflict_not_overwritten(
    etcd: Etcd, up: Undoproxy, prefix: str, session_id: str
) -> None:
    agent = up.agent(session_id)
    call(agent, etcd, "kv/deleterange", {"key": b64(prefix + "a")})
    # someone else writes the key after the agent deleted it
    other = {"key": b64(prefix + "a"), "value": b64("someone else")}
    requests.post(f"{etcd.base_url}/v3/kv/put", json=other, timeout=10).raise_for_status()
    rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert etcd.keyspace()[b64(prefix + "a")][0] == b64("someone else")
