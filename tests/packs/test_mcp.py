"""MCP as a protocol, with the real `mcp` SDK on both sides: a FastMCP server over Streamable
HTTP (tests/support/mcp_server.py), and the SDK's own client (ClientSession over
streamablehttp_client) through a real `undoproxy run`.

- the session-closing `DELETE /mcp` passes, without a snapshot (the server's session ends);
- a refusal (deny, hold denied, freeze) is a JSON-RPC error inside a 200: that call fails
  with McpError, and the MCP session goes on;
- every step keeps the method, the tool, its arguments (redacted) and its result, whatever
  rule matched; a call answered 200 is `succeeded`, never `unknown`;
- rules match tools by name (`mcp_tool`), and by the annotations the server gave them
  (the mcp pack's `destructive-tool-call`): hints inform, rules decide;
- a `read_file` tool that a rule calls a read is a read.
Both of the server's answer forms are covered: an event stream (the SDK's default) and JSON.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

from tests.support.holding import decide, wait_pending
from tests.support.mcp_server import McpServer
from tests.support.proc import Undoproxy

RULES = [
    {
        "name": "no-deleting-outside-tmp",
        "match": {
            "mcp_tool": "delete_file",
            "body": {"$.params.arguments.path": {"regex": "^(?!tmp/)"}},
        },
        "action": "deny",
        "reason": "only files under tmp/ may be deleted",
    },
    {"name": "hold-github", "match": {"mcp_tool": "github.*"}, "action": "hold"},
    {
        "name": "reading-is-reading",
        "match": {"mcp_tool": ["read_file", "list_files"]},
        "kind": "read",
    },
]


@pytest.fixture(scope="module", params=["event-stream", "json"])
def server(request: pytest.FixtureRequest) -> Iterator[McpServer]:
    instance = McpServer(json_response=request.param == "json").start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"rules": RULES, "approvals": {"timeout": "60s"}}
    instance = Undoproxy(tmp_path_factory.mktemp("mcp"), config).start()
    yield instance
    instance.stop()


@asynccontextmanager
async def mcp_session(proxy: Undoproxy, session: str, url: str) -> AsyncIterator[ClientSession]:
    """The SDK's client through undoproxy, in undoproxy session `session`."""

    def through_proxy(
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        auth: httpx.Auth | None = None,
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            proxy=proxy.proxy_url(session),
            headers=headers,
            timeout=timeout or httpx.Timeout(30, read=300),
            auth=auth,
            trust_env=False,
        )

    async with (
        streamablehttp_client(url, httpx_client_factory=through_proxy) as (read, write, _),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        await client.list_tools()
        yield client


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _calls(proxy: Undoproxy, session: str) -> list[dict[str, Any]]:
    """The session's tools/call steps, oldest first."""
    return [
        s
        for s in proxy.steps(session)
        if (s["meta"] or {}).get("mcp", {}).get("method") == "tools/call"
    ]


async def test_a_session_is_journaled_call_by_call_and_closes_cleanly(
    proxy: Undoproxy, server: McpServer, session_id: str
) -> None:
    async with mcp_session(proxy, session_id, server.url) as client:
        assert _text(await client.call_tool("read_file", {"path": "hello.txt"})) == "hello world"
        await client.call_tool("write_file", {"path": "tmp/a.txt", "text": "new"})
        assert _text(await client.call_tool("login", {"user": "ann", "password": "hunter2"})) == (
            "welcome ann"
        )
    steps = proxy.steps(session_id)
    read, write, login = _calls(proxy, session_id)
    # A rule of the user's matched read_file: the tool, its arguments and its result are
    # still kept, and it is a read.
    assert (read["rule"], read["kind"], read["status"]) == (
        "reading-is-reading",
        "read",
        "succeeded",
    )
    assert read["meta"]["mcp"]["tool"] == "read_file"
    assert read["meta"]["mcp"]["arguments"] == {"path": "hello.txt"}
    assert read["meta"]["mcp"]["result"]["content"][0]["text"] == "hello world"
    assert read["meta"]["mcp"]["annotations"] == {"readOnlyHint": True}
    # An unmatched tool is the pack's: a mutation, answered 200, so succeeded (not unknown).
    assert (write["rule"], write["kind"], write["status"]) == (
        "mcp/tool-call",
        "mutation",
        "succeeded",
    )
    assert write["meta"]["mcp"]["is_error"] is False
    assert login["meta"]["mcp"]["arguments"]["password"] != "hunter2"
    assert "hunter2" not in str(login["meta"])
    # The client closed its MCP session: a DELETE that passed, a read, with no snapshot.
    [closing] = [s for s in steps if s["method"] == "DELETE"]
    assert (closing["kind"], closing["status"], closing["response_status"]) == (
        "read",
        "succeeded",
        200,
    )
    assert closing["rule"] == "mcp/session-end" and closing["snapshot"] is None
    # Rollback reports the tool calls (irreversible), never the reads or the DELETE.
    report = proxy.rollback(session_id)
    assert [(s["method"], s["status"]) for s in report["steps"]] == [
        ("POST", "irreversible"),
        ("POST", "irreversible"),
    ]


async def test_a_denied_call_fails_and_the_session_lives(
    proxy: Undoproxy, server: McpServer, session_id: str
) -> None:
    async with mcp_session(proxy, session_id, server.url) as client:
        with pytest.raises(McpError) as refused:
            await client.call_tool("delete_file", {"path": "hello.txt"})
        error = refused.value.error
        assert error.code == -32001
        assert error.message.startswith("undoproxy_blocked: only files under tmp/")
        assert error.data["rule"] == "no-deleting-outside-tmp"
        # The same MCP session goes on.
        assert _text(await client.call_tool("read_file", {"path": "hello.txt"})) == "hello world"
    assert "hello.txt" in server.files
    denied = _calls(proxy, session_id)[0]
    assert (denied["status"], denied["meta"]["mcp"]["tool"]) == ("denied", "delete_file")


async def test_a_held_call_waits_then_runs_or_fails_as_decided(
    proxy: Undoproxy, server: McpServer, session_id: str
) -> None:
    async with mcp_session(proxy, session_id, server.url) as client:
        for verdict in ("approve", "deny"):
            pending = asyncio.create_task(
                client.call_tool("github.create_issue", {"title": verdict})
            )
            approval = await asyncio.to_thread(wait_pending, proxy, session_id)
            decided = await asyncio.to_thread(decide, proxy, approval["id"], verdict)
            assert decided.status_code == 200
            if verdict == "approve":
                assert (await pending).structuredContent == {"number": 42, "title": "approve"}
            else:
                with pytest.raises(McpError) as refused:
                    await pending
                assert refused.value.error.message.startswith("undoproxy_denied")
        assert _text(await client.call_tool("read_file", {"path": "hello.txt"})) == "hello world"
    approved, denied = (s for s in _calls(proxy, session_id) if s["rule"] == "hold-github")
    assert (approved["status"], denied["status"]) == ("succeeded", "denied")


async def test_the_servers_hints_raise_the_risk_of_a_destructive_tool(
    proxy: Undoproxy, server: McpServer, session_id: str
) -> None:
    server.files["tmp/old.txt"] = "old"
    async with mcp_session(proxy, session_id, server.url) as client:
        await client.call_tool("delete_file", {"path": "tmp/old.txt"})
    [step] = _calls(proxy, session_id)
    assert (step["rule"], step["risk"]) == ("mcp/destructive-tool-call", "high")
    assert step["meta"]["mcp"]["annotations"] == {"destructiveHint": True}


async def test_a_frozen_session_refuses_tool_calls_as_json_rpc_errors(
    proxy: Undoproxy, server: McpServer, session_id: str
) -> None:
    async with mcp_session(proxy, session_id, server.url) as client:
        assert proxy.api("POST", f"/api/sessions/{session_id}/freeze").status_code == 200
        try:
            with pytest.raises(McpError) as refused:
                await client.call_tool("write_file", {"path": "tmp/b.txt", "text": "x"})
            assert refused.value.error.data["error"] == "undoproxy_frozen"
            # reads still pass
            assert (
                _text(await client.call_tool("read_file", {"path": "hello.txt"})) == "hello world"
            )
        finally:
            proxy.api("POST", f"/api/sessions/{session_id}/unfreeze")
    assert "tmp/b.txt" not in server.files


def test_a_plain_post_is_not_reshaped(proxy: Undoproxy, server: McpServer) -> None:
    """Only MCP requests get JSON-RPC errors: a refusal of anything else keeps its 403."""
    session = f"t-{uuid.uuid4().hex[:8]}"
    proxy.api("POST", "/api/freeze")
    try:
        with proxy.agent(session) as agent:
            r = agent.post(server.url.replace("/mcp", "/other"), json={"a": 1})
    finally:
        proxy.api("POST", "/api/unfreeze")
    assert r.status_code == 403 and r.json()["error"] == "undoproxy_frozen"
