"""A real HTTP/2 upstream: Hypercorn over TLS (ALPN h2 and http/1.1), in its own thread.

POST|PUT /count          answers {"size", "sha256", "http_version", "content_length"}:
                         what arrived, hashed, and how (the protocol it came by)
GET /stream?pieces=N     N pieces of 64 KiB, with no Content-Length (HTTP/1.1: chunked;
                         HTTP/2: the end of the stream ends it)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config

Scope = dict[str, Any]


async def app(scope: Scope, receive: Any, send: Any) -> None:
    """The ASGI application (see the module docstring)."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        pieces = int(dict(_query(scope)).get("pieces", "4"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})  # fmt: skip
        for i in range(pieces):
            await send({"type": "http.response.body", "body": bytes([65 + i % 26]) * 65536,
                        "more_body": True})  # fmt: skip
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    digest, size = hashlib.sha256(), 0
    while True:
        message = await receive()
        body = message.get("body", b"")
        digest.update(body)
        size += len(body)
        if not message.get("more_body"):
            break
    headers = dict(scope["headers"])
    answer = {
        "size": size,
        "sha256": digest.hexdigest(),
        "http_version": scope["http_version"],
        "content_length": headers.get(b"content-length", b"").decode() or None,
    }
    data = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})


def _query(scope: Scope) -> list[tuple[str, str]]:
    raw = scope.get("query_string", b"").decode()
    return [(k, v) for k, _, v in (p.partition("=") for p in raw.split("&") if p)]


class H2Server:
    """Hypercorn on 127.0.0.1 (a port of its own), TLS with `cert`, until stop()."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.set_inheritable(True)
        self.port = self._sock.getsockname()[1]
        self.config = Config()
        self.config.bind = [f"fd://{self._sock.fileno()}"]
        self.config.certfile, self.config.keyfile = str(cert[0]), str(cert[1])
        self.config.alpn_protocols = ["h2", "http/1.1"]
        self.config.h2_max_inbound_frame_size = 1 << 20
        self.config.accesslog = None
        self.config.loglevel = "WARNING"
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> H2Server:
        self._thread.start()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(serve(app, self.config, shutdown_trigger=self._stop.wait))

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        with contextlib.suppress(OSError):  # Hypercorn closed it already
            self._sock.close()
