"""A fake of the protocol APIs the graphql, mcp, search and email packs recognise.

- `POST /graphql` (and `GET`, the operation in `?query=`): answers `{"data": {...}}` naming
  the operation it ran.
- `POST /mcp`: JSON-RPC 2.0 (`initialize`, `tools/list`, `tools/call`, ...): `result` echoes
  the method; a notification (no `id`) is answered 202 with no body, as MCP's Streamable HTTP
  transport does.
- `POST /{index}/_search`, `_count`, ...: Elasticsearch-shaped hits.
- `POST /v3/mail/send`: SendGrid's 202 with an empty body and an `X-Message-Id`; 401 with
  SendGrid's `errors` body for a missing or revoked API key (`REVOKED`), 400 for a message
  without personalizations, from, subject or content; with `HANG_UP` set it delivers the
  message and drops the connection before answering.
- `POST /v2/email/outbound-emails`: Amazon SES v2's `{"MessageId"}` (no signature check).
- `POST /emails`: Resend's `{"id"}`; an `Idempotency-Key` seen before is answered with the
  first answer and sends nothing (409 when the body differs), as Resend documents.
Every request is recorded in `RECEIVED` (method, path, JSON body); every message accepted for
delivery in `OUTBOX` (provider, JSON body).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

RECEIVED: web.AppKey[list[tuple[str, str, Any]]] = web.AppKey("protocol_received", list)
OUTBOX: web.AppKey[list[tuple[str, Any]]] = web.AppKey("protocol_outbox", list)
REVOKED: web.AppKey[set[str]] = web.AppKey("protocol_revoked_keys", set)
# When set, a SendGrid send is delivered and then the connection dropped before the answer.
HANG_UP: web.AppKey[list[bool]] = web.AppKey("protocol_hang_up", list)
IDEMPOTENCY: web.AppKey[dict[str, tuple[Any, dict[str, Any]]]] = web.AppKey("idem", dict)


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


def _api_key(request: web.Request) -> str | None:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Bearer" or not key or key in request.app[REVOKED]:
        return None
    return key


async def sendgrid(request: web.Request) -> web.Response:
    body = await _record(request)
    if _api_key(request) is None:
        message = "The provided authorization grant is invalid, expired, or revoked"
        return web.json_response(
            {"errors": [{"field": None, "message": message, "help": None}]}, status=401
        )
    missing = [
        k
        for k in ("personalizations", "from", "content")
        if not isinstance(body, dict) or not body.get(k)
    ]
    people = body.get("personalizations") if isinstance(body, dict) else None
    if isinstance(body, dict) and not body.get("subject"):
        missing += [] if all(p.get("subject") for p in people or [{}]) else ["subject"]
    if missing:
        errors = [{"field": k, "message": f"The {k} parameter is required."} for k in missing]
        return web.json_response({"errors": errors}, status=400)
    request.app[OUTBOX].append(("sendgrid", body))
    n = len(request.app[OUTBOX])
    if request.app[HANG_UP]:
        assert request.transport is not None
        request.transport.close()  # delivered, but the client never hears it
    return web.Response(status=202, headers={"X-Message-Id": f"fake-message-{n}"})


async def resend(request: web.Request) -> web.Response:
    body = await _record(request)
    if _api_key(request) is None:
        return web.json_response(
            {"statusCode": 401, "name": "missing_api_key", "message": "Missing API key"},
            status=401,
        )
    if not isinstance(body, dict) or not all(body.get(k) for k in ("from", "to", "subject")):
        return web.json_response(
            {"statusCode": 422, "name": "missing_required_field", "message": "Missing field"},
            status=422,
        )
    key = request.headers.get("Idempotency-Key")
    if key and key in request.app[IDEMPOTENCY]:
        first_body, first_answer = request.app[IDEMPOTENCY][key]
        if first_body != body:
            return web.json_response(
                {"statusCode": 409, "name": "invalid_idempotent_request", "message": "changed"},
                status=409,
            )
        return web.json_response(first_answer)
    request.app[OUTBOX].append(("resend", body))
    answer = {"id": f"re-{len(request.app[OUTBOX])}"}
    if key:
        request.app[IDEMPOTENCY][key] = (body, answer)
    return web.json_response(answer)


async def ses(request: web.Request) -> web.Response:
    body = await _record(request)
    request.app[OUTBOX].append(("ses", body))
    return web.json_response({"MessageId": f"ses-{len(request.app[OUTBOX])}"})


def create_app() -> web.Application:
    """The fake protocol APIs."""
    app = web.Application()
    app[RECEIVED] = []
    app[OUTBOX] = []
    app[REVOKED] = set()
    app[HANG_UP] = []
    app[IDEMPOTENCY] = {}
    app.router.add_post("/graphql", graphql)
    app.router.add_get("/graphql", graphql)
    app.router.add_post("/api/graphql", graphql)
    app.router.add_post("/mcp", mcp)
    app.router.add_post("/v3/mail/send", sendgrid)
    app.router.add_post("/emails", resend)
    app.router.add_post("/v2/email/outbound-emails", ses)
    for op in ("_search", "_msearch", "_count", "_mget", "_field_caps", "_validate/query"):
        app.router.add_post("/{index}/" + op, search)
        app.router.add_post("/" + op, search)
    return app
