"""Sending a spooled request body upstream at the pace the upstream takes it.

A spooled body (proxy/bounded.py) is sent after its request was judged, from its file, one
record (1 MiB) at a time. mitmproxy's layers are sans-IO: they cannot wait for a socket. So
the stream asks for each record with a blocking hook of its own, `SpoolPumpHook`, and the
`SpoolPump` addon answers it: it waits until the upstream connection has taken what was sent
before (no more than `IN_FLIGHT` bytes left in the transport's write buffer; for HTTP/2, the
connection's flow-control backlog under `BACKLOG`), then hands over the next record, read and
opened in a worker thread while the one before was being sent. Memory per upload stays at a
few records, whatever the body's size.

The addon is registered with mitmproxy directly (not through FailClosed): it handles its own
errors by failing the upload (`Pump.failed`), which the stream turns into a failed flow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mitmproxy import connection, http
from mitmproxy.proxy import commands

from undoproxy.proxy.transports import connection_io

log = logging.getLogger(__name__)

PUMP = "undoproxy_pump"  # flow.metadata: the Pump of an upload in progress
BACKLOG = 4 * 1024 * 1024  # bytes an HTTP/2 upstream connection may hold unsent
IN_FLIGHT = 2 * 1024 * 1024  # bytes the upstream's write buffer may hold before we wait
STALL = 300.0  # seconds an upstream may take nothing before the upload fails


@dataclass
class Pump:
    """One spooled body on its way upstream: what the stream and the addon share."""

    pieces: Iterator[bytes]
    server: connection.Server
    backlog: Callable[[], int]  # bytes the upstream connection still holds
    next: bytes | None = None  # the next record, loaded by the addon (b"": the end)
    failed: str | None = None  # why the upload cannot go on
    ahead: asyncio.Future[bytes] | None = None  # the record after it, being read


@dataclass
class SpoolPumpHook(commands.StartHook):
    """Load the next record of a spooled body once the upstream has taken the last one."""

    flow: http.HTTPFlow
    name = "undoproxy_pump"


class SpoolPump:
    """mitmproxy addon: answers `SpoolPumpHook` (see the module docstring).

    `proxyserver` is mitmproxy's Proxyserver addon, whose live connections hold the
    transports whose write buffers are drained here.
    """

    def __init__(self, proxyserver: Any) -> None:
        self.proxyserver = proxyserver

    async def undoproxy_pump(self, flow: http.HTTPFlow) -> None:
        """Wait for the upstream, then load the next record (or say why not)."""
        pump = flow.metadata.get(PUMP)
        if not isinstance(pump, Pump):
            return
        try:
            reading = pump.ahead or _read(pump)
            await self._taken(flow, pump)
            pump.next = await reading
            pump.ahead = _read(pump) if pump.next else None
        except Exception as exc:
            pump.failed = f"{type(exc).__name__}: {exc}"

    async def _taken(self, flow: http.HTTPFlow, pump: Pump) -> None:
        """Return once the upstream connection has taken what it was given."""
        io = connection_io(self.proxyserver, flow.client_conn.id, pump.server)
        writer = getattr(io, "writer", None)
        if writer is not None and not writer.is_closing():
            size = getattr(writer.transport, "get_write_buffer_size", None)
            if size is None or size() > IN_FLIGHT:
                await writer.drain()
        waited_since = time.monotonic()
        while pump.backlog() > BACKLOG:
            if time.monotonic() - waited_since > STALL:
                raise TimeoutError(f"the upstream took nothing for {STALL:.0f} s")
            await asyncio.sleep(0.005)


def _read(pump: Pump) -> asyncio.Future[bytes]:
    """The next record, read and opened in a worker thread (b"" at the end). An upload that
    stops before taking it leaves it unread: its error, if any, is nobody's to report."""
    reading = asyncio.ensure_future(asyncio.to_thread(next, pump.pieces, b""))
    reading.add_done_callback(lambda done: done.cancelled() or done.exception())
    return reading
