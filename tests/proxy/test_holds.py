"""Held requests through a real undoproxy: the agent waits, a person decides, the agent gets
the real response or the contract's 403; webhooks are told; nothing held leaks through."""

from __future__ import annotations

import base64
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.conftest import received
from tests.support.holding import (
    HOOKS,
    approvals,
    dead_url,
    decide,
    in_thread,
    until,
    wait_pending,
    wait_state,
    webhook_app,
)
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-deletes",
        "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/held/**"},
        "action": "hold",
        "risk": "high",
    },
    {
        "name": "hold-critical",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/critical/**"},
        "action": "hold",
        "risk": "critical",
    },
    {
        "name": "hold-briefly",
        "match": {"host": "127.0.0.1", "path": "/quick/**"},
        "action": "hold",
        "timeout": "1s",
    },
]
DENIED_KEYS = {"error", "rule", "reason", "approval_id"}


@pytest.fixture(scope="module")
def hooks() -> Iterator[ThreadedServer]:
    server = ThreadedServer(webhook_app()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, hooks: ThreadedServer) -> Iterator[Undoproxy]:
    """One undoproxy for the module; a dead webhook is listed before the live one."""
    config = {
        "approvals": {"timeout": "30s", "notify": [dead_url(), f"{hooks.base_url}/hook"]},
        "rules": RULES,
    }
    instance = Undoproxy(tmp_path_factory.mktemp("holds"), config).start()
    yield instance
    instance.stop()


def marked(server: ThreadedServer, marker: str) -> list[Any]:
    """The writes the upstream received for this marker (not the reads undoproxy takes before a
    write: snapshot GETs, and the PROPFIND of a DELETE's target for its WebDAV properties)."""
    return [r for r in received(server) if marker in r.path and r.method not in ("GET", "PROPFIND")]


def final_status(proxy: Undoproxy, session: str) -> str:
    """The status of the session's one step, once it is no longer `held`."""
    deadline = time.monotonic() + 15
    status = "held"
    while time.monotonic() < deadline:
        [step] = proxy.api("GET", f"/api/sessions/{session}").json()["steps"]
        status = step["status"]
        if status != "held":
            return str(status)
        time.sleep(0.05)
    return status


def test_a_held_request_waits_while_other_requests_flow(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    url = f"{plain_upstream.base_url}/held/{marker}"
    held = in_thread(lambda: up.agent(session_id).delete(url, timeout=30))
    approval = wait_pending(up, session_id)

    with up.agent(session_id) as same, up.agent("someone-else") as other:
        assert same.get(f"{plain_upstream.base_url}/echo/read", timeout=10).status_code == 200
        assert other.post(f"{plain_upstream.base_url}/echo/w", json={}, timeout=10).ok
    # Both answered while the held one still waits, unseen by the upstream.
    assert not held.done() and marked(plain_upstream, marker) == []

    r = decide(up, approval["id"], "approve", by="Ada")
    assert r.status_code == 200 and r.json()["state"] == "approved"
    response = held.result(15)
    assert response.status_code == 200 and response.json()["method"] == "DELETE"
    assert len(marked(plain_upstream, marker)) == 1  # forwarded exactly once

    decided = up.api("GET", f"/api/approvals/{approval['id']}").json()
    assert decided["decided_by"] == "Ada" and decided["decided_at"] >= decided["created_at"]
    steps = up.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    held_step = next(s for s in steps if s["id"] == approval["step_id"])
    assert held_step["status"] == "succeeded" and held_step["response_status"] == 200


def test_deny_answers_403_with_the_contract_shape_and_forwards_nothing(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    held = in_thread(
        lambda: up.agent(session_id).delete(f"{plain_upstream.base_url}/held/{marker}", timeout=30)
    )
    approval = wait_pending(up, session_id)
    assert decide(up, approval["id"], "deny", reason="not this customer").status_code == 200

    response = held.result(15)
    assert response.status_code == 403
    assert response.headers["X-Undoproxy-Decision"] == "denied"
    body = response.json()
    assert set(body) == DENIED_KEYS
    assert body == {
        "error": "undoproxy_denied",
        "rule": "hold-deletes",
        "reason": "not this customer",
        "approval_id": approval["id"],
    }
    assert marked(plain_upstream, marker) == []
    [step] = up.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    assert (step["status"], step["response_status"]) == ("denied", 403)

    again = decide(up, approval["id"], "approve")  # the first decision wins
    assert again.status_code == 409
    assert set(again.json()) == {"error", "message"} and again.json()["error"] == "conflict"


def test_nobody_deciding_times_out_and_a_late_approve_is_refused(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    with up.agent(session_id) as s:
        response = s.put(f"{plain_upstream.base_url}/quick/{marker}", json={"a": 1}, timeout=20)
    assert response.status_code == 403
    assert response.headers["X-Undoproxy-Decision"] == "timeout"
    body = response.json()
    assert body["error"] == "undoproxy_denied" and body["rule"] == "hold-briefly"
    assert "1s" in body["reason"]

    late = decide(up, body["approval_id"], "approve")
    assert late.status_code == 409, late.text
    assert wait_state(up, body["approval_id"], "timed_out")["decided_by"] is None
    assert final_status(up, session_id) == "denied"  # answered: it can never be sent now
    assert marked(plain_upstream, marker) == []


def test_identical_requests_of_a_session_share_one_approval(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    url = f"{plain_upstream.base_url}/held/{marker}"
    first = in_thread(lambda: up.agent(session_id).delete(url, timeout=30))
    second = in_thread(lambda: up.agent(session_id).delete(url, timeout=30))
    other = in_thread(lambda: up.agent(session_id).delete(url + "-other", timeout=30))
    deadline = time.monotonic() + 15
    pending: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pending = up.api("GET", f"/api/approvals?state=pending&session={session_id}").json()[
            "approvals"
        ]
        if sorted(len(a["step_ids"]) for a in pending) == [1, 2]:
            break
        time.sleep(0.05)
    shared = next(a for a in pending if len(a["step_ids"]) == 2)
    lone = next(a for a in pending if len(a["step_ids"]) == 1)

    assert decide(up, shared["id"], "approve").status_code == 200
    assert first.result(15).status_code == 200 and second.result(15).status_code == 200
    assert len([r for r in marked(plain_upstream, marker) if r.path.endswith(marker)]) == 2
    assert not other.done()  # a different URL is a different approval
    assert decide(up, lone["id"], "deny").status_code == 200
    assert other.result(15).status_code == 403
    steps = up.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    assert {s["id"] for s in steps} >= set(shared["step_ids"]) | set(lone["step_ids"])


def test_critical_risk_needs_a_reason_to_approve_or_deny(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    held = in_thread(
        lambda: up.agent(session_id).post(
            f"{plain_upstream.base_url}/critical/{marker}", json={"amount": 50000}, timeout=30
        )
    )
    approval = wait_pending(up, session_id)
    assert approval["reason_required"] is True
    for verdict in ("approve", "deny"):
        for body in ({}, {"reason": "   "}):
            r = decide(up, approval["id"], verdict, **body)
            assert r.status_code == 400 and r.json()["error"] == "reason_required"
    assert not held.done()
    r = decide(up, approval["id"], "approve", reason="refund agreed with the customer")
    assert r.status_code == 200 and r.json()["reason"] == "refund agreed with the customer"
    assert held.result(15).status_code == 200
    assert len(marked(plain_upstream, marker)) == 1


def test_the_webhook_is_told_and_a_dead_one_changes_nothing(
    up: Undoproxy, hooks: ThreadedServer, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    held = in_thread(
        lambda: up.agent(session_id).delete(f"{plain_upstream.base_url}/held/{marker}", timeout=30)
    )
    approval = wait_pending(up, session_id)  # the dead webhook did not keep it from the queue
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not [
        h for h in hooks.app[HOOKS] if approval["id"] in h["text"]
    ]:
        time.sleep(0.05)
    [hook] = [h for h in hooks.app[HOOKS] if approval["id"] in h["text"]]
    assert set(hook) == {"text"}
    for part in (session_id, "hold-deletes", "DELETE", f"/held/{marker}"):
        assert part in hook["text"]
    assert f"{up.admin_url}/#approval/{approval['id']}" in hook["text"]

    assert decide(up, approval["id"], "approve").status_code == 200
    assert held.result(15).status_code == 200
    assert len(marked(plain_upstream, marker)) == 1


def test_the_webhook_shows_session_ids_and_urls_as_text_not_slack_markup(
    up: Undoproxy, hooks: ThreadedServer, plain_upstream: ThreadedServer
) -> None:
    """Slack reads `<!channel>` as a mention of everyone and `<http://evil|click>` as a link;
    from an agent's session id and URL they must arrive escaped, as Slack says to."""
    marker = uuid.uuid4().hex[:12]
    session = f"<!channel>&<@U0{marker}>`*x*`"
    target = f"/held/{marker}/<http://evil.example|click>&amp"
    host = f"127.0.0.1:{plain_upstream.port}"

    def send() -> bytes:
        with socket.create_connection(("127.0.0.1", up.proxy_port), timeout=30) as sock:
            sock.sendall(
                f"DELETE http://{host}{target} HTTP/1.1\r\nHost: {host}\r\n"
                f"X-Undoproxy-Session: {session}\r\nConnection: close\r\n\r\n".encode()
            )
            return sock.recv(65536)

    held = in_thread(send)
    approval = until(
        lambda: [a for a in approvals(up, state="pending") if marker in a["url"]],
        what="the approval",
    )[0]
    [hook] = until(
        lambda: [h for h in hooks.app[HOOKS] if approval["id"] in h["text"]], what="the webhook"
    )
    text = hook["text"]
    assert "<" not in text and ">" not in text  # no mention, no link, no markup at all
    assert f"&lt;!channel&gt;&amp;&lt;@U0{marker}&gt;'*x*'" in text
    assert f"/held/{marker}/&lt;http://evil.example|click&gt;&amp;amp" in text
    assert decide(up, approval["id"], "deny").status_code == 200
    assert b" 403 " in held.result(15).split(b"\r\n", 1)[0]


def test_an_agent_that_gives_up_leaves_an_expired_approval(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    # A plain-HTTP request through the proxy on a socket of our own, closed once its approval
    # is pending (never after a fixed time: under load the hold may come later than that).
    credentials = base64.b64encode(f"{session_id}:x".encode()).decode()
    host = plain_upstream.base_url.removeprefix("http://")
    agent = socket.create_connection(("127.0.0.1", up.proxy_port), timeout=30)
    agent.sendall(
        f"DELETE {plain_upstream.base_url}/held/{marker} HTTP/1.1\r\nHost: {host}\r\n"
        f"Proxy-Authorization: Basic {credentials}\r\nContent-Length: 0\r\n\r\n".encode()
    )
    approval = until(
        lambda: next(
            iter(up.api("GET", f"/api/approvals?session={session_id}").json()["approvals"]), None
        ),
        timeout=30,
        what="the request is held",
    )
    agent.close()  # the agent gives up
    expired = wait_state(up, approval["id"], "expired")
    assert "disconnected" in expired["reason"]
    assert decide(up, approval["id"], "approve").status_code == 409
    assert final_status(up, session_id) == "denied"  # answered: it can never be sent now
    assert marked(plain_upstream, marker) == []


def test_after_a_crash_pending_approvals_are_expired_never_approved(
    tmp_path: Any, plain_upstream: ThreadedServer, session_id: str
) -> None:
    first = Undoproxy(tmp_path, {"rules": RULES}).start()
    marker = uuid.uuid4().hex
    held = in_thread(
        lambda: first.agent(session_id).delete(
            f"{plain_upstream.base_url}/held/{marker}", timeout=30
        )
    )
    approval = wait_pending(first, session_id)
    assert first.proc is not None
    first.proc.kill()  # a crash: nothing gets a chance to clean up
    first.proc.wait(10)
    with pytest.raises(requests.exceptions.RequestException):
        held.result(15)

    second = Undoproxy(tmp_path, {"rules": RULES}).start()
    try:
        found = second.api("GET", f"/api/approvals/{approval['id']}").json()
        assert found["state"] == "expired" and "restarted" in found["reason"]
        assert decide(second, approval["id"], "approve").status_code == 409
        assert second.api("GET", "/api/approvals?state=pending").json()["approvals"] == []
        [step] = second.api("GET", f"/api/sessions/{session_id}").json()["steps"]
        assert step["status"] == "denied"
    finally:
        assert second.stop() == 0
    assert marked(plain_upstream, marker) == []
