"""Bodies are bounded: a request body past `MAX_REQUEST_BODY` is refused with 413
`undoproxy_body_too_large` at once, announced or as it arrives, and never buffered or
forwarded; one at the limit goes through. A response that turns out large streams through.

Against a real `undoproxy run`, with curl, requests and raw sockets, to an upstream that
counts what it receives without keeping it.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.proxy.memory import MiB, peak_rss
from tests.proxy.wire import read_answer
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.limits import MAX_REQUEST_BODY, STREAM_RESPONSE_OVER

SIZES: web.AppKey[dict[str, int]] = web.AppKey("sizes", dict)


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
    size = 0
    while chunk := await request.content.read(1 << 20):
        size += len(chunk)
    request.app[SIZES][request.path] = size
    return web.json_response({"size": size})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    app = web.Application()
    app[SIZES] = {}
    app.router.add_route("*", "/{tail:.*}", _count)
    server = ThreadedServer(app).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("body-limits")).start()
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


def test_a_body_at_the_limit_is_forwarded(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    path = f"/files/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        r = agent.put(upstream.base_url + path, data=io.BytesIO(b"a" * MAX_REQUEST_BODY))
    assert r.status_code == 200, r.text
    assert r.json() == {"size": MAX_REQUEST_BODY}
    [step] = proxy.steps(session_id)
    assert step["request"]["body_length"] == MAX_REQUEST_BODY


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
        f.truncate(MAX_REQUEST_BODY + 1)  # sparse: nothing to write
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
    assert answer["limit"] == MAX_REQUEST_BODY
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
        _chunks(MAX_REQUEST_BODY + 1),
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
    assert step["error"] == "response streamed to the agent; body not journaled"
