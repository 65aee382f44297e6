"""undoproxy's own requests (snapshots, compensations, read-backs) go out through one client
shared by every session: a cookie an upstream sets in answer to one of them must never ride
along with any later request, another session's above all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

SEEN: web.AppKey[list[tuple[str, str, str | None]]] = web.AppKey("seen", list)
DOCS: web.AppKey[dict[str, str]] = web.AppKey("docs", dict)
RULES = {
    "rules": [
        {
            "name": "update-doc",
            "match": {"host": "localhost", "method": "PUT", "path": "/docs/{id}"},
            "snapshot": {"url": "/docs/{id}"},
            "compensate": "restore",
        }
    ]
}


async def doc(request: web.Request) -> web.Response:
    """A document store that hands out a session cookie with every answer."""
    request.app[SEEN].append((request.method, request.path, request.headers.get("Cookie")))
    docs = request.app[DOCS]
    name = request.match_info["id"]
    if request.method == "PUT":
        docs[name] = await request.text()
    response = web.Response(text=docs.get(name, "original"), content_type="text/plain")
    response.set_cookie("upstream_session", f"secret-{uuid.uuid4().hex}")
    return response


@pytest.fixture
def cookie_upstream(upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    app = web.Application()
    app[SEEN] = []
    app[DOCS] = {}
    app.router.add_route("*", "/docs/{id}", doc)
    server = ThreadedServer(app, server_context(upstream_cert)).start()
    yield server
    server.stop()


def test_a_cookie_set_for_one_sessions_snapshot_never_reaches_another_request(
    tmp_path: Path, cookie_upstream: ThreadedServer
) -> None:
    # By name: aiohttp's default cookie jar keeps no cookie of an IP address's.
    base = cookie_upstream.base_url.replace("127.0.0.1", "localhost")
    up = Undoproxy(tmp_path, RULES).start()
    try:
        for session, name in (("alice", "a"), ("bob", "b")):
            with up.agent(session) as agent:
                r = agent.put(f"{base}/docs/{name}", data="changed")
                assert r.status_code == 200, r.text
        for session in ("alice", "bob"):
            report = up.rollback(session)
            assert report["state"] == "rolled_back", report
    finally:
        up.stop()
    seen = cookie_upstream.app[SEEN]
    ours = [(m, p) for m, p, _ in seen]
    # Each session: snapshot GET, the agent's PUT, then at rollback the PUT back and its read.
    assert ours.count(("GET", "/docs/a")) >= 2 and ours.count(("PUT", "/docs/a")) == 2
    assert ours.count(("GET", "/docs/b")) >= 2 and ours.count(("PUT", "/docs/b")) == 2
    # The agents' own requests go through mitmproxy as they sent them (they kept no cookies
    # either); undoproxy's never carry one.
    assert [c for _, _, c in seen if c] == [], seen
