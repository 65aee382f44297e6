"""What an MCP (Model Context Protocol) request does: its JSON-RPC method, the tool it calls,
the tool's arguments; and what its answer says.

MCP's Streamable HTTP transport POSTs JSON-RPC 2.0 messages to one endpoint (`/mcp` as a
rule): a request (`id` set), a notification (no `id`) or, in older revisions, a batch (a list).
The answer is JSON, or a stream of server-sent events one of which is the JSON-RPC response.
Everything here is pure: the proxy's MCP addon (proxy/mcp.py) and the rules engine call it.

    calls_of(body) -> [McpCall]            the requests a POST body carries
    responses_of(docs) -> {id: response}   the JSON-RPC responses among answer documents
    tool_names(body) -> [name]             the tools a body calls (`match: {mcp_tool: ...}`)
    annotations_of(result) -> {tool: {...}}   a tools/list result's hints, by tool
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

TOOL_CALL: Final = "tools/call"
TOOLS_LIST: Final = "tools/list"
HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
KEPT: Final = 4096  # bytes of JSON a step keeps of a tool's arguments, and of its result


@dataclass(frozen=True)
class McpCall:
    """One JSON-RPC request or notification of an MCP POST."""

    method: str
    id: Any = None  # None for a notification
    params: Any = None

    @property
    def notification(self) -> bool:
        """True when no answer is expected (no `id`)."""
        return self.id is None

    @property
    def tool(self) -> str | None:
        """The tool a `tools/call` names."""
        if self.method != TOOL_CALL or not isinstance(self.params, dict):
            return None
        name = self.params.get("name")
        return name if isinstance(name, str) else None

    @property
    def arguments(self) -> Any:
        """The arguments a `tools/call` passes."""
        return self.params.get("arguments") if isinstance(self.params, dict) else None


def _call(item: Any) -> McpCall | None:
    if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
        return None
    method = item.get("method")
    if not isinstance(method, str):
        return None
    ident = item.get("id")
    if not isinstance(ident, str | int) or isinstance(ident, bool):
        ident = None
    return McpCall(method, ident, item.get("params"))


def calls_of(body: Any) -> list[McpCall]:
    """The JSON-RPC requests and notifications a parsed POST body carries ([] when it is not
    JSON-RPC 2.0, or a batch holds anything else)."""
    items = body if isinstance(body, list) else [body]
    calls = [_call(item) for item in items]
    if not calls or any(c is None for c in calls):
        return []
    return [c for c in calls if c is not None]


def tool_names(body: Any) -> list[str]:
    """The tools a body's `tools/call` requests call ([] when it calls none)."""
    return [c.tool for c in calls_of(body) if c.tool is not None]


def tool_matches(patterns: Iterable[str], name: str) -> bool:
    """True when a glob of `patterns` (`github.*`, `read_*`) matches the tool's name."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def responses_of(docs: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """The JSON-RPC responses (`result` or `error`) among answer documents, by id."""
    out: dict[Any, dict[str, Any]] = {}
    for doc in docs:
        for item in doc if isinstance(doc, list) else [doc]:
            if (
                isinstance(item, dict)
                and item.get("jsonrpc") == "2.0"
                and ("result" in item or "error" in item)
                and isinstance(item.get("id"), str | int)
            ):
                out[item["id"]] = item
    return out


def annotations_of(result: Any) -> dict[str, dict[str, Any]]:
    """tool name -> its annotations (the hints only), from a `tools/list` result."""
    tools = result.get("tools") if isinstance(result, dict) else None
    out: dict[str, dict[str, Any]] = {}
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        given = tool.get("annotations")
        given = given if isinstance(given, dict) else {}
        out[tool["name"]] = {k: given[k] for k in HINTS if isinstance(given.get(k), bool)}
    return out


def capped(value: Any, limit: int = KEPT) -> Any:
    """`value` when its JSON is at most `limit` bytes; else its first `limit` bytes as text,
    marked truncated, with the full length."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text.encode()) <= limit:
        return value
    cut = text.encode()[:limit].decode("utf-8", "ignore")
    return {"truncated": True, "length": len(text.encode()), "json": cut}


def is_error(response: dict[str, Any]) -> bool:
    """True for a JSON-RPC error, or a tool result that says `isError`."""
    if "error" in response:
        return True
    result = response.get("result")
    return isinstance(result, dict) and result.get("isError") is True
