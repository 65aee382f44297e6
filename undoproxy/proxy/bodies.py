"""Bodies as undoproxy judges them: content codings decoded within limits, off the event loop.

Every place that reads what a body says (the rules, `record:`, the approval card, the
compensators, `fails_when`) reads it through `request_body` / `response_body` here, never
through mitmproxy's `get_content()`: that one decodes any Python codec a header names,
without a cap, on the event loop (see undoproxy/codings.py). The `Bodies` addon decodes each
body once, in a worker thread when it is large and encoded; a body that cannot be decoded is
kept as sent with its problem, which the rules treat as ambiguous. The journal stores bodies
as they were sent.

A request body too large to hold (spooled to disk while it arrived, or judged on its headers
and streamed on: proxy/bounded.py) is not read at all: it is judged as a body whose content is
unknown (`problem` says why), which the rules treat as ambiguous; `body_copy` gives its first
bytes, length and SHA-256 once they are known.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator

from mitmproxy import http

from undoproxy import codings
from undoproxy.bodyfiles import BodyCopy, Spool
from undoproxy.codings import Decoded
from undoproxy.limits import DECODE_IN_THREAD_OVER
from undoproxy.proxy.state import FlowState, state_of

SPOOLED = "undoproxy_spooled"  # flow.metadata: the BodyCopy of a spooled request body
SPOOL = "undoproxy_spool"  # flow.metadata: the Spool itself, while the request hooks run
# flow.metadata: a request judged on its headers, before its body (a gRPC stream, a large
# upload: proxy/bounded.py): "planning" while undoproxy decides whether it may be (an upload),
# "judging" while the request hooks run, then "judged"
JUDGED_EARLY = "undoproxy_judged_early"
UNREAD = "undoproxy_unread"  # flow.metadata: why the body of such a request is not read


def spooled(flow: http.HTTPFlow) -> BodyCopy | None:
    """The copy of a request body that was spooled instead of buffered (None: buffered)."""
    value = flow.metadata.get(SPOOLED)
    return value if isinstance(value, BodyCopy) else None


def spooled_pieces(flow: http.HTTPFlow, overlap: int) -> Iterator[bytes]:
    """A spooled body again, read from its file a record at a time, each piece beginning
    with the last `overlap` bytes of the one before (so that a needle of up to `overlap + 1`
    bytes is found whole in some piece); nothing for a body that was not spooled. Reads the
    disk: call it off the event loop."""
    spool = flow.metadata.get(SPOOL)
    if not isinstance(spool, Spool):
        return
    tail = b""
    for piece in spool.chunks():
        yield tail + piece
        tail = piece[-overlap:] if overlap else b""


def replace_spooled_head(flow: http.HTTPFlow, head: bytes) -> None:
    """Put another head in a spooled body's copy (what the journal keeps of it): one with
    secrets cut out (proxy/brokering.py)."""
    copy = spooled(flow)
    if copy is not None:
        flow.metadata[SPOOLED] = BodyCopy(head, copy.length, copy.sha256)


def body_copy(flow: http.HTTPFlow, keep: int) -> BodyCopy:
    """What the journal keeps of the request body: its first `keep` bytes, length, SHA-256
    (an empty body has no SHA-256: "")."""
    copy = spooled(flow)
    if copy is not None:
        return BodyCopy(copy.head[:keep], copy.length, copy.sha256)
    if flow.metadata.get(JUDGED_EARLY):  # not arrived yet: what its headers announce
        return BodyCopy(b"", announced_length(flow.request) or 0, "")
    body = flow.request.raw_content or b""
    return BodyCopy(body[:keep], len(body), hashlib.sha256(body).hexdigest() if body else "")


def body_identity(flow: http.HTTPFlow) -> bytes:
    """Bytes equal for two requests exactly when their bodies are (the body itself, or for a
    spooled one its length and SHA-256): what approvals and repeat guards compare."""
    copy = spooled(flow)
    if copy is not None:
        return f"spooled:{copy.length}:{copy.sha256}".encode()
    if flow.metadata.get(JUDGED_EARLY):  # not arrived yet: equal to no other
        return f"unread:{flow.id}".encode()
    return flow.request.raw_content or b""


def announced_length(request: http.Request) -> int | None:
    """The body size a request's headers announce (Content-Length), or None."""
    value = request.headers.get("content-length")
    if value is None or not value.strip().isdigit():
        return None  # chunked, or invalid (mitmproxy refuses that itself)
    return int(value.strip())


def codings_of(message: http.Message) -> tuple[str, ...]:
    """The content codings of a request or response, in the order they were applied."""
    return codings.parse(message.headers.get_all("content-encoding"))


async def decode_off_loop(raw: bytes, applied: tuple[str, ...]) -> Decoded:
    """`codings.decode`, in a worker thread when there is much to decode."""
    if applied and len(raw) > DECODE_IN_THREAD_OVER:
        return await asyncio.to_thread(codings.decode, raw, applied)
    return codings.decode(raw, applied)


def request_body(flow: http.HTTPFlow, state: FlowState | None = None) -> Decoded:
    """The request body as judged: decoded once (by the addon, or here if it did not run)."""
    state = state or state_of(flow)
    if state is not None and state.request_body is not None:
        return state.request_body
    decoded = _unread(flow) or codings.decode(
        flow.request.raw_content or b"", codings_of(flow.request)
    )
    if state is not None:
        state.request_body = decoded
    return decoded


def response_body(flow: http.HTTPFlow, state: FlowState | None = None) -> Decoded | None:
    """The buffered response's body as judged; None when there is none (streamed)."""
    response = flow.response
    if response is None or response.stream:
        return None
    state = state or state_of(flow)
    if state is not None and state.response_body is not None:
        return state.response_body
    decoded = codings.decode(response.raw_content or b"", codings_of(response))
    if state is not None:
        state.response_body = decoded
    return decoded


def _unread(flow: http.HTTPFlow) -> Decoded | None:
    """How a spooled body, or one judged before it arrives, is judged: unknown content, with
    the reason."""
    if flow.metadata.get(JUDGED_EARLY):
        return Decoded(b"", str(flow.metadata.get(UNREAD, "the body is judged before it arrives")))
    copy = spooled(flow)
    if copy is None:
        return None
    return Decoded(
        b"",
        f"the body is {copy.length} bytes, too large to hold while it is judged; it was kept "
        "on disk, unread",
    )


def readable(decoded: Decoded | None) -> bytes | None:
    """What a decoded body says, or None when that is unknown (streamed, undecodable)."""
    if decoded is None or decoded.problem is not None:
        return None
    return decoded.body


class Bodies:
    """Decodes each request and buffered response body once, before anything reads it."""

    async def request(self, flow: http.HTTPFlow) -> None:
        """Decode the request body (the gate's rules read it next)."""
        state = state_of(flow)
        if state is None or flow.response is not None or state.request_body is not None:
            return
        state.request_body = _unread(flow) or await decode_off_loop(
            flow.request.raw_content or b"", codings_of(flow.request)
        )

    async def response(self, flow: http.HTTPFlow) -> None:
        """Decode a large encoded response body in a thread, if something will read it."""
        state = state_of(flow)
        response = flow.response
        if state is None or state.answered or response is None or response.stream:
            return
        if state.response_body is not None or not (state.is_mutation or state.rule is not None):
            return  # a read no rule matched: nothing reads its body (decoded lazily if so)
        applied = codings_of(response)
        raw = response.raw_content or b""
        if applied and len(raw) > DECODE_IN_THREAD_OVER:
            state.response_body = await decode_off_loop(raw, applied)
