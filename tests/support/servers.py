"""Real servers on 127.0.0.1:0, each in its own thread, so that blocking clients (requests,
curl in a subprocess) can call them from a test: aiohttp apps (ThreadedServer, in their own
loop) and WSGI apps over TLS (TlsWsgiServer, on cheroot: WsgiDAV, Radicale)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from aiohttp import web
from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter


class ThreadedServer:
    """Runs `app` on an ephemeral port in a daemon thread until stop()."""

    def __init__(
        self,
        app: web.Application,
        ssl_context: ssl.SSLContext | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.app = app
        self.host = host
        self.ssl_context = ssl_context
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        """http(s)://127.0.0.1:PORT"""
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> ThreadedServer:
        """Start and wait until listening."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def call(self, fn: Callable[[], object]) -> None:
        """Run fn in the server's loop (to change its state safely)."""
        self._loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        """Stop the server and its thread."""
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class TlsWsgiServer:
    """Serves the WSGI `app` over TLS (`cert`: certificate and key files) on an ephemeral port,
    in a daemon thread, from start() until stop()."""

    def __init__(self, app: Any, cert: tuple[Path, Path]) -> None:
        self.cert = cert
        self._server = wsgi.Server(("127.0.0.1", 0), app)
        self._server.ssl_adapter = BuiltinSSLAdapter(str(cert[0]), str(cert[1]))
        self._thread = threading.Thread(target=self._server.serve, daemon=True)

    def start(self) -> Self:
        """Bind, then serve in the thread."""
        self._server.prepare()
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        """https://127.0.0.1:PORT"""
        return f"https://127.0.0.1:{self._server.bind_addr[1]}"

    def stop(self) -> None:
        """Stop serving and end the thread."""
        self._server.stop()
        self._thread.join(10)
