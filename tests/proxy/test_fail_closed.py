"""Fail closed: an exception inside any undoproxy hook answers the agent and forwards nothing.

undoproxy runs in this test's own event loop (server.start) so that a fault can be injected
into each hook of each addon; the agent is `requests` through the real proxy over TLS, the
upstream a real server that records what reaches it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import received
from tests.support.servers import ThreadedServer
from undoproxy import server
from undoproxy.config import load_config
from undoproxy.limits import SPOOL_REQUEST_OVER, MiB
from undoproxy.proxy.guard import BEFORE_FORWARDING, FLOW_HOOKS
from undoproxy.store.records import Session

pytestmark = pytest.mark.asyncio


async def _start(tmp_path: Path, extra: dict[str, Any] | None = None) -> server.Running:
    doc = {
        "proxy": {"listen": "127.0.0.1:0", "upstream_insecure": True},
        "admin": {"listen": "127.0.0.1:0"},
        "state_dir": str(tmp_path / "state"),
        "store": {"path": str(tmp_path / "journal.db")},
        **(extra or {}),
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return await server.start(load_config(path))


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[server.Running]:
    app = await _start(tmp_path)
    yield app
    await server.stop(app)


def _agent(app: server.Running, session: str) -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    port = app.proxy_address[1]
    s.proxies = {p: f"http://{session}:x@127.0.0.1:{port}" for p in ("http", "https")}
    s.verify = str(app.context.ca_bundle)
    return s


def _hooks() -> list[tuple[str, str]]:
    """(addon class, hook) for every flow hook an undoproxy addon implements."""
    return [(c.__name__, h) for c in _CHAIN for h in FLOW_HOOKS if h != "error" and hasattr(c, h)]


def _chain() -> list[type]:
    from undoproxy.proxy import (
        bodies,
        brokering,
        framing,
        gate,
        grpc,
        holds,
        identity,
        journaling,
        mcp,
        names,
        snapshots,
        streaming,
        websockets,
    )

    return [
        identity.SessionIdentity,
        names.OneName,
        websockets.WebSockets,
        streaming.Streaming,
        bodies.Bodies,
        brokering.KeepSecretsFromAgent,
        mcp.McpTraffic,
        grpc.GrpcCalls,
        gate.Gate,
        holds.Holds,
        snapshots.Snapshots,
        journaling.JournalAddon,
        framing.Framing,
        brokering.InjectSecrets,
    ]


_CHAIN = _chain()


def boom(*args: Any) -> None:
    """A fault injected in place of one of undoproxy's hooks."""
    raise RuntimeError("injected fault")


async def test_the_list_of_addons_is_the_chain(running: server.Running) -> None:
    # So that an addon added to server.py cannot escape the fault injection below.
    assert [type(a) for a in running.guard.chain] == _CHAIN


async def test_every_flow_hook_is_covered() -> None:
    # The parametrized test below must not silently lose a hook when an addon gains one.
    names = {f"{a}.{h}" for a, h in _hooks()}
    assert {"SessionIdentity.http_connect", "Gate.request", "JournalAddon.request"} <= names
    assert {"Snapshots.response", "Streaming.responseheaders", "JournalAddon.response"} <= names
    assert {"OneName.requestheaders", "WebSockets.requestheaders", "Bodies.request"} <= names


@pytest.mark.parametrize(("addon_name", "hook"), _hooks())
async def test_an_exception_in_any_hook_forwards_nothing(
    running: server.Running, tls_upstream: ThreadedServer, addon_name: str, hook: str
) -> None:
    addon = next(a for a in running.guard.chain if type(a).__name__ == addon_name)

    setattr(addon, hook, boom)
    session = f"fc-{uuid.uuid4().hex[:8]}"
    marker = f"/fail-closed/{uuid.uuid4().hex}"
    agent = _agent(running, session)
    url = tls_upstream.base_url + marker

    def put() -> requests.Response | Exception:
        try:
            return agent.put(url, json={"secret": "x"}, timeout=30)
        except requests.RequestException as exc:
            return exc

    answer = await asyncio.to_thread(put)
    puts = [r for r in received(tls_upstream) if r.method == "PUT" and r.path == marker]

    if hook == "http_connect":
        # The tunnel itself is refused: the client cannot even send its request.
        assert isinstance(answer, requests.exceptions.ProxyError)
        assert puts == []
        return
    assert isinstance(answer, requests.Response)
    assert answer.status_code == 502
    body = answer.json()
    assert body["error"] == "undoproxy_internal_error"
    assert body["step"]
    await running.journal.writer.flush()
    steps = await running.journal.steps(session)
    if addon_name == "SessionIdentity" and hook != "request":
        # Which session the request belongs to is what failed: it is journaled in `default`.
        # (Its `request` hook, the trailers' check, runs once the session is known.)
        step = await running.journal.step(body["step"])
        assert step is not None and step.session_id == "default"
        steps = [step]
    assert [s.id for s in steps] == [body["step"]]
    assert "internal error" in (steps[0].error or "")
    if hook in BEFORE_FORWARDING:
        assert body["forwarded"] is False
        assert puts == []
        assert steps[0].status == "failed"
    else:
        # The upstream did answer before the fault: the agent is told it was sent, and the
        # step's outcome is left for rollback to decide by reading the target.
        assert body["forwarded"] is True
        assert len(puts) == 1
        assert steps[0].status == "unknown"


def _upload_hooks() -> list[tuple[str, str]]:
    return [(a, h) for a, h in _hooks() if h in ("requestheaders", "request")]


LARGE = SPOOL_REQUEST_OVER + 4 * MiB  # judged on its headers, then streamed (proxy/bounded.py)


@pytest.mark.parametrize(("addon_name", "hook"), _upload_hooks())
async def test_an_exception_while_a_large_upload_is_judged_forwards_nothing(
    running: server.Running, tls_upstream: ThreadedServer, addon_name: str, hook: str
) -> None:
    """A large upload is judged before its body is read: a fault there answers the agent,
    which is still sending its body, and not a byte of it goes upstream."""
    addon = next(a for a in running.guard.chain if type(a).__name__ == addon_name)

    setattr(addon, hook, boom)
    session = f"fc-{uuid.uuid4().hex[:8]}"
    marker = f"/fail-closed/{uuid.uuid4().hex}"
    agent = _agent(running, session)
    body = b"x" * LARGE
    answer = await asyncio.to_thread(
        agent.put, tls_upstream.base_url + marker, data=io.BytesIO(body), timeout=60
    )
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"] == "undoproxy_internal_error"
    assert answer.json()["forwarded"] is False
    assert [r for r in received(tls_upstream) if r.path == marker and r.method == "PUT"] == []


async def test_a_fault_while_planning_an_upload_has_it_spooled_and_judged_whole(
    running: server.Running, tls_upstream: ThreadedServer
) -> None:
    """Whether a large upload may be judged on its headers is undoproxy's to decide: if that
    fails, it takes the slow, safe way (spooled, judged once whole) and still goes through."""
    planner = running.master.addons.get("uploadplanner")

    planner.reasons = (boom,)
    session = f"fc-{uuid.uuid4().hex[:8]}"
    marker = f"/fail-closed/{uuid.uuid4().hex}"
    body = bytes(range(256)) * (LARGE // 256)
    answer = await asyncio.to_thread(
        _agent(running, session).put,
        tls_upstream.base_url + marker,
        data=io.BytesIO(body),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    [put] = [r for r in received(tls_upstream) if r.path == marker and r.method == "PUT"]
    assert hashlib.sha256(put.body).hexdigest() == hashlib.sha256(body).hexdigest()
    await running.journal.writer.flush()
    [step] = await running.journal.steps(session)
    assert (step.status, step.request_body_len) == ("succeeded", len(body))


async def test_proxy_authorization_never_reaches_the_upstream_on_a_fault(
    running: server.Running, plain_upstream: ThreadedServer
) -> None:
    # Plain HTTP carries Proxy-Authorization on every request: a fault in identity must not
    # let the flow (and the header) through.
    identity = next(a for a in running.guard.chain if type(a).__name__ == "SessionIdentity")

    identity.requestheaders = boom
    marker = f"/plain/{uuid.uuid4().hex}"
    host = f"127.0.0.1:{plain_upstream.port}"
    raw = await asyncio.to_thread(
        _raw_request,
        running.proxy_address[1],
        f"GET http://{host}{marker} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        f"Proxy-Authorization: Basic {base64.b64encode(b's:t').decode()}\r\n\r\n",
    )
    assert raw.startswith("HTTP/1.1 502"), raw
    assert "undoproxy_internal_error" in raw
    assert [r for r in received(plain_upstream) if r.path == marker] == []


def _raw_request(port: int, text: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(text.encode("latin-1"))
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and text.startswith("CONNECT"):
                break  # a refused tunnel: the status line and headers are all there is
    return b"".join(chunks).decode("latin-1")


@pytest.mark.parametrize(
    "credentials",
    [
        "Basic " + base64.b64encode("s:pässwörd".encode()).decode(),  # non-ASCII token
        "Basic !!!not-base64!!!",
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),  # not UTF-8
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Bearer abc",
    ],
)
async def test_malformed_proxy_credentials_answer_407_in_token_mode(
    tmp_path: Path, tls_upstream: ThreadedServer, credentials: str
) -> None:
    app = await _start(
        tmp_path, {"proxy": {"listen": "127.0.0.1:0", "auth": "token", "upstream_insecure": True}}
    )
    try:
        app.journal.add_session(Session(id="s", token="right-token"))
        marker = f"/token/{uuid.uuid4().hex}"
        host = f"127.0.0.1:{tls_upstream.port}"
        raw = await asyncio.to_thread(
            _raw_request,
            app.proxy_address[1],
            f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n"
            f"Proxy-Authorization: {credentials}\r\n\r\n",
        )
        assert raw.startswith("HTTP/1.1 407"), raw
        assert "Proxy-Authenticate" in raw
        assert app.guard.failures == 0  # refused by the identity check, not by the guard
        assert not [r for r in received(tls_upstream) if r.path == marker]
    finally:
        await server.stop(app)


@pytest.mark.parametrize(
    "credentials",
    ["Basic !!!not-base64!!!", "Bearer abc", "Basic " + base64.b64encode(b"no-colon").decode()],
)
async def test_malformed_proxy_credentials_answer_407_in_open_mode(
    running: server.Running, tls_upstream: ThreadedServer, credentials: str
) -> None:
    host = f"127.0.0.1:{tls_upstream.port}"
    raw = await asyncio.to_thread(
        _raw_request,
        running.proxy_address[1],
        f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {credentials}\r\n\r\n",
    )
    assert raw.startswith("HTTP/1.1 407"), raw


async def test_a_snapshot_url_that_cannot_be_parsed_blocks_the_write(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    rules = [
        {
            "name": "restore-target",
            "match": {"method": "PUT", "path": "/targets/**"},
            "snapshot": {"url": "${request.body.target}"},
            "compensate": "restore",
        }
    ]
    app = await _start(tmp_path, {"rules": rules})
    try:
        agent = _agent(app, "snap")
        marker = f"/targets/{uuid.uuid4().hex}"
        answer = await asyncio.to_thread(
            agent.put, tls_upstream.base_url + marker, json={"target": "http://[::1/x"}, timeout=30
        )
        assert answer.status_code == 502
        assert answer.json()["error"].startswith("undoproxy_")
        assert not [r for r in received(tls_upstream) if r.path == marker]
    finally:
        await server.stop(app)


async def test_a_fault_after_forwarding_does_not_leave_the_mutation_counted_in_flight(
    running: server.Running, tls_upstream: ThreadedServer
) -> None:
    # Otherwise a freeze of the session would wait for an answer that was already given.
    snapshots = next(a for a in running.guard.chain if type(a).__name__ == "Snapshots")

    snapshots.response = boom
    agent = _agent(running, "inflight")
    answer = await asyncio.to_thread(
        agent.put, f"{tls_upstream.base_url}/inflight/{uuid.uuid4().hex}", json={}, timeout=30
    )
    assert answer.status_code == 502
    assert running.context.inflight is not None
    assert running.context.inflight.pending("inflight") == 0


async def test_a_fault_on_a_websocket_message_drops_it_and_closes_the_socket(
    running: server.Running, upstream_cert: tuple[Path, Path]
) -> None:
    from aiohttp import WSMsgType, web

    from tests.support.certs import server_context

    got: list[str] = []

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            got.append(msg.data)
            await ws.send_str(msg.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", echo)
    upstream = ThreadedServer(app, server_context(upstream_cert)).start()
    sockets = next(a for a in running.guard.chain if type(a).__name__ == "WebSockets")

    import ssl

    import aiohttp

    ctx = ssl.create_default_context(cafile=str(running.context.ca_bundle))
    proxy = f"http://fc-ws:x@127.0.0.1:{running.proxy_address[1]}"
    try:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(
                f"{upstream.base_url.replace('https', 'wss')}/ws", proxy=proxy, ssl=ctx
            )
            await ws.send_str("first")
            assert (await asyncio.wait_for(ws.receive(), 10)).data == "first"
            sockets.websocket_message = boom
            await ws.send_str("second")
            closing = await asyncio.wait_for(ws.receive(), 10)
            assert closing.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.ERROR)
    finally:
        upstream.stop()
    assert got == ["first"]
    assert running.guard.failures == 1


@pytest.mark.parametrize("method", ["PUT", "GET"])
async def test_a_request_nothing_decided_about_is_never_forwarded(
    running: server.Running, tls_upstream: ThreadedServer, method: str
) -> None:
    # A bug that leaves no state on the flow (identity returning without deciding, say) is
    # not an exception: the first hook that decides finds nothing and refuses, reads too.
    identity = running.guard.chain[0]

    async def forgets(flow: Any) -> None:
        return None

    identity.requestheaders = forgets  # type: ignore[method-assign]
    marker = f"/no-state/{uuid.uuid4().hex}"
    agent = _agent(running, f"ns-{uuid.uuid4().hex[:8]}")
    answer = await asyncio.to_thread(
        lambda: agent.request(method, tls_upstream.base_url + marker, timeout=30)
    )
    assert answer.status_code >= 500 and answer.json()["error"].startswith("undoproxy_")
    assert [r for r in received(tls_upstream) if r.path == marker] == []


@pytest.mark.parametrize("addon_name", ["Streaming", "InjectSecrets"])
async def test_a_fault_while_a_secret_is_in_the_request_journals_the_agents_version(
    tmp_path: Path,
    tls_upstream: ThreadedServer,
    monkeypatch: pytest.MonkeyPatch,
    addon_name: str,
) -> None:
    """A fault after the credential broker put a real value in (Streaming.responseheaders
    runs before the request is put back) or while it does (InjectSecrets.request): the step
    the guard journals records the request as the agent sent it, never the value."""
    real = f"real-org-{uuid.uuid4().hex}"
    monkeypatch.setenv("FAIL_CLOSED_ORG", real)
    secret = {"host": "127.0.0.1", "header": "X-Org", "value": "${FAIL_CLOSED_ORG}"}
    app = await _start(tmp_path, {"secrets": [secret]})
    try:
        addon = next(a for a in app.guard.chain if type(a).__name__ == addon_name)
        hook = "responseheaders" if addon_name == "Streaming" else "request"

        setattr(addon, hook, boom)
        session = f"fcs-{uuid.uuid4().hex[:8]}"
        answer = await asyncio.to_thread(
            _agent(app, session).get, tls_upstream.base_url + "/org", timeout=30
        )
        assert answer.status_code == 502
        await app.journal.writer.flush()
        steps = await app.journal.steps(session)
        assert len(steps) == 1 and "internal error" in (steps[0].error or "")
        assert real not in repr(steps[0])
    finally:
        await server.stop(app)
