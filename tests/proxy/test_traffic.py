"""Real clients (curl, requests) through a real undoproxy to real upstreams (TLS and plain)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
import requests

from tests.conftest import received
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

STRIPPED = {"proxy-authorization", "proxy-connection", "x-undoproxy-session"}


def test_curl_over_tls_is_attributed_to_its_session(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "--noproxy",
            "",
            "--proxy",
            proxy.proxy_url(session_id, "secret"),
            "--cacert",
            proxy.ca_bundle,
            f"{tls_upstream.base_url}/echo/curl?x=1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    echoed = json.loads(result.stdout)
    assert echoed["path"] == "/echo/curl"
    assert not STRIPPED & {h.lower() for h in echoed["headers"]}
    [step] = proxy.steps(session_id)
    assert step["method"] == "GET"
    assert step["url"] == f"{tls_upstream.base_url}/echo/curl?x=1"
    assert step["status"] == "succeeded" and step["response_status"] == 200


def test_requests_over_plain_http_strips_identifying_headers(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as s:
        r = s.post(
            f"{plain_upstream.base_url}/echo/plain",
            json={"a": 1},
            headers={"X-Undoproxy-Session": "someone-else", "Proxy-Connection": "keep"},
        )
    assert r.status_code == 200
    seen = {h.lower() for h in r.json()["headers"]}
    assert not STRIPPED & seen, seen
    [step] = proxy.steps(session_id)  # credentials win over the header
    assert step["method"] == "POST" and step["status"] == "succeeded"


def test_every_request_inside_a_tunnel_belongs_to_the_connect_session(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as s:  # one keep-alive tunnel, several requests
        for i in range(3):
            assert s.get(f"{tls_upstream.base_url}/echo/{i}").status_code == 200
        assert s.delete(f"{tls_upstream.base_url}/echo/gone").status_code == 200
    got = proxy.steps(session_id)
    assert [st["seq"] for st in got] == [1, 2, 3, 4]
    assert [st["method"] for st in got] == ["GET", "GET", "GET", "DELETE"]


def test_session_header_and_default_session(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    with proxy.agent(None) as s:
        r = s.get(f"{plain_upstream.base_url}/echo/h", headers={"X-Undoproxy-Session": session_id})
        assert "x-undoproxy-session" not in {h.lower() for h in r.json()["headers"]}
        s.get(f"{plain_upstream.base_url}/echo/{marker}")
    assert [st["url"].rsplit("/", 1)[1] for st in proxy.steps(session_id)] == ["h"]
    assert any(st["url"].endswith(marker) for st in proxy.steps("default"))


@pytest.fixture(scope="module")
def token_proxy(tmp_path_factory: pytest.TempPathFactory) -> Undoproxy:
    instance = Undoproxy(tmp_path_factory.mktemp("token"), {"proxy": {"auth": "token"}}).start()
    yield instance  # type: ignore[misc]
    instance.stop()


@pytest.mark.parametrize("creds", [None, ("nosuch", "x"), ("known", "wrong-token")])
def test_token_mode_answers_407_and_forwards_nothing(
    token_proxy: Undoproxy,
    plain_upstream: ThreadedServer,
    tls_upstream: ThreadedServer,
    creds: tuple[str, str] | None,
) -> None:
    token_proxy.api("POST", "/api/sessions", json={"id": "known"})
    marker = uuid.uuid4().hex
    before = len(received(plain_upstream)) + len(received(tls_upstream))
    session, token = creds or (None, "x")
    with token_proxy.agent(session, token) as s:
        r = s.get(f"{plain_upstream.base_url}/echo/{marker}")
        assert r.status_code == 407
        assert r.headers["Proxy-Authenticate"] == 'Basic realm="undoproxy"'
        with pytest.raises(requests.exceptions.ProxyError):
            s.get(f"{tls_upstream.base_url}/echo/{marker}")
    after = received(plain_upstream) + received(tls_upstream)
    assert len(after) == before
    assert not any(marker in r.path for r in after)


def test_token_mode_with_the_right_token_passes(
    token_proxy: Undoproxy, tls_upstream: ThreadedServer
) -> None:
    created = token_proxy.api("POST", "/api/sessions", json={"id": "agent-7"}).json()
    assert created["proxy_url"].startswith(f"http://agent-7:{created['token']}@127.0.0.1:")
    with token_proxy.agent("agent-7", created["token"]) as s:
        assert s.get(f"{tls_upstream.base_url}/echo/ok").status_code == 200


def test_sse_arrives_event_by_event(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    gate = uuid.uuid4().hex
    with proxy.agent(session_id) as s:
        r = s.get(f"{tls_upstream.base_url}/sse?n=3&gate={gate}", stream=True, timeout=15)
        lines = r.iter_lines()
        # The upstream sends the rest only after we prove we got the first event: a buffering
        # proxy would deliver nothing here until the read timeout.
        first = next(line for line in lines if line)
        assert json.loads(first.removeprefix(b"data: ")) == {"n": 0}
        s.get(f"{tls_upstream.base_url}/release?gate={gate}").raise_for_status()
        rest = [json.loads(line.removeprefix(b"data: ")) for line in lines if line]
    assert rest == [{"n": 1}, {"n": 2}]


def test_a_large_response_is_streamed_not_buffered(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    size = 8 * 1024 * 1024
    with proxy.agent(session_id) as s:
        r = s.get(f"{plain_upstream.base_url}/big?size={size}", stream=True)
        total = sum(len(chunk) for chunk in r.iter_content(65536))
    assert total == size
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert step["error"] is None
    # Streamed, and still journaled: its first bytes, its length and its SHA-256.
    assert step["response"]["body_length"] == size
    assert step["meta"]["stream"]["length"] == size
    assert step["meta"]["stream"]["complete"] is True
