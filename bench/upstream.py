"""The benchmarks' upstream: a small REST API with real state, over plain HTTP and TLS at once.

Run as its own process (`python bench/upstream.py CERT KEY`) so that it does not share a
Python interpreter with the load generator or the proxies; it prints one JSON line
`{"http": PORT, "https": PORT}` once both listeners are up, then serves until SIGTERM.

Routes:
- `GET /small`: a ~100-byte JSON document (the pass-through load).
- `POST /items`: stores the JSON body, answers 201 `{"id": N, ...}` with `Location: /items/N`.
- `GET|DELETE /items/{id}`: read or remove one item (DELETE answers 204, or 404 if absent).
- `POST /seed?n=N`: creates N items at once and lists their ids (for the direct DELETE rate).
- `POST /held`: answers 200 (what a held request gets once approved).
- `GET /stats`: how many items exist and how many requests of each kind were served.
- `POST /v1/chat/completions?delay_ms=N`: an OpenAI-style streamed chat completion
  (`text/event-stream`): the first chunk at once, then after N ms the rest, the usage chunk
  and `data: [DONE]`.
- `PUT /sink/{name}`: reads the body and throws it away, answers `{"size": N}` (`GET` of it:
  404, so a snapshot before the PUT finds nothing there).
- `GET /source?size=N`: N bytes, chunked (no Content-Length), in 64 KiB pieces.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class State:
    """The API's data: items by id, the next id, and requests served by kind."""

    items: dict[int, Any] = field(default_factory=dict)
    last_id: int = 0
    served: Counter[str] = field(default_factory=Counter)

    def new_id(self) -> int:
        """A fresh item id (1, 2, ...)."""
        self.last_id += 1
        return self.last_id


STATE: web.AppKey[State] = web.AppKey("state", State)
SMALL = json.dumps({"ok": True, "service": "bench-upstream", "items": [1, 2, 3], "pad": "x" * 40})


async def small(request: web.Request) -> web.Response:
    """The pass-through document."""
    request.app[STATE].served["small"] += 1
    return web.Response(text=SMALL, content_type="application/json")


async def create_item(request: web.Request) -> web.Response:
    """Store a new item; the id is both in the body and in `Location`."""
    body = await request.json()
    item_id = request.app[STATE].new_id()
    request.app[STATE].items[item_id] = body
    request.app[STATE].served["create"] += 1
    return web.json_response(
        {"id": item_id, **body}, status=201, headers={"Location": f"/items/{item_id}"}
    )


def _item_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound() from None


async def get_item(request: web.Request) -> web.Response:
    """One item, or 404."""
    item_id = _item_id(request)
    item = request.app[STATE].items.get(item_id)
    if item is None:
        raise web.HTTPNotFound()
    return web.json_response({"id": item_id, **item})


async def delete_item(request: web.Request) -> web.Response:
    """Remove one item: 204, or 404 when it is not there."""
    request.app[STATE].served["delete"] += 1
    if request.app[STATE].items.pop(_item_id(request), None) is None:
        raise web.HTTPNotFound()
    return web.Response(status=204)


async def seed(request: web.Request) -> web.Response:
    """Create `n` items in one call; answers their ids."""
    n = int(request.query.get("n", "1"))
    ids = [request.app[STATE].new_id() for _ in range(n)]
    for item_id in ids:
        request.app[STATE].items[item_id] = {"name": f"seed-{item_id}"}
    return web.json_response({"ids": ids})


async def held(request: web.Request) -> web.Response:
    """What a held request reaches once a person approves it."""
    await request.read()
    request.app[STATE].served["held"] += 1
    return web.json_response({"ok": True})


def _chunk(n: int, delta: dict[str, Any] | None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": extra.pop("finish", None)}
    doc = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1767225600 + n,
        "model": "gpt-4o-mini",
        "choices": [choice] if delta is not None else [],
        **extra,
    }
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


async def chat_stream(request: web.Request) -> web.StreamResponse:
    """A streamed chat completion whose first chunk comes `delay_ms` before the rest."""
    await request.read()
    request.app[STATE].served["chat"] += 1
    delay = int(request.query.get("delay_ms", "300")) / 1000
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    await response.write(_chunk(0, {"role": "assistant", "content": "The"}))
    await asyncio.sleep(delay)
    for n, word in enumerate((" answer", " is", " 42", "."), start=1):
        await response.write(_chunk(n, {"content": word}))
    await response.write(_chunk(5, {}, finish="stop"))
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    await response.write(_chunk(6, None, usage=usage))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def sink(request: web.Request) -> web.Response:
    """Count an upload's bytes, keep none."""
    size = 0
    while chunk := await request.content.read(1 << 20):
        size += len(chunk)
    request.app[STATE].served["sink"] += 1
    return web.json_response({"size": size})


async def no_sink(request: web.Request) -> web.Response:
    """What a snapshot of a sink reads: nothing there."""
    raise web.HTTPNotFound()


_PIECE = bytes(range(256)) * 256  # 64 KiB


async def source(request: web.Request) -> web.StreamResponse:
    """A download of `size` bytes with no announced length."""
    size = int(request.query["size"])
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = 0
    while sent < size:
        piece = _PIECE[: size - sent]
        await response.write(piece)
        sent += len(piece)
    await response.write_eof()
    request.app[STATE].served["source"] += 1
    return response


async def stats(request: web.Request) -> web.Response:
    """Item count and requests served, for the benchmarks' consistency checks."""
    state = request.app[STATE]
    return web.json_response({"items": len(state.items), "served": state.served})


def create_app() -> web.Application:
    """The upstream application."""
    app = web.Application(client_max_size=1024**2)
    app[STATE] = State()
    app.add_routes(
        [
            web.get("/small", small),
            web.post("/items", create_item),
            web.get("/items/{id}", get_item),
            web.delete("/items/{id}", delete_item),
            web.post("/seed", seed),
            web.post("/held", held),
            web.get("/stats", stats),
            web.post("/v1/chat/completions", chat_stream),
            web.put("/sink/{name}", sink),
            web.get("/sink/{name}", no_sink),
            web.get("/source", source),
        ]
    )
    return app


async def serve(cert: str, key: str) -> None:
    """Listen on 127.0.0.1 (two ephemeral ports), announce them, serve until SIGTERM/SIGINT."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    runner = web.AppRunner(create_app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls, backlog=1024).start()
    http_port, https_port = (addr[1] for addr in runner.addresses)
    print(json.dumps({"http": http_port, "https": https_port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
