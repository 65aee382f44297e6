"""WebSockets through a real `undoproxy run`: the upgrade passes the rules and the kill switch,
every message is journaled, `freeze` closes open sockets, rollback calls messages irreversible.

The agent is aiohttp's WebSocket client through the proxy (TLS inside the tunnel, trusting
undoproxy's CA); the upstream a real aiohttp WebSocket server that answers each text message
with `echo: TEXT` and records what it received.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RECEIVED: web.AppKey[list[str]] = web.AppKey("received", list)


async def _socket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT:
            request.app[RECEIVED].append(msg.data)
            await ws.send_str(f"echo: {msg.data}")
        elif msg.type == aiohttp.WSMsgType.BINARY:
            request.app[RECEIVED].append(msg.data.hex())
            await ws.send_bytes(msg.data)
    return ws


@pytest.fixture(scope="module")
def ws_upstream(upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    app = web.Application()
    app[RECEIVED] = []
    app.router.add_get("/{tail:.*}", _socket)
    server = ThreadedServer(app, server_context(upstream_cert)).start()
    yield server
    server.stop()


RULES = [{"name": "no-admin-sockets", "match": {"path": "/admin/**"}, "action": "deny"}]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("websockets"), {"rules": RULES}).start()
    yield instance
    instance.stop()


def _received(upstream: ThreadedServer) -> list[str]:
    return list(upstream.app[RECEIVED])


class Agent:
    """One WebSocket through the proxy, driven from a test (its own event loop)."""

    def __init__(self, proxy: Undoproxy, session: str, url: str) -> None:
        self.proxy_url = proxy.proxy_url(session)
        self.url = url
        self.ssl = ssl.create_default_context(cafile=proxy.ca_bundle)
        self.loop = asyncio.new_event_loop()
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 20))

    def open(self) -> None:
        async def go() -> None:
            self.http = aiohttp.ClientSession()
            self.ws = await self.http.ws_connect(self.url, proxy=self.proxy_url, ssl=self.ssl)

        self.run(go())

    def say(self, text: str) -> str:
        """Send `text`, return the answer."""
        assert self.ws is not None

        async def go() -> str:
            assert self.ws is not None
            await self.ws.send_str(text)
            msg = await self.ws.receive()
            return str(msg.data) if msg.type == aiohttp.WSMsgType.TEXT else f"<{msg.type.name}>"

        return str(self.run(go()))

    def closed(self) -> bool:
        """Whether the socket has been closed under the agent (waits for it)."""

        async def go() -> bool:
            assert self.ws is not None
            msg = await self.ws.receive()
            return msg.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.ERROR,
            )

        return bool(self.run(go()))

    def close(self) -> None:
        async def go() -> None:
            if self.ws is not None:
                await self.ws.close()
            if self.http is not None:
                await self.http.close()

        self.run(go())
        self.loop.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for agent in made:
        agent.close()


def _agent(agents: list[Agent], proxy: Undoproxy, session: str, url: str) -> Agent:
    agent = Agent(proxy, session, url)
    agents.append(agent)
    return agent


def _until(check: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_every_message_is_journaled_with_its_direction_size_and_body(
    proxy: Undoproxy, ws_upstream: ThreadedServer, agents: list[Agent], session_id: str
) -> None:
    marker = uuid.uuid4().hex
    agent = _agent(agents, proxy, session_id, f"wss://127.0.0.1:{ws_upstream.port}/chat")
    agent.open()
    assert agent.say(f"hello {marker}") == f"echo: hello {marker}"
    agent.close()
    agents.clear()
    steps = _until(lambda: (s := proxy.steps(session_id)) and len(s) == 3 and s)
    upgrade, sent, received = steps
    assert (upgrade["method"], upgrade["kind"]) == ("GET", "mutation")
    assert upgrade["status"] == "succeeded"
    assert upgrade["response_status"] == 101
    assert upgrade["compensation"]["reason"].startswith("a WebSocket")
    assert (sent["method"], sent["kind"], sent["status"]) == ("WEBSOCKET", "mutation", "succeeded")
    assert sent["request"]["body"] == f"hello {marker}"
    assert sent["meta"]["websocket"]["direction"] == "sent"
    assert sent["meta"]["websocket"]["size"] == len(f"hello {marker}")
    assert sent["meta"]["websocket"]["upgrade_step"] == upgrade["id"]
    assert sent["compensation"]["reason"] == "a WebSocket message cannot be unsent"
    assert (received["kind"], received["response"]["body"]) == ("read", f"echo: hello {marker}")
    assert received["meta"]["websocket"]["direction"] == "received"
    closed = _until(lambda: proxy.steps(session_id)[0]["meta"])
    assert closed["websocket"]["sent"] == 1 and closed["websocket"]["received"] == 1


def test_a_deny_rule_refuses_the_upgrade(
    proxy: Undoproxy, ws_upstream: ThreadedServer, agents: list[Agent], session_id: str
) -> None:
    marker = uuid.uuid4().hex
    agent = _agent(agents, proxy, session_id, f"wss://127.0.0.1:{ws_upstream.port}/admin/{marker}")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        agent.open()
    assert refused.value.status == 403
    [step] = proxy.steps(session_id)
    assert (step["rule"], step["status"]) == ("no-admin-sockets", "denied")


def test_a_frozen_session_cannot_open_a_socket(
    proxy: Undoproxy, ws_upstream: ThreadedServer, agents: list[Agent], session_id: str
) -> None:
    proxy.api("POST", "/api/sessions", json={"id": session_id})
    assert proxy.api("POST", f"/api/sessions/{session_id}/freeze").status_code == 200
    agent = _agent(agents, proxy, session_id, f"wss://127.0.0.1:{ws_upstream.port}/chat")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        agent.open()
    assert refused.value.status == 403
    [step] = proxy.steps(session_id)
    assert step["status"] == "denied" and step["response_status"] == 403


@pytest.mark.parametrize("scope", ["session", "all", "commit"])
def test_freeze_and_commit_close_open_sockets_and_nothing_more_reaches_the_server(
    proxy: Undoproxy,
    ws_upstream: ThreadedServer,
    agents: list[Agent],
    session_id: str,
    scope: str,
) -> None:
    marker = uuid.uuid4().hex
    agent = _agent(agents, proxy, session_id, f"wss://127.0.0.1:{ws_upstream.port}/chat")
    agent.open()
    assert agent.say(f"before {marker}") == f"echo: before {marker}"
    path = {
        "session": f"/api/sessions/{session_id}/freeze",
        "all": "/api/freeze",
        "commit": f"/api/sessions/{session_id}/commit",
    }[scope]
    try:
        assert proxy.api("POST", path).status_code == 200
        assert agent.closed()
        with pytest.raises((ConnectionError, aiohttp.ClientError, RuntimeError)):
            agent.say(f"after {marker}")
    finally:
        if scope == "all":
            proxy.api("POST", "/api/unfreeze")
    time.sleep(0.3)
    assert f"before {marker}" in _received(ws_upstream)
    assert f"after {marker}" not in _received(ws_upstream)
    meta = _until(
        lambda: (m := proxy.steps(session_id)[0]["meta"]) and "closed" in m["websocket"] and m
    )
    assert ("committed" if scope == "commit" else "frozen") in meta["websocket"]["closed"]


def test_rollback_reports_the_socket_and_its_messages_irreversible(
    proxy: Undoproxy, ws_upstream: ThreadedServer, agents: list[Agent], session_id: str
) -> None:
    agent = _agent(agents, proxy, session_id, f"wss://127.0.0.1:{ws_upstream.port}/chat")
    agent.open()
    agent.say("one")
    agent.say("two")
    agent.close()
    agents.clear()
    _until(lambda: len(proxy.steps(session_id)) == 5)
    report = proxy.rollback(session_id)
    assert [s["status"] for s in report["steps"]] == ["irreversible"] * 3
    assert "cannot be unsent" in report["steps"][0]["detail"]
    assert report["state"] == "rollback_incomplete"


def test_messages_count_against_the_budget(
    tmp_path: Path, ws_upstream: ThreadedServer, agents: list[Agent], session_id: str
) -> None:
    # The upgrade is one mutation, each message sent another: the third is over the budget.
    instance = Undoproxy(tmp_path / "budget", {"guard": {"max_mutations": 2}}).start()
    try:
        marker = uuid.uuid4().hex
        agent = _agent(agents, instance, session_id, f"wss://127.0.0.1:{ws_upstream.port}/b")
        agent.open()
        assert agent.say(f"within {marker}") == f"echo: within {marker}"
        assert agent.say(f"over {marker}") in ("<CLOSE>", "<CLOSED>", "<ERROR>")
        time.sleep(0.3)
        assert f"over {marker}" not in _received(ws_upstream)
        steps = _until(lambda: (s := instance.steps(session_id)) and len(s) >= 4 and s)
        denied = [s for s in steps if s["status"] == "denied"]
        assert [s["method"] for s in denied] == ["WEBSOCKET"]
        assert "max_mutations" in denied[0]["error"]
    finally:
        for agent in agents:
            agent.close()
        agents.clear()
        instance.stop()
