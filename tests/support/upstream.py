"""The echo upstream: answers with what it received, records every request, streams SSE, and
echoes WebSocket messages (`/ws/...`)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


RECEIVED: web.AppKey[list[Received]] = web.AppKey("received", list)
GATES: web.AppKey[dict[str, asyncio.Event]] = web.AppKey("gates", dict)


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    request.app[RECEIVED].append(
        Received(request.method, request.path_qs, dict(request.headers), body)
    )
    status = int(request.query.get("status", "200"))
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = text
    payload = {
        "method": request.method,
        "path": request.path,
        "query": dict(request.query),
        "headers": dict(request.headers),
        "body": parsed,
    }
    return web.json_response(payload, status=status)


async def sse(request: web.Request) -> web.StreamResponse:
    request.app[RECEIVED].append(
        Received(request.method, request.path_qs, dict(request.headers), b"")
    )
    count = int(request.query.get("n", "3"))
    gate = request.app[GATES].setdefault(request.query.get("gate", ""), asyncio.Event())
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    for i in range(count):
        await response.write(f"data: {json.dumps({'n': i})}\n\n".encode())
        if i == 0 and request.query.get("gate"):
            # The rest only comes once the client has proved it received the first event.
            await asyncio.wait_for(gate.wait(), 20)
    await response.write_eof()
    return response


async def big(request: web.Request) -> web.StreamResponse:
    """`size` bytes, announced with Content-Length, written in 64 KiB pieces."""
    size = int(request.query["size"])
    response = web.StreamResponse(
        headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    )
    await response.prepare(request)
    chunk = b"x" * 65536
    for start in range(0, size, len(chunk)):
        await response.write(chunk[: size - start])
    await response.write_eof()
    return response


async def websocket(request: web.Request) -> web.WebSocketResponse:
    """A WebSocket that sends back every message it gets."""
    request.app[RECEIVED].append(
        Received(request.method, request.path_qs, dict(request.headers), b"")
    )
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        if message.type == web.WSMsgType.TEXT:
            await ws.send_str(message.data)
        elif message.type == web.WSMsgType.BINARY:
            await ws.send_bytes(message.data)
    return ws


async def release(request: web.Request) -> web.Response:
    request.app[GATES].setdefault(request.query["gate"], asyncio.Event()).set()
    return web.json_response({"released": request.query["gate"]})


def create_app() -> web.Application:
    """The echo app; `app[RECEIVED]` lists every request it got."""
    app = web.Application(client_max_size=32 * 1024 * 1024)  # bodies over 1 MiB are tested
    app[RECEIVED] = []
    app[GATES] = {}
    app.router.add_get("/sse", sse)
    app.router.add_get("/release", release)
    app.router.add_get("/big", big)
    app.router.add_get("/ws/{tail:.*}", websocket)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app
