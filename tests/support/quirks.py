"""A REST API with the quirks real servers have and this project's other fakes do not, each
one the shape of a finding in issue #21 (rollback verdicts that were wrong both ways):

`/records` (POST creates: 201 + Location, or 303 See Other with `see_other`) and
`/records/{id}` (GET, PUT replace, PATCH merge, DELETE): every write sets `updated_at` (a
server clock that never repeats) and increments `revision`; `created_at` is set on creation —
fields no client can set. Knobs:
    envelope      bodies are `{"data": {...}}`, as Kinto's
    put_answer    what a PUT/PATCH answers: "echo" (200 + the record), "empty" (204, no body,
                  no ETag), "status" (200 `{"status": "ok"}`: not the representation)
    tombstones    a deleted record reads back 200 `{"id", "object", "deleted": true}` (Stripe)
    views         every GET increments `views` in the answer (a value computed per read)
    etags         answers carry a strong ETag of the record
`X-Test-Fail: 502-after` on a write applies it, then answers 502 (a gateway timing out).
`/docs/{name}`: PUT stores by name and answers 200 `{"id": N}`; GET answers 404 for a name (it
only serves `/docs/by-id/{id}`): an API whose GET and PUT address a resource differently.
`/blobs/{key}`: bytes stored as sent with their Content-Encoding, and served so whatever the
client accepts (an object store holding a gzip file).
Every request needs `Authorization: Bearer <token>` when a token is set; `log` records
(method, path) of each request.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer


@dataclass
class Quirks:
    """The API's data, knobs and request log."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    blobs: dict[str, tuple[bytes, dict[str, str]]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    token: str | None = None
    envelope: bool = False
    put_answer: str = "echo"
    see_other: bool = False
    tombstones: bool = False
    views: bool = False
    etags: bool = False
    log: list[tuple[str, str]] = field(default_factory=list)
    _clock: Any = field(default_factory=lambda: itertools.count(1_000))
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def tick(self) -> int:
        """The server's clock: a new value for every write."""
        return int(next(self._clock))

    def seed(self, record_id: str, **fields: Any) -> dict[str, Any]:
        """Put a record in place as the server would have written it."""
        now = self.tick()
        self.records[record_id] = {
            **fields,
            "id": record_id,
            "created_at": now,
            "updated_at": now,
            "revision": 1,
        }
        return dict(self.records[record_id])

    def client_fields(self, record_id: str) -> dict[str, Any]:
        """A record without the fields the server sets (what a client could restore)."""
        return {
            k: v
            for k, v in self.records[record_id].items()
            if k not in ("created_at", "updated_at", "revision")
        }


STATE: web.AppKey[Quirks] = web.AppKey("quirks", Quirks)


def _state(request: web.Request) -> Quirks:
    return request.app[STATE]


def _wrap(state: Quirks, record: dict[str, Any]) -> Any:
    return {"data": record} if state.envelope else record


def _unwrap(state: Quirks, body: Any) -> dict[str, Any]:
    if state.envelope and isinstance(body, dict):
        body = body.get("data")
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": "a JSON object is expected"}')
    return dict(body)


def _etag(record: dict[str, Any]) -> str:
    return '"' + hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16] + '"'


def _answer(
    state: Quirks, record: dict[str, Any], status: int = 200, **headers: str
) -> web.Response:
    extra = dict(headers)
    if state.etags:
        extra["ETag"] = _etag(record)
    return web.json_response(_wrap(state, record), status=status, headers=extra)


@web.middleware
async def controls(request: web.Request, handler: Any) -> web.StreamResponse:
    state = _state(request)
    state.log.append((request.method, request.path))
    if state.token and request.headers.get("Authorization") != f"Bearer {state.token}":
        return web.json_response({"error": "unauthorized"}, status=401)
    response = await handler(request)
    if request.method != "GET" and request.headers.get("X-Test-Fail") == "502-after":
        return web.json_response({"error": "bad gateway"}, status=502)
    return response


async def create(request: web.Request) -> web.Response:
    state = _state(request)
    body = _unwrap(state, await request.json())
    record_id = str(next(state._ids) + 100)
    now = state.tick()
    state.records[record_id] = {
        **body,
        "id": record_id,
        "created_at": now,
        "updated_at": now,
        "revision": 1,
    }
    state.deleted.discard(record_id)
    where = f"/records/{record_id}"
    if state.see_other:
        return web.Response(status=303, headers={"Location": where})
    return _answer(state, state.records[record_id], 201, Location=where)


async def read(request: web.Request) -> web.Response:
    state = _state(request)
    record_id = request.match_info["id"]
    record = state.records.get(record_id)
    if record is None:
        if state.tombstones and record_id in state.deleted:
            return web.json_response({"id": record_id, "object": "record", "deleted": True})
        return web.json_response({"error": "not found"}, status=404)
    if state.views:
        record["views"] = int(record.get("views", 0)) + 1
    return _answer(state, record)


def _written(state: Quirks, record_id: str, fields: dict[str, Any], before: Any) -> web.Response:
    now = state.tick()
    revision = int(before["revision"]) + 1 if before else 1
    created = before["created_at"] if before else now
    kept = {k: v for k, v in fields.items() if k not in ("created_at", "updated_at", "revision")}
    record = {**kept, "id": record_id, "created_at": created, "updated_at": now}
    record["revision"] = revision
    state.records[record_id] = record
    state.deleted.discard(record_id)
    if state.put_answer == "empty":
        return web.Response(status=204)
    if state.put_answer == "status":
        return web.json_response({"status": "ok"})
    return _answer(state, record, 200 if before else 201)


async def replace(request: web.Request) -> web.Response:
    state = _state(request)
    record_id = request.match_info["id"]
    before = state.records.get(record_id)
    return _written(state, record_id, _unwrap(state, await request.json()), before)


async def patch(request: web.Request) -> web.Response:
    state = _state(request)
    record_id = request.match_info["id"]
    before = state.records.get(record_id)
    if before is None:
        return web.json_response({"error": "not found"}, status=404)
    merged = {**before, **_unwrap(state, await request.json())}
    return _written(state, record_id, merged, before)


async def delete(request: web.Request) -> web.Response:
    state = _state(request)
    record_id = request.match_info["id"]
    if state.records.pop(record_id, None) is None:
        return web.json_response({"error": "not found"}, status=404)
    state.deleted.add(record_id)
    return web.Response(status=204)


async def put_doc(request: web.Request) -> web.Response:
    state = _state(request)
    name = request.match_info["name"]
    doc = state.docs.setdefault(name, {"id": len(state.docs) + 1, "name": name})
    doc["text"] = (await request.json()).get("text")
    return web.json_response({"id": doc["id"]})  # 200 whether it was new or not


async def get_doc(request: web.Request) -> web.Response:
    state = _state(request)
    wanted = request.match_info["id"]
    for doc in state.docs.values():
        if str(doc["id"]) == wanted:
            return web.json_response(doc)
    return web.json_response({"error": "not found"}, status=404)


async def no_doc_by_name(request: web.Request) -> web.Response:
    return web.json_response({"error": "documents are read by id"}, status=404)


async def put_blob(request: web.Request) -> web.Response:
    state = _state(request)
    kept = {
        k.lower(): v
        for k, v in request.headers.items()
        if k.lower() in ("content-type", "content-encoding")
    }
    state.blobs[request.match_info["key"]] = (await request.read(), kept)
    return web.Response(status=204)


async def get_blob(request: web.Request) -> web.Response:
    found = _state(request).blobs.get(request.match_info["key"])
    if found is None:
        return web.json_response({"error": "not found"}, status=404)
    body, headers = found
    return web.Response(body=body, headers=headers)


async def delete_blob(request: web.Request) -> web.Response:
    if _state(request).blobs.pop(request.match_info["key"], None) is None:
        return web.json_response({"error": "not found"}, status=404)
    return web.Response(status=204)


def create_app(state: Quirks) -> web.Application:
    """The API over `state`."""
    # Bodies as sent: an object store keeps a gzip upload as gzip bytes.
    app = web.Application(middlewares=[controls], handler_args={"auto_decompress": False})
    app[STATE] = state
    app.router.add_post("/records", create)
    app.router.add_get("/records/{id}", read)
    app.router.add_put("/records/{id}", replace)
    app.router.add_patch("/records/{id}", patch)
    app.router.add_delete("/records/{id}", delete)
    app.router.add_get("/docs/by-id/{id}", get_doc)
    app.router.add_get("/docs/{name}", no_doc_by_name)
    app.router.add_put("/docs/{name}", put_doc)
    app.router.add_put("/blobs/{key}", put_blob)
    app.router.add_get("/blobs/{key}", get_blob)
    app.router.add_delete("/blobs/{key}", delete_blob)
    return app


def serve(state: Quirks, cert: tuple[Path, Path]) -> ThreadedServer:
    """The API over `state`, on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert)).start()
