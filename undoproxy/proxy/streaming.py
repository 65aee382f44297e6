"""Which bodies flow through live and which are buffered, and what the journal keeps of a
live one.

Mutations are never streamed upstream: a streamed request body reaches the upstream before the
`request` hook runs, i.e. before a hold, a snapshot or the write-ahead journal entry (a request
body too large to buffer is spooled to disk and judged first: proxy/bounded.py). Responses
that are server-sent events (LLM APIs, MCP), NDJSON streams (Ollama), gRPC, or announced as
large are streamed to the agent as they arrive (one that turns out large as it arrives, too:
proxy/bounded.py). Every streamed response passes through a `BodyTap`, which hands each chunk
on unchanged and keeps the journal's bounded copy of it: its first bytes (as much as a
buffered body keeps), its length and its SHA-256, written with the step once the stream ends.
When the matched rule records something from the response (`record:`), the tap also feeds a
`StreamTail` that keeps the stream's first and last bytes (bounded), so that the final
event's usage can be recorded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from mitmproxy import http

from undoproxy import codings
from undoproxy.bodyfiles import BodyCopy
from undoproxy.codings import StreamDecoder, Undecodable
from undoproxy.limits import MUTATION_BODY_LIMIT, READ_BODY_LIMIT, STREAM_RESPONSE_OVER
from undoproxy.offload import StreamDigest
from undoproxy.proxy.state import state_of
from undoproxy.rules.record import stream_events

STREAMED_TYPES = (
    "text/event-stream",
    "application/x-ndjson",
    "application/jsonl",
    "application/grpc",  # gRPC and its +proto, +json variants: streams of messages
)
KEEP_BYTES = 64 * 1024  # of a stream's head and of its tail, for `record:`


class StreamTail:
    """A mitmproxy stream function: passes every chunk on unchanged, keeps head and tail.

    Memory stays bounded whatever the stream's length: at most KEEP_BYTES of its beginning
    and KEEP_BYTES (plus one chunk) of its end.
    """

    def __init__(self, keep: int = KEEP_BYTES, encoding: str = "") -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.trimmed = False  # the tail lost its beginning: its first line may be cut
        # The stream function sees the bytes as sent: a compressed stream is decoded here,
        # in bounded pieces, so a small chunk cannot inflate into a large one.
        self.decode = _decoder(encoding, keep)

    def __call__(self, chunk: bytes) -> bytes:
        if self.decode is not None and chunk:
            try:
                for piece in self.decode(chunk):
                    self._keep(piece)
            except Exception:  # corrupt data or a bomb: stop keeping, pass on
                self.decode = None
                self.head.clear()
                self.tail.clear()
        return chunk

    def _keep(self, chunk: bytes) -> None:
        if len(self.head) < self.keep:
            room = self.keep - len(self.head)
            self.head += chunk[:room]
            rest = chunk[room:]
        else:
            rest = chunk
        if len(rest) > self.keep:  # a piece bigger than all we keep: its end is enough
            rest = rest[-self.keep :]
            self.trimmed = True
        if rest:
            self.tail.append(rest)
            self.tail_size += len(rest)
            while self.tail_size - len(self.tail[0]) >= self.keep:
                self.tail_size -= len(self.tail.popleft())
                self.trimmed = True

    def events(self) -> list[Any]:
        """The JSON events of the kept head and tail, in stream order."""
        tail = b"".join(self.tail)
        if not self.trimmed:
            return stream_events(bytes(self.head) + tail)
        # The head may end, and the tail begin, inside an event: each is read on its own,
        # the tail from its first complete line.
        cut = tail.find(b"\n")
        return stream_events(bytes(self.head)) + stream_events(tail[cut + 1 :] if cut >= 0 else b"")


def _decoder(encoding: str, limit: int) -> Callable[[bytes], Iterator[bytes]] | None:
    """A function decoding one chunk of a `Content-Encoding` stream into pieces, or None when
    the encoding is not an HTTP content coding (undoproxy/codings.py: no size limit on a
    stream passing through, but a bomb's ratio stops it)."""
    try:
        decoder = StreamDecoder(codings.parse([encoding]), limit=None, piece=limit)
    except Undecodable:
        return None
    return decoder.feed


class BodyTap:
    """A mitmproxy stream function: passes every chunk on unchanged and keeps the journal's
    copy of the body (its first `keep` bytes, its length, its SHA-256), and feeds `tail`
    (a StreamTail, for `record:`) when there is one. mitmproxy calls it with b"" once the
    body has ended: `ended` tells a complete stream from one cut short."""

    def __init__(self, keep: int, tail: StreamTail | None = None) -> None:
        self.keep = keep
        self.tail = tail
        self.head = bytearray()
        self.length = 0
        self.ended = False
        self._digest = StreamDigest()  # large pieces hashed beside the event loop

    def __call__(self, chunk: bytes) -> bytes:
        if not chunk:
            self.ended = True
            return chunk
        self.length += len(chunk)
        self._digest.update(chunk)
        if len(self.head) < self.keep:
            self.head += chunk[: self.keep - len(self.head)]
        if self.tail is not None:
            self.tail(chunk)
        return chunk

    def copy(self) -> BodyCopy:
        """What the journal keeps of what passed so far."""
        return BodyCopy(bytes(self.head), self.length, self._digest.hexdigest())


def tap_for(flow: http.HTTPFlow) -> BodyTap:
    """The tap a response of this flow streams through: it keeps as much as the journal keeps
    of a buffered body of the same flow, and the head and tail `record:` needs."""
    state = state_of(flow)
    mutation = state is not None and state.is_mutation
    record = getattr(state.rule, "record", None) if state is not None else None
    tail = None
    if record is not None and flow.response is not None:
        tail = StreamTail(encoding=flow.response.headers.get("content-encoding", ""))
    keep = MUTATION_BODY_LIMIT if mutation else READ_BODY_LIMIT
    if state is not None and state.response_keep is not None:
        keep = max(keep, state.response_keep)
    return BodyTap(keep, tail)


def is_grpc(message: http.Message) -> bool:
    """A gRPC request or response (`application/grpc`, `+proto`, `+json`, ...)."""
    content_type: str = message.headers.get("content-type", "")
    return content_type.strip().lower().startswith("application/grpc")


def is_streamed_type(content_type: str) -> bool:
    """True for media types that are streams of messages, passed on as they arrive."""
    return content_type.strip().lower().startswith(STREAMED_TYPES)


class Streaming:
    """Sets `stream` on requests and responses."""

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Buffer (or spool) every request body, so our hooks decide before a byte of it is
        forwarded (a gRPC stream, judged on its headers, is streamed on by proxy/bounded.py)."""
        if not isinstance(flow.request.stream, BodyTap):
            flow.request.stream = False

    def response(self, flow: http.HTTPFlow) -> None:
        """The whole response has passed (an answer of headers alone never calls the tap)."""
        if flow.response is not None and isinstance(flow.response.stream, BodyTap):
            flow.response.stream.ended = True

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Stream event streams and large or open-ended bodies through live, tapped."""
        response = flow.response
        if response is None or response.stream:
            return
        if is_streamed_type(response.headers.get("content-type", "")):
            response.stream = tap_for(flow)
            return
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > STREAM_RESPONSE_OVER:
            response.stream = tap_for(flow)
