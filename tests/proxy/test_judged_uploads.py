"""A large upload whose headers announce its size is judged on its headers, then streamed.

Over SPOOL_REQUEST_OVER, an upload's body is too large for the rules to read whichever way it
travels. When nothing in its judgment needs the body or a person (no hold, no repeat guard,
no brokered secret), undoproxy judges it before taking a byte of its body (rules, snapshot,
write-ahead) and then streams it upstream as it arrives: the upstream gets the first bytes
while the agent is still sending the last, and the journal keeps its first bytes, length and
SHA-256. While it is being judged, undoproxy reads nothing of the body: a slow snapshot
neither lets a byte through nor fills the proxy's memory. Refused after all (the snapshot
fails), the agent gets the answer, not a reset connection; an agent that gives up midway
leaves a step whose outcome is `unknown`, never `succeeded`. A request that must be held, or
whose body a repeat guard compares, or one over HTTP/2 (whose connection carries other
requests: it is not paused), is spooled and judged whole instead (here, and in
tests/proxy/test_body_limits.py).

Against a real `undoproxy run`, with requests, curl and raw sockets, to an upstream that
notes when each byte arrives and hashes what it receives without keeping it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from aiohttp import web

from tests.proxy.memory import MiB, peak_rss
from tests.proxy.wire import read_answer
from tests.support.certs import server_context
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.limits import SPOOL_REQUEST_OVER

SIZE = SPOOL_REQUEST_OVER + 8 * MiB  # over the spooling size: judged on its headers


class Seen:
    """What the upstream saw of each path."""

    def __init__(self) -> None:
        self.received: dict[str, int] = {}  # body bytes so far
        self.first_byte: dict[str, float] = {}  # monotonic time of the body's first bytes
        self.hashes: dict[str, str] = {}  # SHA-256 of a body received whole
        self.snapshot_done: dict[str, float] = {}  # monotonic time a snapshot GET ended


SEEN: web.AppKey[Seen] = web.AppKey("seen", Seen)


async def _handle(request: web.Request) -> web.StreamResponse:
    seen = request.app[SEEN]
    path = request.path
    if request.method == "GET":
        if path.startswith("/slow/"):
            await asyncio.sleep(2.0)  # a slow snapshot: the upload must wait for it
        if path.startswith("/broken/"):
            return web.Response(status=503, text="the store is down")  # the snapshot fails
        seen.snapshot_done[path] = time.monotonic()
        return web.json_response({"error": "not found"}, status=404)
    size, digest = 0, hashlib.sha256()
    while chunk := await request.content.readany():
        if not size:
            seen.first_byte[path] = time.monotonic()
        size += len(chunk)
        digest.update(chunk)
        seen.received[path] = size
    seen.hashes[path] = digest.hexdigest()
    return web.json_response({"size": size}, status=201)


def _app() -> web.Application:
    app = web.Application(client_max_size=1 << 40)
    app[SEEN] = Seen()
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    server = ThreadedServer(_app()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls_sink(upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = ThreadedServer(_app(), server_context(upstream_cert)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {
        "approvals": {"timeout": "60s"},
        "rules": [
            {"name": "hold-uploads", "match": {"path": "/held/**"}, "action": "hold"},
            {"name": "no-uploads", "match": {"path": "/denied/**"}, "action": "deny"},
            {
                "name": "loops",
                "match": {"path": "/looped/**"},
                "action": "allow",
                "guard": {"repeat": {"count": 1, "window": "60s"}},
            },
        ],
    }
    instance = Undoproxy(tmp_path_factory.mktemp("judged-uploads"), config).start()
    yield instance
    instance.stop()


def _seen(server: ThreadedServer) -> Seen:
    return server.app[SEEN]


def _body(size: int, seed: str = "") -> bytes:
    block = hashlib.sha256(seed.encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def _head(
    proxy: Undoproxy, session: str, url: str, size: int, *, auth: str = "", expect: bool = False
) -> bytes:
    """A plain-HTTP proxy request's head: PUT url, announcing `size` bytes."""
    auth = auth or base64.b64encode(f"{session}:x".encode()).decode()
    host = url.split("/")[2]
    return (
        f"PUT {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {auth}\r\n"
        + ("Expect: 100-continue\r\n" if expect else "")
        + f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
    ).encode()


def _wait(check: object, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_the_upstream_gets_the_body_while_the_agent_still_sends_it(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """Half the body sent: the upstream has bytes of it already (a spooled body would have
    nothing until the last byte arrived); all sent: it has all of them, and so does the
    journal's step (length and SHA-256), which succeeded."""
    path = f"/files/{uuid.uuid4().hex}"
    body = _body(SIZE, path)
    half = len(body) // 2
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=30) as sock:
        sock.sendall(_head(proxy, session_id, upstream.base_url + path, len(body)))
        sock.sendall(body[:half])
        assert _wait(lambda: _seen(upstream).received.get(path, 0) > 0), "nothing streamed"
        assert _seen(upstream).received[path] <= half
        sock.sendall(body[half:])
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"size": len(body)}
    assert _seen(upstream).hashes[path] == hashlib.sha256(body).hexdigest()
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert step["request"]["body_length"] == len(body)
    assert step["request"]["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_nothing_goes_upstream_and_nothing_piles_up_while_it_is_judged(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """The snapshot before the PUT takes 2 s. Meanwhile the agent pushes 200 MiB as fast as
    it can: the upstream gets no byte of it before its snapshot was taken, and the proxy does
    not hold what the agent pushes (it stops reading until the PUT is judged)."""
    path = f"/slow/{uuid.uuid4().hex}"
    body = _body(200 * MiB, path)
    before = peak_rss(proxy)
    with proxy.agent(session_id) as agent:
        r = agent.put(upstream.base_url + path, data=io.BytesIO(body), timeout=120)
    assert r.status_code == 201, r.text
    seen = _seen(upstream)
    assert seen.first_byte[path] >= seen.snapshot_done[path]
    assert seen.hashes[path] == hashlib.sha256(body).hexdigest()
    assert peak_rss(proxy) - before < 100 * MiB  # queued while judged, it would be 200 MiB
    [step] = proxy.steps(session_id)
    assert (step["status"], step["request"]["body_length"]) == ("succeeded", len(body))


def test_refused_after_all_the_agent_gets_the_answer_and_the_upstream_nothing(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """The snapshot fails (the store answers 503): nothing is forwarded, and the agent, which
    was sending its body meanwhile (requests sends no Expect), reads undoproxy's 502 on a
    connection that ends cleanly: the next request on the same session goes through."""
    path = f"/broken/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        refused = agent.put(upstream.base_url + path, data=io.BytesIO(_body(SIZE)), timeout=60)
        after = agent.put(upstream.base_url + f"/files/{uuid.uuid4().hex}", data=b"small")
    assert refused.status_code == 502, refused.text
    assert refused.json()["error"] == "undoproxy_snapshot_failed"
    assert path not in _seen(upstream).first_byte
    assert after.status_code == 201
    first, _ = proxy.steps(session_id)
    assert (first["status"], first["response_status"]) == ("failed", 502)


@pytest.mark.parametrize("expect", [True, False], ids=["Expect", "no Expect"])
@pytest.mark.parametrize(
    ("where", "status", "error"),
    [("broken", "502", "undoproxy_snapshot_failed"), ("denied", "403", "undoproxy_blocked")],
)
def test_refused_curl_is_told_why_and_the_upstream_gets_nothing(
    proxy: Undoproxy,
    upstream: ThreadedServer,
    session_id: str,
    tmp_path: Path,
    where: str,
    status: str,
    error: str,
    expect: bool,
) -> None:
    """Refused (the snapshot failed, a rule denies it): curl reads undoproxy's answer, and
    the upstream gets nothing. Asking `Expect: 100-continue` first (curl's default for a
    large body), curl never sends the body; without it, it stops sending once answered."""
    big = tmp_path / "big"
    big.write_bytes(_body(SIZE))
    path = f"/{where}/{uuid.uuid4().hex}"
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "30", "-x", proxy.proxy_url(session_id),
         "--expect100-timeout", "20",  # a loaded machine may take over curl's 1 s to judge
         *([] if expect else ["-H", "Expect:"]),
         "-T", str(big), "-o", "-", "-w", "\n%{http_code} %{size_upload}",
         upstream.base_url + path],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    body, _, tail = done.stdout.rpartition("\n")
    code, uploaded = tail.split()
    assert code == status, done
    assert json.loads(body)["error"] == error
    if expect:
        assert int(uploaded) < SIZE  # it never sent the body (a 100 Continue never came)
    assert path not in _seen(upstream).first_byte


@pytest.mark.parametrize("expect", [True, False], ids=["Expect", "no Expect"])
def test_refused_at_its_headers_it_is_answered_before_its_body_is_read(
    proxy: Undoproxy, upstream: ThreadedServer, expect: bool
) -> None:
    """Credentials that cannot be read: 407 at once, the body never read whole first. An
    agent waiting for `100 Continue` gets the 407 without sending its body; one sending it
    gets the 407 and its body is read and dropped: the connection ends cleanly."""
    path = f"/files/{uuid.uuid4().hex}"
    body = _body(SIZE, path)
    url = upstream.base_url + path
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=30) as sock:
        sock.sendall(_head(proxy, "", url, len(body), auth="!!!", expect=expect))
        if not expect:
            sock.sendall(body)
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 407"), answer[:300]
    assert path not in _seen(upstream).first_byte


@pytest.mark.parametrize(
    "how",
    [["--http1.1"], ["--http1.1", "-H", "Expect:"], ["--http2"]],
    ids=["http1.1 with Expect", "http1.1 without", "http2 (spooled)"],
)
def test_curl_uploads_arrive_whole_and_are_journaled_whole(
    proxy: Undoproxy,
    tls_sink: ThreadedServer,
    session_id: str,
    tmp_path: Path,
    how: list[str],
) -> None:
    body = _body(SIZE, str(how))
    upload = tmp_path / "upload"
    upload.write_bytes(body)
    path = f"/files/{uuid.uuid4().hex}"
    done = subprocess.run(
        ["curl", "-sS", "--fail", "--max-time", "60", "-x", proxy.proxy_url(session_id),
         "--cacert", proxy.ca_bundle, "-T", str(upload), "-o", "-", *how,
         tls_sink.base_url + path],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done
    assert json.loads(done.stdout) == {"size": len(body)}
    digest = hashlib.sha256(body).hexdigest()
    assert _seen(tls_sink).hashes[path] == digest
    [step] = proxy.steps(session_id)
    assert step["status"] == "succeeded"
    assert (step["request"]["body_length"], step["request"]["body_sha256"]) == (len(body), digest)


def test_an_agent_that_gives_up_midway_leaves_an_unknown_step(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """Half the body went upstream, then the agent went away: whether the upstream kept any
    of it is for a read at rollback to say; the step is `unknown`, with what was sent."""
    path = f"/files/{uuid.uuid4().hex}"
    body = _body(SIZE, path)
    with socket.create_connection(("127.0.0.1", proxy.proxy_port), timeout=30) as sock:
        sock.sendall(_head(proxy, session_id, upstream.base_url + path, len(body)))
        sock.sendall(body[: 4 * MiB])
        assert _wait(lambda: _seen(upstream).received.get(path, 0) >= 4 * MiB)
    assert _wait(lambda: proxy.steps(session_id)[0]["status"] != "pending")
    [step] = proxy.steps(session_id)
    assert step["status"] == "unknown", step
    assert step["request"]["body_length"] == 4 * MiB
    assert step["request"]["body_sha256"] == hashlib.sha256(body[: 4 * MiB]).hexdigest()
    assert path not in _seen(upstream).hashes  # the upstream never got the whole body


def test_a_held_upload_waits_whole_on_disk_and_nothing_reaches_the_upstream(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """A hold needs a person: the upload is spooled whole (not left on a stopped connection)
    before it is held, so the approval card tells its whole length; approved, the upstream
    gets all of it."""
    path = f"/held/{uuid.uuid4().hex}"
    body = _body(SIZE, path)

    def put() -> requests.Response:
        with proxy.agent(session_id) as agent:
            return agent.put(upstream.base_url + path, data=io.BytesIO(body), timeout=60)

    pending = in_thread(put)
    approval = wait_pending(proxy, session_id)
    time.sleep(0.3)  # time enough for anything that would leak to arrive
    assert path not in _seen(upstream).first_byte
    assert f"<{SIZE} bytes as sent: the body is {SIZE} bytes" in json.dumps(approval)
    assert decide(proxy, approval["id"], "approve").status_code == 200
    answer = pending.result(60)
    assert answer.status_code == 201, answer.text
    assert _seen(upstream).hashes[path] == hashlib.sha256(body).hexdigest()


def test_a_repeat_guard_compares_large_bodies_too(
    proxy: Undoproxy, upstream: ThreadedServer, session_id: str
) -> None:
    """A rule whose guard holds a body sent twice: a large body is read whole to compare it
    (spooled, not judged on its headers), so the same one again is held and another is not."""
    path = f"/looped/{uuid.uuid4().hex}"
    same, other = _body(SIZE, "same"), _body(SIZE, "other")
    with proxy.agent(session_id) as agent:
        first = agent.put(upstream.base_url + path, data=io.BytesIO(same), timeout=60)
        second = agent.put(upstream.base_url + path, data=io.BytesIO(other), timeout=60)
    assert (first.status_code, second.status_code) == (201, 201)
    pending = in_thread(
        lambda: proxy.agent(session_id).put(
            upstream.base_url + path, data=io.BytesIO(same), timeout=60
        )
    )
    approval = wait_pending(proxy, session_id)
    assert "repeat" in json.dumps(approval).lower()
    assert decide(proxy, approval["id"], "deny").status_code == 200
    assert pending.result(60).status_code == 403
