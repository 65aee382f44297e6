"""An object store that misbehaves the way real servers do, for proving rollback reports.

`/o/{key}`: GET (ETag, the stored representation headers: Content-Type, Content-Language,
Cache-Control, x-amz-meta-*), PUT (store body and those headers), DELETE (204; a key ending
with `/` is a folder: GET lists it as HTML, DELETE removes everything under it).
`POST /o/` (or `/o/FOLDER/`) creates an object with a server-chosen name in it and answers
`{"id": NAME}` with no Location. `POST /mcp`: a JSON-RPC 2.0 endpoint whose `tools/call`
creates a ticket (its answer's `id` is the request's). `POST /v1/jobs`: runs a job and
answers `{"id": "job-..."}`, keeping nothing to GET or DELETE at that id (as LLM and job APIs
do). `/db/{doc}`: documents with CouchDB's revisions: every write must name the current
`_rev` (in the body, `?rev=` or `If-Match`) or is answered 409, gets a new one, and
`GET ?rev=` reads an old revision.

Faults a test switches on after the agent's writes, each how some real server behaves:
    drop_metadata   PUT keeps body and Content-Type, drops user metadata (a gateway that does
                    not support x-amz-meta-* on overwrite)
    ignore_writes   PUT and DELETE answer 2xx and change nothing (read-only replica, a cache)
    fail_reads      this many GETs answer `read_status` (503 with Retry-After: 0, or 401),
                    after `pass_reads` more have been answered normally
    weak_etags      GET answers `W/"..."` where PUT answered `"..."` (nginx with gzip)
    gate            PUTs and DELETEs wait until it is set (to stop undoproxy mid-send)
`X-Test-Drop: after` on an agent's PUT applies it, then drops the connection unanswered.
Every request an undoproxy test makes needs `Authorization: Bearer <token>` when a token is set.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.support.certs import server_context
from tests.support.servers import ThreadedServer

KEPT = ("content-type", "content-language", "cache-control", "content-disposition")


@dataclass
class Obj:
    """One stored object: its bytes and the headers that are part of it (lower-case names)."""

    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def etag(self) -> str:
        digest = hashlib.sha256(self.body + json.dumps(self.headers, sort_keys=True).encode())
        return '"' + digest.hexdigest()[:16] + '"'


@dataclass
class Received:
    """A request as the store saw it."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class StoreState:
    """The store's data, faults and request log."""

    objects: dict[str, Obj] = field(default_factory=dict)
    tickets: dict[str, dict[str, Any]] = field(default_factory=dict)
    token: str | None = None
    next_id: int = 1
    drop_metadata: bool = False
    ignore_writes: bool = False
    weak_etags: bool = False
    fail_reads: int = 0
    read_status: int = 503
    pass_reads: int = 0
    gate: asyncio.Event | None = None
    writes_done: int = 0  # PUTs and DELETEs that finished (applied or not)
    log: list[Received] = field(default_factory=list)
    # CouchDB-like documents: id -> revisions, oldest first (a None body is a deletion)
    docs: dict[str, list[tuple[str, dict[str, Any] | None]]] = field(default_factory=dict)

    def doc(self, doc_id: str) -> dict[str, Any] | None:
        """The current body of a document (with its `_id` and `_rev`), None when deleted."""
        revs = self.docs.get(doc_id)
        if not revs or revs[-1][1] is None:
            return None
        rev, body = revs[-1]
        return {"_id": doc_id, "_rev": rev, **(body or {})}

    def write_doc(self, doc_id: str, body: dict[str, Any] | None) -> str:
        """Store a new revision (None deletes); returns its rev."""
        revs = self.docs.setdefault(doc_id, [])
        clean = (
            None if body is None else {k: v for k, v in body.items() if k not in ("_id", "_rev")}
        )
        rev = f"{len(revs) + 1}-{hashlib.sha256(json.dumps(clean).encode()).hexdigest()[:8]}"
        revs.append((rev, clean))
        return rev

    def put(self, key: str, body: bytes | str, **headers: str) -> None:
        """Seed an object (headers given as content_type=..., x_amz_meta_owner=...)."""
        data = body.encode() if isinstance(body, str) else body
        self.objects[key] = Obj(data, {k.replace("_", "-"): v for k, v in headers.items()})

    def requests(self, method: str) -> list[Received]:
        """The requests of one method received so far."""
        return [r for r in self.log if r.method == method]


STATE: web.AppKey[StoreState] = web.AppKey("store", StoreState)


def _representation(obj: Obj, weak: bool) -> dict[str, str]:
    etag = obj.etag()
    return {**obj.headers, "ETag": f"W/{etag}" if weak else etag}


@web.middleware
async def gatekeeper(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[STATE]
    state.log.append(Received(request.method, request.path_qs, dict(request.headers)))
    if state.token and request.headers.get("Authorization") != f"Bearer {state.token}":
        return web.json_response({"error": "unauthorized"}, status=401)
    if request.method in ("PUT", "DELETE") and state.gate is not None:
        await request.read()  # the whole request has arrived; only the answer waits
        await state.gate.wait()
    if request.method == "GET" and state.pass_reads > 0:
        state.pass_reads -= 1
    elif request.method == "GET" and state.fail_reads > 0:
        state.fail_reads -= 1
        return web.json_response(
            {"error": "unavailable"}, status=state.read_status, headers={"Retry-After": "0"}
        )
    response = await handler(request)
    if request.method == "PUT" and request.headers.get("X-Test-Drop") == "after":
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError
    return response


def _listing(state: StoreState, prefix: str) -> web.Response:
    names = sorted(k[len(prefix) :] for k in state.objects if k.startswith(prefix) and k != prefix)
    items = "".join(f"<li>{html.escape(n)}</li>" for n in names)
    page = f"<html><head><title>Index of /o/{html.escape(prefix)}</title></head><ul>{items}</ul>"
    return web.Response(text=page, content_type="text/html")


async def read(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    key = request.match_info["key"]
    if key.endswith("/") and any(k.startswith(key) for k in state.objects):
        return _listing(state, key)
    obj = state.objects.get(key)
    if obj is None:
        return web.json_response({"error": "no such key"}, status=404)
    return web.Response(body=obj.body, headers=_representation(obj, state.weak_etags))


async def write(request: web.Request) -> web.Response:
    state = request.app[STATE]
    key = request.match_info["key"]
    body = await request.read()
    kept = {
        k.lower(): v
        for k, v in request.headers.items()
        if k.lower() in KEPT or k.lower().startswith("x-amz-meta-")
    }
    if state.drop_metadata:
        kept = {k: v for k, v in kept.items() if k == "content-type"}
    existed = key in state.objects
    obj = Obj(body, kept)
    if not state.ignore_writes:
        state.objects[key] = obj
    state.writes_done += 1
    return web.Response(status=200 if existed else 201, headers={"ETag": obj.etag()})


async def delete(request: web.Request) -> web.Response:
    state = request.app[STATE]
    key = request.match_info["key"]
    doomed = [k for k in state.objects if k == key or (key.endswith("/") and k.startswith(key))]
    if not doomed:
        return web.json_response({"error": "no such key"}, status=404)
    if not state.ignore_writes:
        for k in doomed:
            del state.objects[k]
    state.writes_done += 1
    return web.Response(status=204)


async def create(request: web.Request) -> web.Response:
    state = request.app[STATE]
    name = f"obj-{state.next_id}"
    state.next_id += 1
    key = request.match_info["folder"] + name
    state.objects[key] = Obj(await request.read(), {"content-type": "application/octet-stream"})
    return web.json_response({"id": name}, status=201)


async def mcp(request: web.Request) -> web.Response:
    state = request.app[STATE]
    call = await request.json()
    ticket = f"T-{state.next_id}"
    state.next_id += 1
    state.tickets[ticket] = call.get("params", {})
    result = {"content": [{"type": "text", "text": f"created ticket {ticket}"}]}
    return web.json_response({"jsonrpc": "2.0", "id": call.get("id"), "result": result})


async def jobs(request: web.Request) -> web.Response:
    state = request.app[STATE]
    answer = {"id": f"job-{state.next_id}", "status": "done"}
    state.next_id += 1
    return web.json_response(answer)


async def get_doc(request: web.Request) -> web.Response:
    state = request.app[STATE]
    doc_id = request.match_info["doc"]
    wanted = request.query.get("rev")
    for rev, body in state.docs.get(doc_id, []):
        if rev == wanted and body is not None:
            return web.json_response({"_id": doc_id, "_rev": rev, **body})
    doc = state.doc(doc_id)
    if doc is None or wanted:
        return web.json_response({"error": "not_found"}, status=404)
    return web.json_response(doc, headers={"ETag": f'"{doc["_rev"]}"'})


def _named_rev(request: web.Request, body: dict[str, Any] | None) -> str | None:
    if isinstance(body, dict) and body.get("_rev"):
        return str(body["_rev"])
    return request.query.get("rev") or request.headers.get("If-Match", "").strip('"') or None


async def put_doc(request: web.Request) -> web.Response:
    state = request.app[STATE]
    doc_id = request.match_info["doc"]
    body = await request.json()
    current = state.doc(doc_id)
    if current is not None and _named_rev(request, body) != current["_rev"]:
        return web.json_response({"error": "conflict"}, status=409)
    rev = state.write_doc(doc_id, body)
    return web.json_response(
        {"ok": True, "id": doc_id, "rev": rev}, status=201, headers={"ETag": f'"{rev}"'}
    )


async def delete_doc(request: web.Request) -> web.Response:
    state = request.app[STATE]
    doc_id = request.match_info["doc"]
    current = state.doc(doc_id)
    if current is None:
        return web.json_response({"error": "not_found"}, status=404)
    if _named_rev(request, None) != current["_rev"]:
        return web.json_response({"error": "conflict"}, status=409)
    rev = state.write_doc(doc_id, None)
    return web.json_response({"ok": True, "id": doc_id, "rev": rev})


def create_app(state: StoreState) -> web.Application:
    """The store over `state`."""
    app = web.Application(middlewares=[gatekeeper])
    app[STATE] = state
    app.router.add_post("/o/{folder:(.+/)?}", create)
    app.router.add_get("/o/{key:.+}", read)
    app.router.add_put("/o/{key:.+}", write)
    app.router.add_delete("/o/{key:.+}", delete)
    app.router.add_post("/mcp", mcp)
    app.router.add_post("/rpc", mcp)  # the same JSON-RPC server where no pack recognises it
    app.router.add_post("/v1/jobs", jobs)
    app.router.add_get("/db/{doc}", get_doc)
    app.router.add_put("/db/{doc}", put_doc)
    app.router.add_delete("/db/{doc}", delete_doc)
    return app


def serve(state: StoreState, cert: tuple[Path, Path]) -> ThreadedServer:
    """The store on HTTPS with the test upstream certificate, started."""
    return ThreadedServer(create_app(state), server_context(cert)).start()
