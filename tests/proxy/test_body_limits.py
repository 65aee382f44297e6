"""Bodies are bounded: a request body past `proxy.max_body` (here 40 MiB) is refused with 413
`undoproxy_body_too_large` at once, announced or as it arrives, and never forwarded; one at
the limit goes through (it is over SPOOL_REQUEST_OVER: judged on its headers, then streamed).
A body that must be held is spooled to disk and judged before a byte of it is forwarded: held,
nothing reaches the upstream until it is approved; denied, nothing ever does. A response that
turns out large streams through, and the journal keeps its first bytes, length and SHA-256.

Against a real `undoproxy run`, with curl, requests and raw sockets, to an upstream that
counts and hashes what it receives without keeping it.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import requests
from aiohttp import web

from tests.proxy.memory import MiB, peak_rss
from tests.proxy.wire import read_answer
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.limits import READ_BODY_LIMIT, SPOOL_REQUEST_OVER, STREAM_RESPONSE_OVER

MAX_BODY = 40 * MiB  # the instance's proxy.max_body
SIZES: web.AppKey[dict[str, int]] = web.AppKey("sizes", dict)
HASHES: web.AppKey[dict[str, str]] = web.AppKey("hashes", dict)


async def _count(request: web.Request) -> web.StreamResponse:
    if request.method == "GET" and "chunked" in request.query:
        # A response with no Content-Length, larger than undoproxy buffers.
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(int(request.query["chunked"])):
            await response.write(b"x" * 65536)
        await response.write_eof()
        return response
    if request.method == "GET":
        return web.json_response({})  # a snapshot before a PUT: nothing there yet
    size, digest = 0, hashlib.sha256()
    while chunk := await request.content.read(1 << 20):
        size += len(chunk)
        digest.update(chunk)
    request.app[SIZES][request.path] = size
    request.app[HASHES][request.path] = digest.hexdigest()
    return web.json_response({"size": size})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    app = web.Application(client_max_size=1 << 40)
    app[SIZES], app[HASHES] = {}, {}
    app.router.add_route("*", "/{tail:.*}", _count)
    server = ThreadedServer(app).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {
        "proxy": {"max_body": "40MiB"},
        "approvals": {"timeout": "60s"},
        "rules": [
            {"name": "hold-uploads", "match": {"path": "/held/**"}, "action": "hold"},
            {
                "name": "no-secrets",
                "match": {"path": "/judged/**", "body": {"$.secret": {"exists": True}}},
                "action": "deny",
            },
        ],
    }
    instance = Undoproxy(tmp_path_factory.mktemp("body-limits"), config).start()
    yield instance
    instance.stop()


def _sent(upstream: ThreadedServer, path: str) -> int | None:
    return upstream.app[SIZES].get(path)


def _raw(proxy: Undoproxy, head: str, body: Iterable[bytes] = ()) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=30) as sock:
        sock.sendall(head.encode())
        try:
            for piece in body:
                sock.sendall(piece)
        except OSError:
            pass  # answered and closed while we were still sending
        return read_answer(sock)


def _auth(session: str) -> str:
    import base64

    return f"Proxy-Authorization: Basic {base64.b64encode(f'{session}:x'.encode()).decode()}\r\n"


def _body(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def test_a_body_at_the_limit_is_judged_then_forwarded_whole(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    assert MAX_BODY > SPOOL_REQUEST_OVER  # so that this body is never held in memory
    path = f"/files/{uuid.uuid4().hex}"
    body = _body(MAX_BODY)
    with proxy.agent(session_id) as agent:
        r = agent.put(upstream.base_url + path, data=io.BytesIO(body))
    assert r.status_code == 200, r.text
    assert r.json() == {"size": MAX_BODY}
    assert upstream.app[HASHES][path] == hashlib.sha256(body).hexdigest()
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert step["request"]["body_length"] == MAX_BODY
    assert step["request"]["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_a_spooled_body_is_held_before_a_byte_is_forwarded(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """Held while its 20 MiB wait on disk: the upstream has nothing; approved, it gets all of
    it; a second one denied never gets there."""
    body = _body(20 * MiB)
    paths = [f"/held/{uuid.uuid4().hex}" for _ in range(2)]

    def put(path: str) -> requests.Response:
        with proxy.agent(session_id) as agent:
            return agent.put(upstream.base_url + path, data=io.BytesIO(body), timeout=60)

    for path, verdict in zip(paths, ("approve", "deny"), strict=True):
        pending = in_thread(lambda path=path: put(path))  # type: ignore[misc]
        approval = wait_pending(proxy, session_id)
        time.sleep(0.3)  # time enough for anything that would leak to arrive
        assert _sent(upstream, path) is None
        assert decide(proxy, approval["id"], verdict).status_code == 200
        answer = pending.result(60)
        if verdict == "approve":
            assert answer.status_code == 200, answer.text
            assert upstream.app[HASHES][path] == hashlib.sha256(body).hexdigest()
        else:
            assert answer.status_code == 403
            assert answer.json()["error"] == "undoproxy_denied"
            assert _sent(upstream, path) is None


def test_a_body_too_large_to_hold_counts_as_unreadable_for_the_rules(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """A deny rule on a body field matches a body too large to read (it could say anything):
    what cannot be judged is refused, never passed. A small body without the field passes."""
    path = f"/judged/{uuid.uuid4().hex}"
    big = b'{"secret": 1, "pad": "' + b"x" * (SPOOL_REQUEST_OVER + MiB) + b'"}'
    with proxy.agent(session_id) as agent:
        small = agent.post(upstream.base_url + path, json={"pad": "x"})
        refused = agent.post(
            upstream.base_url + path, data=big, headers={"Content-Type": "application/json"}
        )
    assert small.status_code == 200
    assert refused.status_code == 403 and refused.json()["error"] == "undoproxy_blocked"
    assert _sent(upstream, path) == len(b'{"pad": "x"}')


@pytest.mark.parametrize(
    "how",
    [
        ["--http1.1"],
        ["--http1.1", "-H", "Expect:"],  # the body comes at once, not after a 100 Continue
        ["--http2", "TLS"],
    ],
    ids=["http1.1", "no Expect", "http2"],
)
def test_a_body_announced_past_the_limit_is_refused_at_once_with_curl(
    proxy: Undoproxy,
    upstream: ThreadedServer,
    tls_upstream: ThreadedServer,
    session_id: str,
    tmp_path: Path,
    how: list[str],
) -> None:
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(MAX_BODY + 1)  # sparse: nothing to write
    path = f"/files/{uuid.uuid4().hex}"
    base = tls_upstream.base_url if "TLS" in how else upstream.base_url
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "30", "-x", proxy.proxy_url(session_id),
         "--cacert", proxy.ca_bundle, "-X", "PUT", "--data-binary", f"@{big}",
         "-o", "-", "-w", "\n%{http_code}", *[a for a in how if a != "TLS"], base + path],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    body, _, code = done.stdout.rpartition("\n")
    assert code == "413", done
    answer = json.loads(body)
    assert answer["error"] == "undoproxy_body_too_large"
    assert answer["limit"] == MAX_BODY
    assert _sent(upstream, path) is None
    [step] = proxy.steps(session_id)
    assert (step["status"], step["response_status"]) == ("denied", 413)


def test_four_gibibytes_announced_are_refused_without_being_read(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    before = peak_rss(proxy)
    path = f"/files/{uuid.uuid4().hex}"
    host = f"127.0.0.1:{upstream.port}"
    answer = _raw(
        proxy,
        f"PUT http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n{_auth(session_id)}"
        f"Content-Length: {4 * 1024 * MiB}\r\n\r\n",
        iter([b"x" * MiB] * 8),
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"undoproxy_body_too_large"' in answer
    assert _sent(upstream, path) is None
    assert peak_rss(proxy) - before < 64 * MiB


def _chunks(total: int, size: int = MiB) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        yield f"{n:x}\r\n".encode() + b"y" * n + b"\r\n"
        sent += n


def test_a_chunked_body_is_refused_once_past_the_limit(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    path = f"/files/{uuid.uuid4().hex}"
    host = f"127.0.0.1:{upstream.port}"
    answer = _raw(
        proxy,
        f"POST http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n{_auth(session_id)}"
        "Transfer-Encoding: chunked\r\n\r\n",
        _chunks(MAX_BODY + 1),
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"undoproxy_body_too_large"' in answer
    assert _sent(upstream, path) is None
    [step] = proxy.steps(session_id)
    assert (step["method"], step["status"], step["response_status"]) == ("POST", "denied", 413)


def test_a_chunked_response_larger_than_undoproxy_buffers_streams_through(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    pieces = STREAM_RESPONSE_OVER // 65536 * 4  # four times what undoproxy buffers
    with proxy.agent(session_id) as agent:
        r = agent.get(f"{upstream.base_url}/download?chunked={pieces}")
    assert r.status_code == 200 and len(r.content) == pieces * 65536
    [step] = proxy.steps(session_id)
    assert step["error"] is None
    response = step["response"]
    assert response["body_length"] == pieces * 65536
    assert len(response["body"]) == READ_BODY_LIMIT  # the journal's copy: the first bytes
    assert step["meta"]["stream"] == {
        "length": pieces * 65536,
        "sha256": hashlib.sha256(r.content).hexdigest(),
        "complete": True,
    }
    assert response["body_sha256"] == hashlib.sha256(r.content).hexdigest()
    assert (response["streamed"], response["complete"]) == (True, True)


def test_a_body_that_cannot_be_spooled_is_refused_not_forwarded(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """The disk refuses the spool (here: the spool directory is gone, a file in its place):
    507 undoproxy_spool_failed, nothing forwarded, the refusal journaled. The body is chunked:
    its size unknown until it has arrived, it cannot be judged on its headers and is spooled
    (tests/proxy/test_judged_uploads.py has those that announce theirs)."""
    spool = proxy.state_dir / "spool"
    spool.rename(spool.with_name("spool-away"))
    spool.write_text("not a directory")
    path = f"/files/{uuid.uuid4().hex}"
    body = _body(20 * MiB)
    try:
        with proxy.agent(session_id) as agent:
            r = agent.put(
                upstream.base_url + path, data=(body[i : i + MiB] for i in range(0, len(body), MiB))
            )
    finally:
        spool.unlink()
        spool.with_name("spool-away").rename(spool)
    assert r.status_code == 507
    assert r.json()["error"] == "undoproxy_spool_failed"
    assert _sent(upstream, path) is None
    [step] = proxy.steps(session_id)
    assert (step["status"], step["response_status"]) == ("denied", 507)
