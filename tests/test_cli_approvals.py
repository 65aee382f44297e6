"""`undoproxy approvals`, `approve` and `deny` against a real running undoproxy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.holding import in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES = [
    {
        "name": "hold-deletes",
        "match": {"host": "127.0.0.1", "method": "DELETE"},
        "action": "hold",
        "risk": "high",
    }
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("cli-approvals"), {"rules": RULES}).start()
    yield instance
    instance.stop()


def test_approvals_approve_and_deny(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    empty = up.cli("approvals")
    assert empty.returncode == 0 and empty.stdout.strip() == "no approvals pending"

    urls = [f"{plain_upstream.base_url}/echo/{uuid.uuid4().hex}" for _ in range(2)]
    first = in_thread(lambda: up.agent(session_id).delete(urls[0], timeout=30))
    approval = wait_pending(up, session_id)
    listed = up.cli("approvals")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:5] == ["APPROVAL", "SESSION", "RULE", "RISK", "REQUEST"]
    assert row.split()[:5] == [approval["id"], session_id, "hold-deletes", "high", "DELETE"]
    assert "destructive" in row and "times out in" in row

    approved = up.cli("approve", approval["id"], "--by", "Ada", "--reason", "checked")
    assert approved.returncode == 0, approved.stderr
    assert f"{approval['id']} approved by Ada (checked)" in approved.stdout
    assert first.result(15).status_code == 200

    second = in_thread(lambda: up.agent(session_id).delete(urls[1], timeout=30))
    other = wait_pending(up, session_id)
    denied = up.cli("deny", other["id"], "--reason", "wrong customer")
    assert denied.returncode == 0, denied.stderr
    assert "denied by" in denied.stdout and "(wrong customer)" in denied.stdout
    assert second.result(15).status_code == 403

    again = up.cli("deny", other["id"])
    assert again.returncode == 1
    assert "already denied" in again.stderr and "HTTP 409" in again.stderr
    missing = up.cli("approve", "ap_nosuch")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr

    history = up.cli("approvals", "--state", "all")
    assert approval["id"] in history.stdout and "approved by Ada: checked" in history.stdout
