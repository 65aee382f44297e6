"""The approvals API, the event stream, the page's sign-in (a page key sent as a bearer token,
never a cookie) and the same-origin rule for changes, over real HTTP."""

from __future__ import annotations

import json
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


def sign_in(up: Undoproxy, name: str = "Grace") -> str:
    """Sign in as the page does; the page key it sends as its bearer token from then on."""
    r = requests.post(
        f"{up.admin_url}/api/signin",
        json={"name": name},
        headers={"Authorization": f"Bearer {up.token}", "Origin": up.admin_url},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


def as_page(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


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


def test_page_sign_in_gives_a_page_key_and_sets_no_cookie(up: Undoproxy) -> None:
    r = requests.post(
        f"{up.admin_url}/api/signin",
        json={"name": "Grace"},
        headers={"Authorization": f"Bearer {up.token}"},
        timeout=10,
    )
    assert r.status_code == 201 and "Set-Cookie" not in r.headers
    key = r.json()["key"]
    assert r.json()["name"] == "Grace" and key.startswith("page_") and up.token not in key

    cases: list[tuple[dict[str, str], dict[str, Any], int]] = [
        ({"Authorization": "Bearer nope"}, {"name": "Grace"}, 401),
        (as_page(key), {"name": "Eve"}, 401),  # a page key cannot mint another
        ({"Authorization": f"Bearer {up.token}"}, {"name": ""}, 400),
        ({"Authorization": f"Bearer {up.token}"}, {"name": "x" * 65}, 400),
        ({"Authorization": f"Bearer {up.token}"}, {"name": "Grace", "admin": True}, 400),
        (
            {"Authorization": f"Bearer {up.token}", "Origin": "http://127.0.0.1:1"},
            {"name": "Eve"},
            403,
        ),
    ]
    for headers, body, status in cases:
        refused = requests.post(
            f"{up.admin_url}/api/signin", json=body, headers=headers, timeout=10
        )
        assert refused.status_code == status, (headers, body, refused.text)
        assert "Set-Cookie" not in refused.headers and "key" not in refused.json()


def test_a_page_key_decides_under_the_signed_in_name_until_signed_out(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    key = sign_in(up, "Grace")
    assert requests.get(f"{up.admin_url}/api/approvals", headers=as_page(key), timeout=10).ok
    held, approval = hold(up, plain_upstream, session_id)
    path = f"{up.admin_url}/api/approvals/{approval['id']}/approve"
    ok = requests.post(
        path,
        json={"by": "someone else"},
        headers={**as_page(key), "Origin": up.admin_url, "Sec-Fetch-Site": "same-origin"},
        timeout=10,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["decided_by"] == "Grace"  # the signed-in name, not the body's
    assert held.result(15).status_code == 200

    out = requests.post(f"{up.admin_url}/api/signout", headers=as_page(key), timeout=10)
    assert out.status_code == 200
    gone = requests.get(f"{up.admin_url}/api/approvals", headers=as_page(key), timeout=10)
    assert gone.status_code == 401
    assert up.api("GET", "/api/approvals").status_code == 200  # the admin token still works


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://127.0.0.1:1"},  # a dev server on another port of this host
        {"Origin": "http://localhost:{port}"},  # the same port under another name
        {"Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},  # what another port gets: sites ignore ports
        {"Sec-Fetch-Site": "cross-site"},
        # DNS rebinding: the attacker's name now resolves to 127.0.0.1, Origin matches Host
        {"Origin": "http://rebound.example:{port}", "Host": "rebound.example:{port}"},
    ],
)
def test_changes_from_another_origin_are_refused_whatever_the_token(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str, headers: dict[str, str]
) -> None:
    held, approval = hold(up, plain_upstream, session_id)
    port = str(up.admin_port)
    sent = {k: v.replace("{port}", port) for k, v in headers.items()}
    for token in (up.token, sign_in(up)):
        r = requests.post(
            f"{up.admin_url}/api/approvals/{approval['id']}/approve",
            json={},
            headers={"Authorization": f"Bearer {token}", **sent},
            timeout=10,
        )
        assert r.status_code == 403, r.text
        assert r.json()["error"] == "cross_origin"
    assert up.api("GET", f"/api/approvals/{approval['id']}").json()["state"] == "pending"
    same = {"Origin": up.admin_url, "Sec-Fetch-Site": "same-origin"}
    denied = up.api("POST", f"/api/approvals/{approval['id']}/deny", json={}, headers=same)
    assert denied.status_code == 200, denied.text
    assert held.result(15).status_code == 403


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/approvals/{id}/deny", '{"reason": "ok", "reason": "sneaky"}'),
        ("/api/approvals/{id}/deny", '{"reason": {"a": 1, "a": 2}}'),
        ("/api/sessions", '{"id": "dup-a", "id": "dup-b"}'),
    ],
)
def test_a_body_with_a_repeated_key_is_refused(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str, path: str, body: str
) -> None:
    held, approval = hold(up, plain_upstream, session_id)
    r = up.api(
        "POST",
        path.replace("{id}", approval["id"]),
        data=body,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert "repeats the key" in r.json()["message"]
    assert up.api("GET", f"/api/approvals/{approval['id']}").json()["state"] == "pending"
    assert "dup-a" not in up.api("GET", "/api/sessions").text
    assert decide(up, approval["id"], "deny").status_code == 200
    held.result(15)


def test_the_page_escapes_what_agents_control(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    script = '<script>alert("x")</script>'
    up.api("POST", "/api/sessions", json={"id": session_id, "intent": script})
    held, approval = hold(up, plain_upstream, session_id)
    key = sign_in(up)
    for path in ("/", f"/sessions/{session_id}", "/sessions"):
        page = requests.get(f"{up.admin_url}{path}?partial=1", headers=as_page(key), timeout=10)
        assert page.status_code == 200
        assert script not in page.text and "&lt;script&gt;alert(&quot;x&quot;)" in page.text
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert decide(up, approval["id"], "deny").status_code == 200
    held.result(15)


def test_the_page_shell_holds_nothing_secret_and_views_need_the_page_key(up: Undoproxy) -> None:
    key = sign_in(up)
    for path in ("/", "/sessions", "/sessions/anything"):
        shell = requests.get(up.admin_url + path, headers=as_page(key), timeout=10)
        assert shell.status_code == 200 and 'id="signin"' in shell.text
        assert "Set-Cookie" not in shell.headers
        assert up.token not in shell.text and key not in shell.text
        assert "csrf" not in shell.text.lower()
        assert shell.headers["Cross-Origin-Resource-Policy"] == "same-origin"
        partial = requests.get(up.admin_url + path + "?partial=1", timeout=10)
        assert partial.status_code == 401 and partial.json()["error"] == "unauthorized"
        # the page key goes in a header only: a cookie carrying it counts for nothing
        cookie = requests.get(
            up.admin_url + path + "?partial=1", cookies={"undoproxy_page": key}, timeout=10
        )
        assert cookie.status_code == 401
    assert requests.get(up.admin_url + "/static/admin.js", timeout=10).status_code == 200
