"""Which bodies flow through live and which are buffered.

Mutations are never streamed upstream: a streamed request body reaches the upstream before the
`request` hook runs, i.e. before a hold, a snapshot or the write-ahead journal entry (a request
body too large to buffer is refused instead: proxy/layers.py). Responses that are server-sent
events (LLM APIs), NDJSON streams (Ollama) or announced as large are streamed to the agent as
they arrive (one that turns out large as it arrives, too: proxy/layers.py). When the matched
rule records something from the response (`record:`), the stream passes through a
`StreamTail` that keeps its first and last bytes (bounded), so the final event's usage can be
recorded once the stream ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from mitmproxy import http

from undoproxy import codings
from undoproxy.codings import StreamDecoder, Undecodable
from undoproxy.limits import STREAM_RESPONSE_OVER
from undoproxy.methods import is_mutation
from undoproxy.proxy.state import state_of
from undoproxy.rules.record import stream_events

STREAMED_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")
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


class Streaming:
    """Sets `stream` on requests and responses."""

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Buffer every mutation so our hooks decide before a byte is forwarded."""
        if is_mutation(flow.request.method):
            flow.request.stream = False

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Stream event streams and large or open-ended bodies through live."""
        response = flow.response
        if response is None:
            return
        content_type = response.headers.get("content-type", "").lower()
        if content_type.startswith(STREAMED_TYPES):
            state = state_of(flow)
            record = getattr(state.rule, "record", None) if state is not None else None
            encoding = response.headers.get("content-encoding", "")
            response.stream = StreamTail(encoding=encoding) if record is not None else True
            return
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > STREAM_RESPONSE_OVER:
            response.stream = True
