"""A fake of the protocol APIs the graphql, mcp, search and email packs recognise.

- `POST /graphql`: answers `{"data": {...}}` naming the operation it ran.
- `POST /mcp`: JSON-RPC 2.0 (`initialize`, `tools/list`, `tools/call`, ...): `result` echoes
  the method; a notification (no `id`) is answered 202 with no body, as MCP's Streamable HTTP
  transport does.
- `POST /{index}/_search`, `_count`, ...: Elasticsearch-shaped hits.
- `POST /v3/mail/send`: SendGrid's 202 with an empty body and an `X-Message-Id`.
Every request is recorded in `RECEIVED` (method, path, JSON body).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

RECEIVED: web.AppKey[list[tuple[str, str, Any]]] = web.AppKey("protocol_received", list)


async def _record(request: web.Request) -> Any:
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    request.app[RECEIVED].append((request.method, request.path, body))
    return body


async def graphql(request: web.Request) -> web.Response:
    body = await _record(request)
    name = body.get("operationName") if isinstance(body, dict) else None
    return web.json_response({"data": {"ran": name or "anonymous"}})


async def mcp(request: web.Request) -> web.Response:
    body = await _record(request)
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return web.json_response(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}},
            status=400,
        )
    if "id" not in body:
        return web.Response(status=202)
    result: dict[str, Any] = {"method": body.get("method")}
    if body.get("method") == "tools/call":
        result = {"content": [{"type": "text", "text": "done"}], "isError": False}
    return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})


async def search(request: web.Request) -> web.Response:
    await _record(request)
    return web.json_response(
        {"took": 1, "timed_out": False, "hits": {"total": {"value": 1}, "hits": [{"_id": "1"}]}}
    )


async def sendgrid(request: web.Request) -> web.Response:
    await _record(request)
    return web.Response(status=202, headers={"X-Message-Id": "fake-message-1"})


def create_app() -> web.Application:
    """The fake protocol APIs."""
    app = web.Application()
    app[RECEIVED] = []
    app.router.add_post("/graphql", graphql)
    app.router.add_post("/api/graphql", graphql)
    app.router.add_post("/mcp", mcp)
    app.router.add_post("/v3/mail/send", sendgrid)
    for op in ("_search", "_msearch", "_count", "_mget", "_field_caps", "_validate/query"):
        app.router.add_post("/{index}/" + op, search)
        app.router.add_post("/" + op, search)
    return app
