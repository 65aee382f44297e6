"""HTTP/2 and HTTP/1.1 on either side of undoproxy, every direction, with bodies that announce
no length: each reaches the other side whole, and the journal records what was sent.

An HTTP/2 request need not say how long its body is (`curl -T -`, an httpx generator): the
end of the stream ends it. Forwarded as it was to an HTTP/1.1 upstream, it would have neither
Content-Length nor chunked framing, and the upstream would read an empty body. Real clients
(curl, httpx with h2) through a real `undoproxy run`, to a real HTTP/2 server (Hypercorn,
ALPN h2 and http/1.1) and an HTTP/1.1-only one (aiohttp), both over TLS.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.proxy.memory import MiB
from tests.support.certs import server_context
from tests.support.h2server import H2Server
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


async def _count(request: web.Request) -> web.StreamResponse:
    if request.path == "/stream":  # chunked, no Content-Length
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(int(request.query.get("pieces", "4"))):
            await response.write(bytes([65 + i % 26]) * 65536)
        await response.write_eof()
        return response
    digest, size = hashlib.sha256(), 0
    while chunk := await request.content.read(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    return web.json_response(
        {
            "size": size,
            "sha256": digest.hexdigest(),
            "http_version": f"{request.version.major}.{request.version.minor}",
            "content_length": request.headers.get("Content-Length"),
        }
    )


@pytest.fixture(scope="module")
def h1(upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    app = web.Application(client_max_size=1 << 40)
    app.router.add_route("*", "/{tail:.*}", _count)
    server = ThreadedServer(app, server_context(upstream_cert)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def h2(upstream_cert: tuple[Path, Path]) -> Iterator[H2Server]:
    server = H2Server(upstream_cert).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("http2")).start()
    yield instance
    instance.stop()


def _body(size: int) -> bytes:
    return (b"the quick brown fox " * (size // 20 + 1))[:size]


UPLOADS = [
    # (client protocol, upstream, size, what the upstream must have spoken)
    ("2", "h1", 5_000, "1.1"),
    ("2", "h1", 20 * MiB, "1.1"),  # spooled to disk first
    ("2", "h2", 5_000, "2"),
    ("2", "h2", 20 * MiB, "2"),
    ("1.1", "h2", 5_000, "1.1"),  # an HTTP/1.1 agent gets an HTTP/1.1 upstream connection
    ("1.1", "h1", 20 * MiB, "1.1"),
]


@pytest.mark.parametrize(
    ("client", "upstream", "size", "spoken"),
    UPLOADS,
    ids=[f"h{c}-to-{u}-{s}B" for c, u, s, _ in UPLOADS],
)
def test_a_body_without_a_length_arrives_whole_with_curl(
    proxy: Undoproxy,
    h1: ThreadedServer,
    h2: H2Server,
    session_id: str,
    client: str,
    upstream: str,
    size: int,
    spoken: str,
) -> None:
    body = _body(size)
    base = h1.base_url if upstream == "h1" else h2.base_url
    done = subprocess.run(
        ["curl", "-sS", "--fail", f"--http{client}", "-x", proxy.proxy_url(session_id),
         "--cacert", proxy.ca_bundle, "-T", "-", "-w", "\n%{http_version}",
         f"{base}/count/{uuid.uuid4().hex}"],
        input=body, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer, _, used = done.stdout.decode().rpartition("\n")
    assert used == client
    seen = json.loads(answer)
    assert (seen["size"], seen["sha256"]) == (size, hashlib.sha256(body).hexdigest())
    assert seen["http_version"] == spoken
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert step["request"]["body_length"] == size
    assert step["request"]["body_sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("upstream", ["h1", "h2"])
def test_httpx_with_http2_on_sends_a_generator_body_whole(
    proxy: Undoproxy, h1: ThreadedServer, h2: H2Server, session_id: str, upstream: str
) -> None:
    """httpx with `http2=True` offers http/1.1 first (ALPN), and mitmproxy honours the
    agent's order: HTTP/1.1 inside the tunnel, the body chunked. (With `http1=False` httpx
    speaks HTTP/2 to the proxy itself, with prior knowledge, which mitmproxy does not take.)"""
    pieces = [_body(65536) for _ in range(40)]
    base = h1.base_url if upstream == "h1" else h2.base_url
    with httpx.Client(
        http2=True, proxy=proxy.proxy_url(session_id), verify=proxy.ca_bundle, trust_env=False
    ) as client:
        r = client.post(f"{base}/count/gen", content=iter(pieces))
    assert r.status_code == 200
    assert r.json()["size"] == 40 * 65536
    assert r.json()["sha256"] == hashlib.sha256(b"".join(pieces)).hexdigest()


@pytest.mark.parametrize(
    ("client", "upstream"), [("1.1", "h2"), ("2", "h1"), ("2", "h2"), ("1.1", "h1")]
)
def test_a_response_without_a_length_arrives_whole(
    proxy: Undoproxy,
    h1: ThreadedServer,
    h2: H2Server,
    session_id: str,
    client: str,
    upstream: str,
    tmp_path: Path,
) -> None:
    """HTTP/1.1 chunked to an HTTP/2 agent, an HTTP/2 stream to an HTTP/1.1 agent."""
    base = h1.base_url if upstream == "h1" else h2.base_url
    out = tmp_path / "out"
    done = subprocess.run(
        ["curl", "-sS", "--fail", f"--http{client}", "-x", proxy.proxy_url(session_id),
         "--cacert", proxy.ca_bundle, "-o", str(out), "-w", "%{http_version}",
         f"{base}/stream?pieces=40"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == client
    expected = b"".join(bytes([65 + i % 26]) * 65536 for i in range(40))
    assert out.read_bytes() == expected
    [step] = proxy.steps(session_id)
    assert step["response"]["body_length"] == len(expected)
    assert step["meta"]["stream"]["sha256"] == hashlib.sha256(expected).hexdigest()
