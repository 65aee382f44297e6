"""The approvals API, the event stream, and the page's cookie + CSRF sign-in, over real HTTP."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-writes",
        "match": {"host": "127.0.0.1", "method": ["PUT", "DELETE"], "path": "/held/**"},
        "action": "hold",
        "risk": "high",
    }
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"approvals": {"timeout": "30s"}, "rules": RULES}
    instance = Undoproxy(tmp_path_factory.mktemp("approvals-api"), config).start()
    yield instance
    instance.stop()


def sign_in(up: Undoproxy, name: str = "Grace") -> tuple[requests.Session, str]:
    """A browser-like session signed in to the page, and the page's CSRF token."""
    browser = requests.Session()
    r = browser.post(f"{up.admin_url}/signin", data={"token": up.token, "name": name}, timeout=10)
    assert r.status_code == 200 and r.url == f"{up.admin_url}/", r.text  # 303 to the queue
    found = re.search(r'name="csrf-token" content="([^"]+)"', r.text)
    assert found, r.text
    return browser, found.group(1)


def hold(up: Undoproxy, upstream: ThreadedServer, session: str, **kwargs: Any) -> Any:
    """Start a held DELETE in the background; (future, approval)."""
    url = f"{upstream.base_url}/held/{uuid.uuid4().hex}"
    future = in_thread(lambda: up.agent(session).delete(url, timeout=30, **kwargs))
    return future, wait_pending(up, session)


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/api/approvals?state=maybe", 400, "bad_request"),
        ("GET", "/api/approvals?limit=0", 400, "bad_request"),
        ("GET", "/api/approvals/ap_nosuch", 404, "not_found"),
        ("POST", "/api/approvals/ap_nosuch/approve", 404, "not_found"),
        ("POST", "/api/approvals/ap_nosuch/deny", 404, "not_found"),
    ],
)
def test_errors_have_the_one_json_shape(
    up: Undoproxy, method: str, path: str, status: int, code: str
) -> None:
    r = up.api(method, path, json={} if method == "POST" else None)
    assert r.status_code == status
    assert r.json().keys() == {"error", "message"} and r.json()["error"] == code


def test_the_api_needs_the_token(up: Undoproxy) -> None:
    for method, path in (("GET", "/api/approvals"), ("POST", "/api/approvals/x/approve")):
        r = requests.request(method, up.admin_url + path, timeout=10)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"


def test_listing_gives_the_context_and_filters_by_state(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    up.api("POST", "/api/sessions", json={"id": session_id, "intent": "clean up old orders"})
    held, approval = hold(up, plain_upstream, session_id)
    assert approval["intent"] == "clean up old orders"
    assert (approval["rule"], approval["risk"], approval["method"]) == (
        "hold-writes",
        "high",
        "DELETE",
    )
    assert {b["kind"] for b in approval["badges"]} == {"destructive", "new-host"}
    assert approval["expires_at"] - approval["created_at"] == pytest.approx(30, abs=0.01)
    bad = decide(up, approval["id"], "deny", surprise=1)
    assert bad.status_code == 400 and "surprise" in bad.json()["message"]

    assert decide(up, approval["id"], "deny", reason="no", by="cli-user").status_code == 200
    assert held.result(15).status_code == 403
    denied = up.api("GET", "/api/approvals?state=denied").json()["approvals"]
    assert approval["id"] in {a["id"] for a in denied}
    pending = up.api("GET", "/api/approvals?state=pending").json()["approvals"]
    assert approval["id"] not in {a["id"] for a in pending}
    mine = up.api("GET", f"/api/approvals/{approval['id']}").json()
    assert (mine["state"], mine["decided_by"], mine["reason"]) == ("denied", "cli-user", "no")


def test_an_update_shows_the_redacted_body_and_the_diff(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    body = {"name": "Ada", "api_key": "sk-live-SECRET", "total": 125000}
    url = f"{plain_upstream.base_url}/held/{uuid.uuid4().hex}"
    held = in_thread(lambda: up.agent(session_id).put(url, json=body, timeout=30))
    approval = wait_pending(up, session_id)
    assert "SECRET" not in json.dumps(approval)
    assert '"api_key": "[redacted]"' in approval["body"]
    assert any(b["kind"] == "amount" and "125,000" in b["label"] for b in approval["badges"])
    diff = approval["diff"]  # the echo upstream answers the snapshot GET with its own echo
    assert diff is not None and diff["status"] == 200 and diff["changed"] > 0
    assert ["+", '  "name": "Ada",'] in diff["lines"]
    assert decide(up, approval["id"], "deny").status_code == 200
    assert held.result(15).status_code == 403


def test_events_stream_reports_held_requests(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with up.api("GET", "/api/events", stream=True) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        lines = stream.iter_lines(decode_unicode=True)
        assert next(lines) == "retry: 2000"
        held, approval = hold(up, plain_upstream, session_id)
        seen: list[tuple[str, dict[str, Any]]] = []
        kind = ""
        for line in lines:
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                seen.append((kind, json.loads(line.removeprefix("data: "))))
                if kind == "approval" and seen[-1][1]["id"] == approval["id"]:
                    break
    assert ("step", "held") in {(k, d.get("status")) for k, d in seen if k == "step"}
    assert seen[-1][1]["state"] == "pending" and seen[-1][1]["session_id"] == session_id
    assert decide(up, approval["id"], "deny").status_code == 200
    held.result(15)


def test_page_sign_in_sets_a_strict_httponly_cookie_that_is_not_the_token(up: Undoproxy) -> None:
    r = requests.post(
        f"{up.admin_url}/signin",
        data={"token": up.token, "name": "Grace"},
        allow_redirects=False,
        timeout=10,
    )
    assert r.status_code == 303 and r.headers["Location"] == "/"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert up.token not in cookie

    wrong = requests.post(
        f"{up.admin_url}/signin", data={"token": "nope", "name": "Grace"}, timeout=10
    )
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    assert "not the admin token" in wrong.text
    cross = requests.post(
        f"{up.admin_url}/signin",
        data={"token": up.token, "name": "Eve"},
        headers={"Origin": "https://evil.example"},
        timeout=10,
    )
    assert cross.status_code == 403 and "Set-Cookie" not in cross.headers


def test_page_cookie_posts_need_the_csrf_token(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    browser, csrf = sign_in(up, "Grace")
    assert browser.get(f"{up.admin_url}/api/approvals", timeout=10).status_code == 200  # GET: ok
    held, approval = hold(up, plain_upstream, session_id)
    path = f"{up.admin_url}/api/approvals/{approval['id']}/approve"

    for headers in ({}, {"X-CSRF-Token": "forged"}):
        refused = browser.post(path, json={}, headers=headers, timeout=10)
        assert refused.status_code == 403 and refused.json()["error"] == "csrf_failed"
    assert up.api("GET", f"/api/approvals/{approval['id']}").json()["state"] == "pending"

    ok = browser.post(path, json={"by": "someone else"}, headers={"X-CSRF-Token": csrf}, timeout=10)
    assert ok.status_code == 200, ok.text
    assert ok.json()["decided_by"] == "Grace"  # the signed-in name, not the body's
    assert held.result(15).status_code == 200

    signed_out = browser.post(f"{up.admin_url}/signout", data={"csrf": csrf}, timeout=10)
    assert signed_out.status_code == 200 and 'action="/signin"' in signed_out.text
    assert browser.get(f"{up.admin_url}/api/approvals", timeout=10).status_code == 401


def test_the_page_escapes_what_agents_control(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    script = '<script>alert("x")</script>'
    up.api("POST", "/api/sessions", json={"id": session_id, "intent": script})
    held, approval = hold(up, plain_upstream, session_id)
    browser, _ = sign_in(up)
    for path in ("/", f"/sessions/{session_id}", "/sessions"):
        page = browser.get(up.admin_url + path, timeout=10)
        assert page.status_code == 200
        assert script not in page.text and "&lt;script&gt;alert(&quot;x&quot;)" in page.text
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert decide(up, approval["id"], "deny").status_code == 200
    held.result(15)


def test_page_views_without_a_cookie(up: Undoproxy) -> None:
    home = requests.get(up.admin_url + "/", timeout=10)
    assert home.status_code == 200 and 'action="/signin"' in home.text
    away = requests.get(up.admin_url + "/sessions", allow_redirects=False, timeout=10)
    assert away.status_code == 303 and away.headers["Location"] == "/"
    partial = requests.get(up.admin_url + "/?partial=1", timeout=10)
    assert partial.status_code == 401 and partial.json()["error"] == "unauthorized"
    assert requests.get(up.admin_url + "/static/admin.js", timeout=10).status_code == 200
