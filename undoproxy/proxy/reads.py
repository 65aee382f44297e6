"""Reading connections in larger pieces than mitmproxy's 64 KiB.

mitmproxy's connection handler reads each connection with `reader.read(65535)`, and every
piece read travels through its layers as one event (TLS, HTTP, the stream, undoproxy's tap):
a 500 MB download is about 8,000 events, and each costs the event loop about the same
Python work whatever its size. `LargeReads` lets a read take whatever has arrived, up to
`READ`, and lets asyncio's reader gather up to `BUFFER` before it stops reading the socket:
while the event loop is busy with one piece, the next ones gather into one. Memory: at most
about 2 x BUFFER + READ per connection that sends faster than undoproxy forwards
(mitmproxy's own backpressure, waiting for its writes to drain before the next read, still
applies). Connections that are not asyncio streams (UDP, WireGuard) are left as they are.

The addon is registered with mitmproxy directly (not through FailClosed): it decides nothing
about a flow, and a connection it could not widen is read as mitmproxy reads it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mitmproxy import connection
from mitmproxy.proxy import server_hooks

from undoproxy.proxy.transports import connection_io

log = logging.getLogger(__name__)

READ = 256 * 1024  # the most one read takes (asyncio's transports receive 256 KiB at a time)
BUFFER = 512 * 1024  # what asyncio's reader may gather before it pauses the socket


class _WideReader(asyncio.StreamReader):
    """An asyncio reader whose reads take up to READ, whatever smaller size is asked."""

    async def read(self, n: int = -1) -> bytes:
        return await super().read(max(n, READ) if n > 0 else n)


class LargeReads:
    """mitmproxy addon: widens the reads of each agent and upstream connection.

    `proxyserver` is mitmproxy's Proxyserver addon, whose live connections hold the readers.
    """

    def __init__(self, proxyserver: Any) -> None:
        self.proxyserver = proxyserver

    def client_connected(self, client: connection.Client) -> None:
        """An agent connected."""
        self._widen(client.id, client)

    def server_connected(self, data: server_hooks.ServerConnectionHookData) -> None:
        """undoproxy connected to an upstream for an agent."""
        self._widen(data.client.id, data.server)

    def _widen(self, key: str, conn: connection.Connection) -> None:
        try:
            io = connection_io(self.proxyserver, key, conn)
            reader = getattr(io, "reader", None)
            if type(reader) is asyncio.StreamReader:
                reader.__class__ = _WideReader
                reader._limit = max(reader._limit, BUFFER)  # type: ignore[attr-defined]
        except Exception:  # read as mitmproxy reads it: slower, nothing lost
            log.exception("could not widen the reads of a connection")
