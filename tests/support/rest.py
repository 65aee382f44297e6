"""A small REST API with real state, for snapshot and rollback tests.

`/items` collection: POST creates (201, Location, `{"id": ...}`); `/items/{id}`: GET (ETag when
enabled), PUT (replace; creates when `put_creates`), PATCH (merge), DELETE (204, 404 when
missing). Every request needs `Authorization: Bearer <token>` when a token is set, so that a
compensation only succeeds if undoproxy replayed the agent's credentials.
Test controls (headers on the agent's request, never forwarded by a real agent):
`X-Test-Drop: after` (on a write) applies it then drops the connection without answering;
`X-Test-Drop: before` drops it without applying anything.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer


@dataclass
class RestState:
    """The API's data and knobs, shared across restarts of its server."""

    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 100
    etags: bool = True
    put_creates: bool = True
    token: str | None = None
    query_key: str | None = None  # when set, every request needs ?api_key=<it>
    log: list[tuple[str, str]] = field(default_factory=list)  # (method, path) received
    gate: asyncio.Event | None = None  # when set: compensating writes wait for it
    fail_writes: int = 0  # answer this many writes 503 (Retry-After: 0) before serving them

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """A deep copy of the items, to compare states."""
        return json.loads(json.dumps(self.items))


STATE: web.AppKey[RestState] = web.AppKey("rest", RestState)


def etag(item: dict[str, Any]) -> str:
    return '"' + hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:16] + '"'


def _answer(
    state: RestState, item: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    extra = dict(headers or {})
    if state.etags:
        extra["ETag"] = etag(item)
    return web.json_response(item, status=status, headers=extra)


@web.middleware
async def controls(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[STATE]
    state.log.append((request.method, request.path))
    if state.token and request.headers.get("Authorization") != f"Bearer {state.token}":
        return web.json_response({"error": "unauthorized"}, status=401)
    if state.query_key and request.query.get("api_key") != state.query_key:
        return web.json_response({"error": "missing or wrong api_key"}, status=401)
    if (
        request.method != "GET"
        and state.gate is not None
        and not state.gate.is_set()
        and "X-Test-Drop" not in request.headers
    ):
        await state.gate.wait()
    if request.method != "GET" and state.fail_writes > 0:
        state.fail_writes -= 1
        return web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "0"})
    drop = request.headers.get("X-Test-Drop") if request.method != "GET" else None
    if drop == "before":
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError
    response = await handler(request)
    if drop == "after":
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError
    return response


async def create(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await request.json()
    item_id = str(state.next_id)
    state.next_id += 1
    state.items[item_id] = {**body, "id": item_id}
    return _answer(state, state.items[item_id], 201, {"Location": f"/items/{item_id}"})


async def read(request: web.Request) -> web.Response:
    state = request.app[STATE]
    item = state.items.get(request.match_info["id"])
    if item is None:
        return web.json_response({"error": "not found"}, status=404)
    if_none = request.headers.get("If-None-Match")
    if state.etags and if_none == etag(item):
        return web.Response(status=304)
    return _answer(state, item)


def _precondition(state: RestState, request: web.Request, item: dict[str, Any] | None) -> bool:
    wanted = request.headers.get("If-Match")
    return not (state.etags and wanted and (item is None or wanted != etag(item)))


async def replace(request: web.Request) -> web.Response:
    state = request.app[STATE]
    item_id = request.match_info["id"]
    current = state.items.get(item_id)
    if not _precondition(state, request, current):
        return web.json_response({"error": "precondition failed"}, status=412)
    if current is None and not state.put_creates:
        return web.json_response({"error": "not found"}, status=404)
    state.items[item_id] = {**await request.json(), "id": item_id}
    return _answer(state, state.items[item_id], 200 if current else 201)


async def patch(request: web.Request) -> web.Response:
    state = request.app[STATE]
    item = state.items.get(request.match_info["id"])
    if item is None:
        return web.json_response({"error": "not found"}, status=404)
    if not _precondition(state, request, item):
        return web.json_response({"error": "precondition failed"}, status=412)
    item.update(await request.json())
    return _answer(state, item)


async def delete(request: web.Request) -> web.Response:
    state = request.app[STATE]
    item_id = request.match_info["id"]
    if item_id not in state.items:
        return web.json_response({"error": "not found"}, status=404)
    if not _precondition(state, request, state.items[item_id]):
        return web.json_response({"error": "precondition failed"}, status=412)
    del state.items[item_id]
    return web.Response(status=204)


def create_app(state: RestState) -> web.Application:
    """The REST app over `state`."""
    app = web.Application(middlewares=[controls])
    app[STATE] = state
    app.router.add_post("/items", create)
    app.router.add_get("/items/{id}", read)
    app.router.add_put("/items/{id}", replace)
    app.router.add_patch("/items/{id}", patch)
    app.router.add_delete("/items/{id}", delete)
    return app


def serve(state: RestState, cert: tuple[Path, Path], port: int = 0) -> ThreadedServer:
    """The REST API over `state`, on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert), port=port).start()
