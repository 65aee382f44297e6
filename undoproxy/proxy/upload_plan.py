"""Whether a large upload is judged on its headers and streamed on, or spooled first.

A request body too large to hold cannot be read by the rules either way: they judge it as
unknown (proxy/bodies.py). So when its headers announce its size, proxy/bounded.py asks here,
with `UploadPlanHook`, before a byte of the body is taken, whether the request could be
judged on its headers alone:

- **yes** when the judgment cannot need the body or a person: the rules (with the body
  unknown) would deny it, or let it go without a hold, no budget would refuse it, no repeat
  guard compares bodies, no brokered secret must be searched for in it. The request hooks then run
  at once (rules, snapshot, write-ahead journal), and only after them is the body streamed
  upstream as it arrives, through the tap that keeps the journal's copy: one pass over the
  body, as a plain proxy makes. While those hooks run, nothing is read from the agent
  (`pause_reading` on its connection: mitmproxy would otherwise queue what arrives in
  memory), so memory stays bounded however long a snapshot takes;
- **no** (any reason, an HTTP/2 or HTTP/3 connection: pausing it would stall the agent's
  other requests on it, or an error of ours while deciding): the body is spooled to disk while
  it arrives and judged once it is complete, as before (proxy/bounded.py): a hold then waits
  with the body on disk, not in memory nor on a paused connection.

`UploadPlanner` answers the hook with the `reasons` it is given (each a function saying why
not, or None). It is registered with mitmproxy after FailClosed: its `request` hook runs once
ours have all run, and lets the agent's connection be read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import commands

from undoproxy.proxy.transports import connection_io

log = logging.getLogger(__name__)

PLAN = "undoproxy_upload_plan"  # flow.metadata: STREAM, or why the body is spooled instead
STREAM = "stream"
_PAUSED = "undoproxy_upload_paused"  # flow.metadata: the agent transport paused for it

Reason = Callable[[http.HTTPFlow], str | None]


@dataclass
class UploadPlanHook(commands.StartHook):
    """Decide how a large upload is judged: `flow.metadata[PLAN]` says."""

    flow: http.HTTPFlow
    name = "undoproxy_upload_plan"


def _multiplexed(flow: http.HTTPFlow) -> str | None:
    """HTTP/2 and HTTP/3 carry other streams of the agent's on the same connection: paused
    while this one is judged, they would stall too (its answers wait for the agent's flow
    control updates, which are not read), for as long as a snapshot takes."""
    if flow.request.is_http2 or flow.request.is_http3:
        return "its connection carries other requests, which pausing it would stall"
    return None


def streams(flow: http.HTTPFlow) -> bool:
    """True when the upload is judged on its headers and streamed on."""
    return flow.metadata.get(PLAN) == STREAM


class UploadPlanner:
    """mitmproxy addon: answers `UploadPlanHook` (see the module docstring).

    `proxyserver` is mitmproxy's Proxyserver addon, whose live connections hold the agent's
    transport.
    """

    def __init__(self, proxyserver: Any, reasons: Sequence[Reason]) -> None:
        self.proxyserver = proxyserver
        self.reasons = tuple(reasons)

    async def undoproxy_upload_plan(self, flow: http.HTTPFlow) -> None:
        """Say whether to stream; when streaming, stop reading the agent until judged."""
        try:
            why = _multiplexed(flow) or next(
                (w for w in (reason(flow) for reason in self.reasons) if w), None
            )
        except Exception as exc:  # the safe way is the slow one: spool, judge, send
            log.exception("could not plan an upload; it is spooled and judged whole")
            why = f"undoproxy could not plan it ({type(exc).__name__})"
        if why is not None:
            flow.metadata[PLAN] = why
            return
        flow.metadata[PLAN] = STREAM
        self._pause(flow)

    def request(self, flow: http.HTTPFlow) -> None:
        """Every request hook of ours has run: read the agent's body again."""
        self._resume(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        """The flow failed before its request hook (it will not run)."""
        self._resume(flow)

    def _pause(self, flow: http.HTTPFlow) -> None:
        """Stop reading the agent's connection (mitmproxy would queue what arrives while the
        request hooks run, in memory, without bound)."""
        io = connection_io(self.proxyserver, flow.client_conn.id, flow.client_conn)
        reader = getattr(io, "reader", None)
        transport = getattr(getattr(io, "writer", None), "transport", None)
        if transport is None or not hasattr(transport, "pause_reading"):
            return  # nothing to pause here (not a TCP connection): queued, as mitmproxy does
        transport.pause_reading()
        if isinstance(reader, asyncio.StreamReader) and getattr(reader, "_paused", False):
            # The reader had paused the socket itself (its buffer was full); once drained it
            # would let it go again, under our feet. It is ours to let go now.
            reader._paused = False  # type: ignore[attr-defined]
        flow.metadata[_PAUSED] = transport

    @staticmethod
    def _resume(flow: http.HTTPFlow) -> None:
        transport = flow.metadata.pop(_PAUSED, None)
        if transport is not None and not transport.is_closing():
            transport.resume_reading()
