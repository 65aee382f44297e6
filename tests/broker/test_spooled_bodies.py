"""A real secret value inside a body too large to hold (spooled to disk while it is judged) is
found all the same, across the edge of two of the spool's records, and the request refused:
nothing forwarded, and the value never in the journal's copy of the body."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import pytest
from aiohttp import web

from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.bodyfiles import RECORD

SECRET = "real-key-0123456789abcdef"
SEEN: web.AppKey[list[int]] = web.AppKey("seen", list)


async def _count(request: web.Request) -> web.Response:
    size = 0
    while chunk := await request.content.read(1 << 20):
        size += len(chunk)
    request.app[SEEN].append(size)
    return web.json_response({"size": size})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    app = web.Application(client_max_size=1 << 40)
    app[SEEN] = []
    app.router.add_route("*", "/{tail:.*}", _count)
    server = ThreadedServer(app).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(
    tmp_path_factory: pytest.TempPathFactory, upstream: ThreadedServer
) -> Iterator[Undoproxy]:
    config = {
        "secrets": [
            {
                "name": "api",
                "host": f"127.0.0.1:{upstream.port}",
                "header": "X-Api-Key",
                "value": "${SPOOL_TEST_SECRET}",
            }
        ]
    }
    instance = Undoproxy(
        tmp_path_factory.mktemp("spooled-secrets"), config, env={"SPOOL_TEST_SECRET": SECRET}
    ).start()
    yield instance
    instance.stop()


@pytest.mark.parametrize(
    "at",
    [17 * RECORD - len(SECRET) // 2, 10],
    ids=["across two records", "in the first bytes (the journal's copy)"],
)
def test_a_secret_in_a_spooled_body_is_refused(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str, at: int
) -> None:
    body = bytearray(b"x" * (20 * RECORD))
    body[at : at + len(SECRET)] = SECRET.encode()
    before = len(upstream.app[SEEN])
    with proxy.agent(session_id) as agent:
        r = agent.put(f"{upstream.base_url}/big/{uuid.uuid4().hex}", data=io.BytesIO(bytes(body)))
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "undoproxy_secret_in_agent"
    assert len(upstream.app[SEEN]) == before  # nothing forwarded
    [step] = proxy.steps(session_id)
    assert step["status"] == "denied"
    assert SECRET not in (step["request"]["body"] or "")
    assert SECRET not in proxy.api("GET", f"/api/sessions/{session_id}").text


def test_a_large_body_without_one_goes_through(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    body = b"z" * (20 * RECORD)
    with proxy.agent(session_id) as agent:
        r = agent.put(f"{upstream.base_url}/big/{uuid.uuid4().hex}", data=io.BytesIO(body))
    assert r.status_code == 200 and r.json() == {"size": len(body)}
