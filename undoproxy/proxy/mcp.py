"""MCP as a protocol, not as a POST: what each call was, what it answered, and refusals the
agent's MCP client can live with.

The Model Context Protocol's Streamable HTTP transport sends JSON-RPC 2.0 to one endpoint
(a POST per message; the answer is JSON or a server-sent event stream; a DELETE closes the
MCP session). For every such POST (path ending `/mcp`, or an `Mcp-Session-Id` /
`MCP-Protocol-Version` header, and a JSON-RPC 2.0 body), whatever rule matched:

- the step's `meta.mcp` keeps the JSON-RPC method, the tool called and its arguments
  (redacted, capped at 4 KiB of JSON), the tool's annotations as the server listed them, and
  once answered the result or error (redacted, capped) and whether it is an error;
- the annotations a `tools/list` answer gives each tool are remembered for that MCP session of
  that undoproxy session (`ToolHints`, bounded), so that rules can match them
  (`match: {mcp_annotations: ...}`): hints only, never trusted unless a rule says so;
- a refusal of undoproxy's own (a deny, a hold denied or timed out, a frozen or closed
  session, a budget, a failed snapshot, an internal error) is answered as a JSON-RPC error in
  a 200 (`as_jsonrpc_error`, called by FailClosed once the request hooks have run): the MCP
  client fails that one call and keeps its session, where an HTTP 403 would make it tear the
  whole session down. The undoproxy error body is the error's `data`.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any, Final
from urllib.parse import urlsplit

from mitmproxy import http

from undoproxy import redact
from undoproxy.limits import MUTATION_BODY_LIMIT
from undoproxy.proxy.answers import JSON
from undoproxy.proxy.bodies import readable, response_body
from undoproxy.proxy.planning import request_view
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.proxy.streaming import BodyTap
from undoproxy.rules.mcp import (
    TOOLS_LIST,
    McpCall,
    annotations_of,
    calls_of,
    capped,
    is_error,
    responses_of,
)
from undoproxy.rules.record import stream_events

log = logging.getLogger(__name__)

MCP_HEADERS: Final = ("mcp-session-id", "mcp-protocol-version")
REFUSED: Final = -32001  # the JSON-RPC error code of undoproxy's refusals (server-defined range)
MAX_ENDPOINTS: Final = 1024  # MCP sessions whose tools' hints are remembered (oldest forgotten)
MAX_TOOLS: Final = 1024  # tools remembered per MCP session


def looks_like_mcp(flow: http.HTTPFlow) -> bool:
    """A POST to an MCP endpoint (its path, or MCP's own headers, say so)."""
    request = flow.request
    if request.method != "POST":
        return False
    path = urlsplit(request.path).path.rstrip("/")
    return path.endswith("/mcp") or any(h in request.headers for h in MCP_HEADERS)


class McpExchange:
    """One MCP POST: where it went, in which MCP session, and the calls it carried."""

    def __init__(self, key: tuple[str, str, str], calls: list[McpCall]) -> None:
        self.key = key  # (undoproxy session, endpoint, Mcp-Session-Id)
        self.calls = calls


class ToolHints:
    """Tool annotations per MCP session, as its server listed them; bounded (LRU)."""

    def __init__(self, endpoints: int = MAX_ENDPOINTS, tools: int = MAX_TOOLS) -> None:
        self.endpoints = endpoints
        self.tools = tools
        self._known: OrderedDict[tuple[str, str, str], dict[str, dict[str, Any]]] = OrderedDict()

    def learn(self, key: tuple[str, str, str], listed: dict[str, dict[str, Any]]) -> None:
        """Remember what a tools/list answer said (a later page adds to it)."""
        known = self._known.setdefault(key, {})
        self._known.move_to_end(key)
        for name, hints in listed.items():
            if name in known or len(known) < self.tools:
                known[name] = hints
        while len(self._known) > self.endpoints:
            self._known.popitem(last=False)

    def of(self, key: tuple[str, str, str], tool: str) -> dict[str, Any] | None:
        """The tool's annotations, or None when it was never listed in that MCP session."""
        known = self._known.get(key)
        return None if known is None else known.get(tool)


class McpTraffic:
    """mitmproxy addon (in FailClosed's chain, before the gate): see the module docstring."""

    def __init__(self, hints: ToolHints | None = None) -> None:
        self.hints = hints or ToolHints()

    def request(self, flow: http.HTTPFlow) -> None:
        """Read the calls; give the rules the called tool's hints; keep the facts."""
        state = state_of(flow)
        if state is None or flow.response is not None or not looks_like_mcp(flow):
            return
        view = state.view or request_view(flow, state)
        state.view = view
        calls = calls_of(view.json)
        if not calls:
            return
        request = flow.request
        endpoint = f"{request.scheme}://{request.host}:{request.port}{urlsplit(request.path).path}"
        key = (state.session_id, endpoint, request.headers.get("mcp-session-id", ""))
        state.mcp = McpExchange(key, calls)
        tools = [c.tool for c in calls if c.tool is not None]
        if len(tools) == 1:
            view.mcp_annotations = self.hints.of(key, tools[0])
        facts = [self._call_facts(c, key) for c in calls]
        state.facts["mcp"] = facts[0] if len(facts) == 1 else {"batch": facts}
        if any(c.method == TOOLS_LIST for c in calls):
            state.response_keep = MUTATION_BODY_LIMIT  # enough of the answer to read its tools

    def _call_facts(self, call: McpCall, key: tuple[str, str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {"method": call.method}
        if call.id is not None:
            out["id"] = call.id
        if call.tool is not None:
            out["tool"] = call.tool
            out["arguments"] = capped(redact.json_value(call.arguments))
            out["annotations"] = self.hints.of(key, call.tool)
        return out

    def response(self, flow: http.HTTPFlow) -> None:
        """Keep what the server answered each call; learn a tools/list's hints."""
        state = state_of(flow)
        if state is None or state.answered or not isinstance(state.mcp, McpExchange):
            return
        answers = responses_of(_answer_documents(flow, state))
        exchange: McpExchange = state.mcp
        facts = state.facts.get("mcp")
        each = facts.get("batch") if isinstance(facts, dict) and "batch" in facts else [facts]
        for call, fact in zip(exchange.calls, each or [], strict=False):
            answer = answers.get(call.id) if call.id is not None else None
            if answer is None or not isinstance(fact, dict):
                continue
            fact["is_error"] = is_error(answer)
            if "error" in answer:
                fact["error"] = capped(redact.json_value(answer["error"]))
            else:
                fact["result"] = capped(redact.json_value(answer.get("result")))
            if call.method == TOOLS_LIST:
                self.hints.learn(exchange.key, annotations_of(answer.get("result")))

    def error(self, flow: http.HTTPFlow) -> None:
        """The agent (or the server) closed the stream after the answer began: keep what
        arrived of it (an MCP client closes an answer's event stream once it has its reply)."""
        if flow.response is not None:
            self.response(flow)


def _answer_documents(flow: http.HTTPFlow, state: FlowState) -> list[Any]:
    """The JSON documents of the answer: the events of a stream (as far as the tap kept), or
    the JSON body."""
    response = flow.response
    if response is None:
        return []
    if isinstance(response.stream, BodyTap):
        return stream_events(response.stream.copy().head)
    body = readable(response_body(flow, state))
    if not body:
        return []
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return stream_events(body)
    try:
        return [json.loads(body)]
    except (ValueError, RecursionError):
        return []


def as_jsonrpc_error(flow: http.HTTPFlow) -> None:
    """Turn undoproxy's own refusal of an MCP request into the JSON-RPC error its client
    expects: HTTP 200, `{"jsonrpc": "2.0", "id": ..., "error": {"code": -32001, "message",
    "data": <undoproxy's error body>}}` (a list of them for a batch). Anything else, and a
    notification (nothing to answer), is left as it is."""
    response = flow.response
    state = state_of(flow)
    if response is None or response.headers.get("X-Undoproxy") != "1":
        return
    if state is None or not looks_like_mcp(flow):
        return
    exchange = state.mcp
    calls = exchange.calls if isinstance(exchange, McpExchange) else _calls(flow, state)
    answered = [c for c in calls if c.id is not None]
    if not answered:
        return
    try:
        data: Any = json.loads(response.content or b"{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    code = str(data.get("error") or "undoproxy_refused")
    why = data.get("reason") or data.get("message") or f"HTTP {response.status_code}"
    data["http_status"] = response.status_code
    errors = [
        {
            "jsonrpc": "2.0",
            "id": c.id,
            "error": {"code": REFUSED, "message": f"{code}: {why}", "data": data},
        }
        for c in answered
    ]
    body = errors[0] if len(errors) == 1 and len(calls) == 1 else errors
    kept = {
        k: v
        for k, v in response.headers.items()
        if k.lower().startswith("x-undoproxy") or k.lower() == "retry-after"
    }
    flow.response = http.Response.make(200, json.dumps(body).encode(), {**JSON, **kept})


def _calls(flow: http.HTTPFlow, state: FlowState) -> list[McpCall]:
    """The calls of a request the MCP addon did not read (refused before it ran)."""
    try:
        view = state.view or request_view(flow, state)
    except ValueError:
        return []
    return calls_of(view.json)
