"""`GET /api/events`: server-sent events of step, approval and session changes.

Each event is `event: <kind>` + `data: <JSON summary>`; a comment line is sent on connect and
every HEARTBEAT seconds, so proxies and browsers keep the stream open and a dead client is
noticed. Streams end when the admin app shuts down (otherwise they would delay it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from undoproxy.admin.context import CONTEXT
from undoproxy.events import Event

HEARTBEAT = 15.0
CLOSING: web.AppKey[asyncio.Event] = web.AppKey("sse_closing", asyncio.Event)


def encode(event: Event) -> bytes:
    """One event in the text/event-stream format."""
    return f"event: {event.kind}\ndata: {json.dumps(event.data)}\n\n".encode()


async def events(request: web.Request) -> web.StreamResponse:
    """Stream every event until the client leaves or undoproxy stops."""
    closing = request.app[CLOSING]
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache, no-store",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    async with request.app[CONTEXT].journal.events.subscribe() as queue:
        closer: asyncio.Future[Any] = asyncio.ensure_future(closing.wait())
        getter: asyncio.Future[Any] = asyncio.ensure_future(queue.get())
        try:
            await response.write(b"retry: 2000\n: connected\n\n")
            while not closing.is_set():
                await asyncio.wait(
                    [getter, closer], timeout=HEARTBEAT, return_when=asyncio.FIRST_COMPLETED
                )
                if getter.done():
                    await response.write(encode(getter.result()))
                    getter = asyncio.ensure_future(queue.get())
                elif not closing.is_set():
                    await response.write(b": heartbeat\n\n")
        except ConnectionError:
            pass  # the client went away
        finally:
            for task in (getter, closer):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


async def _close_streams(app: web.Application) -> None:
    app[CLOSING].set()


def setup(app: web.Application) -> None:
    """Register the stream's shutdown signal on the admin app."""
    app[CLOSING] = asyncio.Event()
    app.on_shutdown.append(_close_streams)


ROUTES: list[web.AbstractRouteDef] = [web.get("/api/events", events)]
