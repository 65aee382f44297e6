"""What mitmproxy may run on a connection: HTTP only, with bounded bodies.

mitmproxy picks the protocol of each connection in its `next_layer` hook
(mitmproxy/addons/next_layer.py). Left alone it relays as raw TCP any stream that does not
look like HTTP (its `rawtcp` option: after `CONNECT host:port`, a stream whose first bytes are
not a method, such as `\\r\\nDELETE /x HTTP/1.1`, plain or inside TLS), speaks DNS to port 53,
relays UDP and QUIC, and after a `101 Switching Protocols` that is not a WebSocket relays raw
TCP again: bytes that no rule, hold or journal ever sees. `ProtocolPolicy` runs right after
mitmproxy's own decision and keeps only HTTP:

- a raw TCP, UDP, DNS or QUIC layer is replaced by `Refusal`: the agent gets `400
  undoproxy_not_http` (JSON, HTTP/1.1; inside TLS, encrypted) and the connection is closed;
  nothing of it is relayed, and the refusal is journaled (`on_refused`);
- inside a tunnel, an HTTP/1 stream must begin with a request line (method, target,
  version); anything else is refused the same way (mitmproxy would otherwise parse it as
  HTTP in its own lenient way, or wait forever after a leading empty line);
- every HTTP layer becomes a `BoundedHttpLayer` (proxy/bounded.py), whose streams spool a
  large request body to disk to judge it before a byte is forwarded, refuse one past
  `proxy.max_body` at once (413 `undoproxy_body_too_large`), and stream a large response to
  the agent rather than buffer it whole.

server.py also turns `rawtcp` off, so that a non-WebSocket 101 closes the connection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

from mitmproxy import connection
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import DNSLayer, TCPLayer, UDPLayer
from mitmproxy.proxy.layers.http import HttpLayer, HTTPMode
from mitmproxy.proxy.layers.quic import RawQuicLayer

from undoproxy.proxy import answers
from undoproxy.proxy.bounded import BodyPolicy, bound
from undoproxy.proxy.steps import refused_connection_step
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)

# Layers that move bytes no HTTP hook sees.
BLIND = (TCPLayer, UDPLayer, DNSLayer, RawQuicLayer)
# An HTTP/1 request line (RFC 9112 §3): a method (RFC 9110 §5.6.2 token characters), a space,
# a target, a space, the version; and what a request line can look like while it arrives.
_T = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_REQUEST_LINE = re.compile(_T + rb"+ [^\s]+ HTTP/\d\.\d\r?")
_ARRIVING = re.compile(
    _T
    + rb"*|"
    + _T
    + rb"+ [^\s]*|"
    + _T
    + rb"+ [^\s]+ (?:H(?:T(?:T(?:P(?:/(?:\d(?:\.(?:\d\r?)?)?)?)?)?)?)?)?"
)
MAX_REQUEST_LINE = 16 * 1024  # bytes undoproxy waits for a first line before refusing

OnRefused = Callable[[connection.Client, connection.Server, str], None]


def starts_like_http1(data: bytes) -> bool | None:
    """True when `data` begins with an HTTP/1 request line, False when it cannot be one, None
    when too little has arrived to tell (a request line still arriving)."""
    line, newline, _ = data.partition(b"\n")
    if newline:
        return _REQUEST_LINE.fullmatch(line) is not None
    if len(line) > MAX_REQUEST_LINE or _ARRIVING.fullmatch(line) is None:
        return False
    return None


def describe(data: bytes) -> str:
    """The first bytes of a stream, for a log line or a journal error (never its secrets:
    at most 16 bytes, shown escaped)."""
    shown = repr(data[:16])[2:-1]
    return f"{shown}..." if len(data) > 16 else shown


class Refusal(layer.Layer):
    """Answers the agent `400 undoproxy_not_http` and closes the connection; relays nothing."""

    def __init__(self, context: Context, reason: str) -> None:
        super().__init__(context)
        self.reason = reason
        self.answered = False

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        if self.answered:
            return  # whatever else arrives is dropped
        self.answered = True
        client = self.context.client
        writable = client.state & connection.ConnectionState.CAN_WRITE
        if client.transport_protocol == "tcp" and writable:
            yield commands.SendData(client, answers.not_http(self.reason))
        yield commands.CloseConnection(client)


def _chain(top: layer.Layer) -> Iterator[layer.Layer]:
    """A decided layer and the children it was built with (a TLS layer holds the next)."""
    current: layer.Layer | None = top
    while current is not None:
        yield current
        current = getattr(current, "child_layer", None)


class ProtocolPolicy:
    """mitmproxy addon: HTTP or nothing (see the module docstring). Add it right after
    mitmproxy's NextLayer addon: it amends the decision that one made."""

    def __init__(self, bodies: BodyPolicy, on_refused: OnRefused | None = None) -> None:
        self.bodies = bodies
        self.on_refused = on_refused
        self.refused = 0

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        """Keep mitmproxy's decision when it is HTTP; refuse anything else."""
        try:
            self._decide(nextlayer)
        except Exception:  # fail closed: a decision we could not check relays nothing
            log.exception("could not check the protocol of a connection; refusing it")
            self._refuse(nextlayer, "undoproxy could not tell what protocol this is")

    def _decide(self, nextlayer: layer.NextLayer) -> None:
        chosen = nextlayer.layer
        if chosen is None:
            return  # mitmproxy waits for more bytes before deciding
        chain = list(_chain(chosen))
        blind = next((x for x in chain if isinstance(x, BLIND)), None)
        if blind is not None:
            what = type(blind).__name__.removesuffix("Layer")
            self._refuse(
                nextlayer,
                f"undoproxy relays only HTTP; this connection would have been relayed as "
                f"{what} (first bytes: {describe(nextlayer.data_client())})",
            )
            return
        for x in chain:
            if type(x) is HttpLayer:
                bound(x, self.bodies)
        if (
            isinstance(chosen, HttpLayer)
            and chosen.mode is HTTPMode.transparent
            and nextlayer.context.client.alpn != b"h2"
        ):
            data = nextlayer.data_client()
            verdict = starts_like_http1(data)
            if verdict is None:
                _discard(nextlayer.context, chain)
                nextlayer.layer = None  # a method still arriving: ask again with more bytes
            elif not verdict:
                self._refuse(
                    nextlayer,
                    "undoproxy relays only HTTP: the bytes sent through this tunnel do not "
                    f"begin an HTTP request (first bytes: {describe(data)})",
                )

    def _refuse(self, nextlayer: layer.NextLayer, reason: str) -> None:
        context = nextlayer.context
        if nextlayer.layer is not None:
            _discard(context, list(_chain(nextlayer.layer)))
        nextlayer.layer = Refusal(context, reason)
        self.refused += 1
        target = context.server.address
        log.warning(
            "refused a connection from %s to %s: %s",
            context.client.peername,
            f"{target[0]}:{target[1]}" if target else "?",
            reason,
        )
        if self.on_refused is not None:
            try:
                self.on_refused(context.client, context.server, reason)
            except Exception:
                log.exception("could not journal a refused connection")


def journal_refusals(journal: Journal, session_of: Callable[[connection.Client], str]) -> OnRefused:
    """An `on_refused` that journals each refused connection as a `denied` step of the session
    the connection belongs to (its tunnel's credentials, or its session port)."""

    def refused(client: connection.Client, server: connection.Server, reason: str) -> None:
        session_id = session_of(client)
        journal.ensure_session(session_id)
        host, port = server.address or ("unknown", 0)
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if client.tls_established else "http"
        url = f"{scheme}://{shown}:{port}/"
        journal.record(refused_connection_step(journal, session_id, url, reason))

    return refused


def _discard(context: Context, chain: list[layer.Layer]) -> None:
    """Forget layers that will not run (each one registered itself with the context)."""
    for x in chain:
        if x in context.layers:
            context.layers.remove(x)
