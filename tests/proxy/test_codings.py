"""Content codings: a hold cannot be hidden by one, and none can knock undoproxy over.

Against a real `undoproxy run`: a hold rule on `$.amount` must hold a body however it is
encoded (`x-gzip`, `gzip, gzip`, two header fields, raw deflate, br, zstd), and a body whose
coding undoproxy cannot decode (not an HTTP coding, corrupt, a bomb) must be held too, as an
ambiguous body is; decompression bombs in a request, in the answer to a mutation and in the
answer to a snapshot leave the proxy's peak memory about where it was.
"""

from __future__ import annotations

import base64
import bz2
import functools
import gzip
import http.client
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import brotli  # type: ignore[import-untyped]
import pytest
import zstandard
from aiohttp import web

from tests.proxy.memory import MiB, peak_rss
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES = [
    {
        "name": "hold-payments",
        "match": {"method": "POST", "path": "/pay/**", "body": {"$.amount": {"gt": 0}}},
        "action": "hold",
    },
    {
        "name": "free-payments",
        "match": {"method": "POST", "path": "/pay/**", "body": {"$.amount": {"lte": 0}}},
        "action": "allow",
    },
    {
        "name": "no-transfers",
        "match": {"method": "POST", "path": "/transfer/**", "body": {"$.amount": {"gt": 0}}},
        "action": "deny",
    },
    {
        "name": "restore-docs",
        "match": {"method": "PUT", "path": "/docs/**"},
        "compensate": "restore",
    },
]


@functools.cache
def bomb() -> bytes:
    """256 MiB of spaces in a JSON string: about 260 KB of gzip, in 258 gzip members (one
    body, as RFC 1952 allows and every gzip decoder reads)."""
    spaces = gzip.compress(b" " * MiB, 9)
    return gzip.compress(b'{"amount": 5, "pad": "') + spaces * 256 + gzip.compress(b'"}')


RECEIVED: web.AppKey[list[str]] = web.AppKey("received", list)


async def _serve(request: web.Request) -> web.Response:
    request.app[RECEIVED].append(f"{request.method} {request.path}")
    await request.read()
    if "/bomb" in request.path and request.method in ("GET", "POST"):
        # A gzip bomb as the answer (a snapshot's GET, or a mutation's response).
        return web.Response(
            body=bomb(), headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )
    return web.json_response({"ok": True})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    # aiohttp would inflate an encoded request body itself: this app never reads it decoded.
    app = web.Application(client_max_size=64 * MiB)
    app[RECEIVED] = []
    app.router.add_route("*", "/{tail:.*}", _serve)
    server = ThreadedServer(app).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(
        tmp_path_factory.mktemp("codings"), {"rules": RULES, "approvals": {"timeout": "30s"}}
    ).start()
    yield instance
    instance.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Undoproxy]:
    """An undoproxy of its own: its peak memory is this test's alone."""
    instance = Undoproxy(tmp_path / "fresh", {"rules": RULES}).start()
    yield instance
    instance.stop()


def _reached(upstream: ThreadedServer, path: str) -> list[str]:
    return [r for r in upstream.app[RECEIVED] if r.endswith(path)]


AMOUNT = b'{"amount": 5}'
ENCODED: dict[str, tuple[list[tuple[str, str]], Callable[[bytes], bytes]]] = {
    "gzip": ([("Content-Encoding", "gzip")], gzip.compress),
    "x-gzip": ([("Content-Encoding", "x-gzip")], gzip.compress),
    "gzip, gzip": ([("Content-Encoding", "gzip, gzip")], lambda b: gzip.compress(gzip.compress(b))),
    "two fields": (
        [("Content-Encoding", "gzip"), ("Content-Encoding", "GZIP")],
        lambda b: gzip.compress(gzip.compress(b)),
    ),
    "raw deflate": ([("Content-Encoding", "deflate")], lambda b: zlib.compress(b)[2:-4]),
    "br": ([("Content-Encoding", "br")], brotli.compress),
    "zstd": ([("Content-Encoding", "zstd")], lambda b: zstandard.ZstdCompressor().compress(b)),
    "identity, gzip": ([("Content-Encoding", "identity, gzip")], gzip.compress),
}
ZERO = b'{"amount": 0}'
UNDECODABLE: dict[str, tuple[list[tuple[str, str]], Callable[[], bytes]]] = {
    "bz2 (a Python codec)": ([("Content-Encoding", "bz2")], lambda: bz2.compress(ZERO)),
    "base64 (a Python codec)": ([("Content-Encoding", "base64")], lambda: base64.b64encode(ZERO)),
    "gzip that is not": ([("Content-Encoding", "gzip")], lambda: ZERO),
    "truncated gzip": ([("Content-Encoding", "gzip")], lambda: gzip.compress(ZERO)[:-6]),
    "gzip then junk": ([("Content-Encoding", "gzip")], lambda: gzip.compress(ZERO) + b"junk"),
    "five codings": ([("Content-Encoding", "gzip," * 5)], lambda: b"x"),
}


def _post(
    proxy: Undoproxy, session: str, url: str, headers: list[tuple[str, str]], body: bytes
) -> int:
    """POST through the proxy with http.client, which sends every header field as given
    (requests folds repeated ones); the status."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy.proxy_port, timeout=60)
    try:
        conn.putrequest("POST", url, skip_accept_encoding=True)
        token = base64.b64encode(f"{session}:x".encode()).decode()
        for name, value in [
            ("Proxy-Authorization", f"Basic {token}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            *headers,
        ]:
            conn.putheader(name, value)
        conn.endheaders(body)
        return conn.getresponse().status
    finally:
        conn.close()


def _held(
    proxy: Undoproxy,
    upstream: ThreadedServer,
    session: str,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    """POST the body; it must be held (nothing reaches the upstream), then is denied."""
    path = f"/pay/{uuid.uuid4().hex}"
    waiting = in_thread(lambda: _post(proxy, session, upstream.base_url + path, headers, body))
    approval = wait_pending(proxy, session)
    assert approval["rule"] == "hold-payments"
    assert _reached(upstream, path) == []
    assert decide(proxy, approval["id"], "deny").status_code == 200
    assert waiting.result(60) == 403
    assert _reached(upstream, path) == []


@pytest.mark.parametrize("coding", list(ENCODED))
def test_a_hold_rule_sees_an_encoded_body(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str, coding: str
) -> None:
    headers, encode = ENCODED[coding]
    _held(proxy, upstream, session_id, headers, encode(AMOUNT))


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_a_body_that_cannot_be_decoded_is_held_as_ambiguous(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str, case: str
) -> None:
    # Each of these says amount 0 or cannot be read: the allow rule must not let it through.
    headers, body = UNDECODABLE[case]
    _held(proxy, upstream, session_id, headers, body())


def test_an_encoded_body_that_no_rule_restricts_still_goes_through(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    path = f"/pay/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        r = agent.post(
            upstream.base_url + path,
            data=gzip.compress(b'{"amount": 0}'),
            headers={"Content-Encoding": "gzip"},
        )
    assert r.status_code == 200
    [step] = proxy.steps(session_id)
    assert step["rule"] == "free-payments"


def test_a_request_bomb_is_denied_without_inflating(
    fresh: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    before = peak_rss(fresh)
    path = f"/transfer/{uuid.uuid4().hex}"
    with fresh.agent(session_id) as agent:
        r = agent.post(upstream.base_url + path, data=bomb(), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 403
    assert r.json()["rule"] == "no-transfers"
    assert _reached(upstream, path) == []
    assert peak_rss(fresh) - before < 96 * MiB


def test_a_python_codec_is_never_run(
    fresh: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    # 32 bz2 streams of 8 MiB of zeros, back to back: mitmproxy's get_content() would inflate
    # them all (256 MiB) on the event loop.
    one = bz2.compress(b"\0" * (8 * MiB))
    before = peak_rss(fresh)
    path = f"/transfer/{uuid.uuid4().hex}"
    with fresh.agent(session_id) as agent:
        r = agent.post(upstream.base_url + path, data=one * 32, headers={"Content-Encoding": "bz2"})
    assert r.status_code == 403  # ambiguous: the deny rule matches
    assert peak_rss(fresh) - before < 96 * MiB


def test_a_bomb_in_the_answer_to_a_snapshot_is_kept_as_served(
    fresh: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    # undoproxy's own reads never decode (undoproxy/upstream.py): the snapshot is the bomb's
    # 260 KB as served, with its Content-Encoding, and restoring it puts back those bytes.
    before = peak_rss(fresh)
    path = f"/docs/bomb/{uuid.uuid4().hex}"
    with fresh.agent(session_id) as agent:
        r = agent.put(upstream.base_url + path, json={"text": "new"})
    assert r.status_code == 200
    seen = _reached(upstream, path)
    assert seen[:2] == [f"GET {path}", f"PUT {path}"]  # the snapshot, then the write
    assert set(seen[2:]) <= {f"GET {path}"}  # the read of what the write produced
    assert peak_rss(fresh) - before < 96 * MiB


def test_a_bomb_in_the_answer_to_a_mutation_is_passed_on_undecoded(
    fresh: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    before = peak_rss(fresh)
    path = f"/bomb/{uuid.uuid4().hex}"
    with fresh.agent(session_id) as agent:
        r = agent.post(upstream.base_url + path, json={}, stream=True)
        assert r.status_code == 200
        assert r.raw.read(decode_content=False) == bomb()
    assert peak_rss(fresh) - before < 96 * MiB
    [step] = fresh.steps(session_id)
    assert step["status"] == "succeeded"
