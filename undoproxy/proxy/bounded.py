"""HTTP streams that hold no body without bound, and judge every request before forwarding it.

mitmproxy buffers a request body whole before its `request` hook, or (`stream_large_bodies`)
streams it upstream before that hook runs, i.e. before undoproxy has judged, held,
snapshotted or journaled it. `BoundedStream` does neither:

- a request body up to `BodyPolicy.spool_over` is buffered, as mitmproxy does;
- a larger one whose size its headers announce, over HTTP/1, when nothing in its judgment
  needs the body or a person (proxy/upload_plan.py says), is **judged on its headers**: the
  request hooks run before a byte of it is taken (the rules see it as too large to read:
  ambiguous), and only then is it streamed upstream as it arrives, through a tap that keeps
  the journal's copy (its first bytes, length, SHA-256): one pass over the body. Refused
  there, the agent is answered at once (the rest of its body, if it is sending it, is read
  and dropped, so the connection ends cleanly);
- any other larger one is **spooled**: written to an encrypted, unlinked file as it arrives
  (undoproxy/bodyfiles.py), so that memory stays bounded. Once it has all arrived, the
  `request` hook runs as for any other request (the rules see the body as too large to read:
  ambiguous, so a hold or deny rule that could match it, does); only then, if the request
  may go, is it **pumped** from the file to the upstream, one record at a time, each after
  the upstream connection has taken the one before (`SpoolPumpHook`, proxy/uploads.py);
- a body past `BodyPolicy.max_body` is refused with 413 `undoproxy_body_too_large` as soon
  as that is known (announced, or as it arrives): no more of it is read, nothing forwarded;
- a response is streamed to the agent once more than `STREAM_RESPONSE_OVER` of it has
  arrived, through the tap that keeps its bounded copy (proxy/streaming.py);
- a gRPC request (`application/grpc...`) is a stream of messages that may never end while the
  call lasts (a bidirectional call waits for answers before it sends more): it is judged on
  its headers (the method is its path; protobuf messages are nothing rules can read, so its
  body counts as unknown), held, refused or written ahead there, and only then streamed
  upstream through a tap that keeps the journal's copy. A refusal is answered at once.

mitmproxy's own `body_size_limit` and `stream_large_bodies` cannot do this: they apply to both
directions, answer in HTML, and the latter forwards before the hooks have judged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from mitmproxy import flow as mflow
from mitmproxy import http
from mitmproxy.net.http import status_codes
from mitmproxy.proxy import events, layer
from mitmproxy.proxy.layers.http import HttpLayer, HttpStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    RequestProtocolError,
    RequestTrailers,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.proxy.layers.http._hooks import (
    HttpErrorHook,
    HttpRequestHeadersHook,
    HttpRequestHook,
    HttpResponseHeadersHook,
)

from undoproxy.bodyfiles import Spool
from undoproxy.limits import (
    MAX_REQUEST_BODY,
    MUTATION_BODY_LIMIT,
    SPOOL_REQUEST_OVER,
    STREAM_RESPONSE_OVER,
)
from undoproxy.proxy import answers
from undoproxy.proxy.bodies import JUDGED_EARLY, SPOOL, SPOOLED, UNREAD, announced_length
from undoproxy.proxy.state import state_of
from undoproxy.proxy.streaming import BodyTap, is_grpc, tap_for
from undoproxy.proxy.upload_plan import UploadPlanHook, streams
from undoproxy.proxy.uploads import PUMP, Pump, SpoolPumpHook

log = logging.getLogger(__name__)
GRPC_UNREAD = (
    "a gRPC request is a stream of messages: it is judged by its method, before its messages arrive"
)


@dataclass(frozen=True)
class BodyPolicy:
    """Where request bodies are spooled, and how large they may be."""

    spool_dir: Path
    max_body: int = MAX_REQUEST_BODY
    spool_over: int = SPOOL_REQUEST_OVER


class BoundedStream(HttpStream):
    """An HTTP stream that never buffers a body without bound (see the module docstring)."""

    policy: BodyPolicy
    spool: Spool | None = None

    # --- request bodies ---------------------------------------------------------------------

    def check_body_size(self, request: bool) -> layer.CommandGenerator[bool]:
        if request:
            return (yield from self._bound_request())
        yield from self._bound_response()
        return False

    def _bound_request(self) -> layer.CommandGenerator[bool]:
        early = not self.request_body_buf  # announced, before the requestheaders hook ran
        if early and self.spool is None and is_grpc(self.flow.request):
            yield from self._judge_early(GRPC_UNREAD)
            return True
        size = announced_length(self.flow.request) if early else len(self.request_body_buf)
        if size is not None and size > self.policy.max_body:
            yield from self._refuse_request(size, early=early)
            return True
        if early and size is not None and size > self.policy.spool_over:
            yield from self._plan_upload(size)
            return True
        spool = not early and size is not None and size > self.policy.spool_over
        if spool and not self.flow.request.stream:
            try:
                self._start_spool()
            except OSError as exc:
                yield from self._cannot_spool(exc)
                return True
        return False

    def _plan_upload(self, size: int) -> layer.CommandGenerator[None]:
        """A body announced too large to hold: judged on its headers and streamed on, when
        nothing in its judgment needs the body or a person (proxy/upload_plan.py); spooled
        and judged whole otherwise."""
        flow = self.flow
        flow.metadata[JUDGED_EARLY] = "planning"
        flow.metadata[UNREAD] = (
            f"the body is {size} bytes, too large to hold while it is judged: it is judged "
            "unread, before it arrives"
        )
        yield HttpRequestHeadersHook(flow)
        if (yield from self.check_killed(True)):
            return
        if flow.response is None:
            yield UploadPlanHook(flow)
        if flow.response is not None or streams(flow):  # answered already (407...): unread
            yield from self._judged_on_headers()
            return
        # Spooled as it arrives: from here on as mitmproxy goes on after the requestheaders
        # hook, the body judged once it is all on disk.
        del flow.metadata[JUDGED_EARLY]
        flow.metadata.pop(UNREAD, None)
        state = state_of(flow)
        if state is not None:
            state.request_body = state.view = None
        yield from self._send_continue()
        self.client_state = self.state_consume_request_body
        self.server_state = self.state_wait_for_response_headers

    def _send_continue(self) -> layer.CommandGenerator[None]:
        """`Expect: 100-continue`: tell the agent to send its body (as mitmproxy does)."""
        if self.flow.request.headers.get("expect", "").lower() == "100-continue":
            answer = http.Response.make(100)
            answer.headers.clear()
            yield SendHttp(ResponseHeaders(self.stream_id, answer), self.context.client)
            self.flow.request.headers.pop("expect")

    def _judge_early(self, unread: str) -> layer.CommandGenerator[None]:
        """Run the request hooks now, on the headers; then answer, or stream the body on."""
        self.flow.metadata[JUDGED_EARLY] = "judging"
        self.flow.metadata[UNREAD] = unread
        yield HttpRequestHeadersHook(self.flow)
        if (yield from self.check_killed(True)):
            return
        yield from self._judged_on_headers()

    def _judged_on_headers(self) -> layer.CommandGenerator[None]:
        flow = self.flow
        flow.metadata[JUDGED_EARLY] = "judging"
        yield HttpRequestHook(flow)  # also when refused already (407...): it is journaled there
        if (yield from self.check_killed(True)):
            return
        flow.metadata[JUDGED_EARLY] = "judged"  # the request hook at the body's end is not ours
        self.server_state = self.state_wait_for_response_headers
        if flow.response is not None:  # refused, denied after a hold, failed closed
            yield from self._answer_unread()
            return
        yield from self._send_continue()
        flow.request.stream = BodyTap(MUTATION_BODY_LIMIT)
        yield from self.start_request_stream()

    def _answer_unread(self) -> layer.CommandGenerator[None]:
        """Answer a request judged before its body arrived; nothing of it is forwarded."""
        flow = self.flow
        assert flow.response is not None
        flow.response.timestamp_start = time.time()
        sending = not flow.request.is_http2 and "expect" not in flow.request.headers
        if sending:
            # HTTP/1 and the agent is sending its body: it gets the answer now, and the
            # rest of its body is read and dropped, so that the connection ends cleanly
            # (closed with unread data, it would be reset, the answer maybe lost).
            self.client_state = self.state_discard_request_body
            yield HttpResponseHeadersHook(flow)
            yield from self.send_response()
            return
        yield HttpResponseHeadersHook(flow)
        yield from self.send_response()
        self.client_state = self.server_state = self.state_errored
        if flow.request.is_http2:
            yield SendHttp(ResponseEndOfMessage(self.stream_id), self.context.client)
        else:  # it waits for a 100 Continue that will not come: closing ends its request
            yield SendHttp(
                ResponseProtocolError(self.stream_id, "refused", status_codes.NO_RESPONSE),
                self.context.client,
            )
        flow.live = False

    def state_discard_request_body(self, event: events.Event) -> layer.CommandGenerator[None]:
        """Answered before its body arrived: what still arrives is read and dropped."""
        if isinstance(event, RequestEndOfMessage):
            self.client_state = self.state_done
            if self.server_state == self.state_done:
                yield from self.flow_done()

    def _start_spool(self) -> None:
        """Move what arrived to a spool file; the rest goes there as it comes."""
        self.spool = Spool(self.policy.spool_dir, keep=MUTATION_BODY_LIMIT)
        self.client_state = self.state_spool_request_body
        self.spool.write(bytes(self.request_body_buf))
        self.request_body_buf.clear()

    def _cannot_spool(self, exc: OSError) -> layer.CommandGenerator[None]:
        """The disk refused the spool (full, read-only): 507, nothing forwarded."""
        self._close_spool()
        detail = f"{type(exc).__name__}: {exc.strerror or exc}"
        log.error("could not spool a request body to %s: %s", self.policy.spool_dir, detail)
        yield from self._refuse(answers.cannot_spool(detail), early=False)

    def state_spool_request_body(self, event: events.Event) -> layer.CommandGenerator[None]:
        """Like mitmproxy's state_consume_request_body, into the spool file."""
        spool = self.spool
        assert spool is not None
        if isinstance(event, RequestData):
            if spool.length + len(event.data) > self.policy.max_body:
                self._close_spool()
                yield from self._refuse_request(spool.length + len(event.data), early=False)
                return
            try:
                spool.write(event.data)
            except OSError as exc:
                yield from self._cannot_spool(exc)
        elif isinstance(event, RequestTrailers):
            self.flow.request.trailers = event.trailers
        elif isinstance(event, RequestEndOfMessage):
            yield from self._spooled_request_complete(spool)

    def _spooled_request_complete(self, spool: Spool) -> layer.CommandGenerator[None]:
        flow = self.flow
        flow.request.timestamp_end = time.time()
        flow.request.data.content = b""  # the body is in the spool; its copy is on the flow
        try:
            flow.metadata[SPOOLED] = spool.finish()
        except OSError as exc:
            yield from self._cannot_spool(exc)
            return
        self.client_state = self.state_pumping
        flow.metadata[SPOOL] = spool  # readable again while the request hooks run
        yield HttpRequestHook(flow)
        flow.metadata.pop(SPOOL, None)
        if (yield from self.check_killed(True)):
            self._close_spool()
            return
        if flow.response:  # refused, held and denied, or failed closed: nothing forwarded
            self._close_spool()
            self.client_state = self.state_done
            flow.response.timestamp_start = time.time()
            yield HttpResponseHeadersHook(flow)
            if (yield from self.check_killed(True)):
                return
            yield from self.send_response()
            return
        ok = yield from self.make_server_connection()
        if not ok:
            self._close_spool()
            return
        yield SendHttp(RequestHeaders(self.stream_id, flow.request, False), self.context.server)
        yield from self._pump(spool)

    def _pump(self, spool: Spool) -> layer.CommandGenerator[None]:
        """Send the spooled body upstream, a record at a time, as the connection takes it."""
        pump = Pump(spool.chunks(), self.context.server, self._upstream_backlog)
        self.flow.metadata[PUMP] = pump
        try:
            while True:
                yield SpoolPumpHook(self.flow)  # blocking: loads the next record, or fails
                if pump.failed is not None:
                    yield from self._pump_failed(pump.failed)
                    return
                piece, pump.next = pump.next, None
                if not piece:
                    break
                yield SendHttp(RequestData(self.stream_id, piece), self.context.server)
        finally:
            self.flow.metadata.pop(PUMP, None)
            self._close_spool()
        if self.flow.request.trailers:
            yield SendHttp(
                RequestTrailers(self.stream_id, self.flow.request.trailers), self.context.server
            )
        yield SendHttp(RequestEndOfMessage(self.stream_id), self.context.server)
        self.client_state = self.state_done
        if self.server_state == self.state_done:
            yield from self.flow_done()

    def state_pumping(self, event: events.Event) -> layer.CommandGenerator[None]:
        """The agent's body has all arrived; nothing more is expected from it."""
        yield from ()

    def _pump_failed(self, why: str) -> layer.CommandGenerator[None]:
        """Part of the body may have reached the upstream: the flow fails (its step becomes
        `unknown`, decided by a read at rollback) and both sides are told."""
        log.error("sending a spooled body to %s failed: %s", self.flow.request.pretty_host, why)
        yield SendHttp(RequestProtocolError(self.stream_id, why), self.context.server)
        self.flow.error = mflow.Error(f"undoproxy could not send the spooled body: {why}")
        yield HttpErrorHook(self.flow)
        yield SendHttp(
            ResponseProtocolError(self.stream_id, why, status_codes.BAD_GATEWAY),
            self.context.client,
        )
        self.client_state = self.server_state = self.state_errored
        self.flow.live = False

    def _upstream_backlog(self) -> int:
        """Bytes of this request the upstream connection holds and has not sent (HTTP/2 flow
        control buffers them in the connection layer; HTTP/1 writes them at once)."""
        parent = _http_layer(self)
        conn = parent.connections.get(self.context.server) if parent is not None else None
        h2 = getattr(conn, "h2_conn", None)
        buffers = getattr(h2, "stream_buffers", None)
        if not buffers:
            return 0
        return sum(len(item.data) for queue in buffers.values() for item in queue)

    def _close_spool(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None

    def handle_protocol_error(
        self, event: RequestProtocolError | ResponseProtocolError
    ) -> layer.CommandGenerator[None]:
        if isinstance(event, RequestProtocolError) and self.client_state == self.state_pumping:
            self.client_state = self.state_done  # the agent's part was complete already
        if self.client_state == self.state_spool_request_body:
            self._close_spool()  # the agent gave up before its body was complete
        yield from super().handle_protocol_error(event)

    def _refuse_request(self, size: int, *, early: bool) -> layer.CommandGenerator[None]:
        """413 at once: nothing forwarded, no more of the body read (see the module docstring)."""
        limit = self.policy.max_body
        log.warning(
            "refused a request body of %s bytes (over %d): %s %s",
            size if early else f"more than {limit}",
            limit,
            self.flow.request.method,
            self.flow.request.pretty_host,
        )
        yield from self._refuse(answers.body_too_large(limit, size, announced=early), early=early)

    def _refuse(self, answer: http.Response, *, early: bool) -> layer.CommandGenerator[None]:
        """Answer the agent while its body is still arriving (or announced): nothing is
        forwarded and no more of the body is read."""
        self.request_body_buf.clear()
        flow = self.flow
        if early:
            yield HttpRequestHeadersHook(flow)  # identity: the refusal is filed in its session
        if flow.response is None:
            flow.response = answer
            state = state_of(flow)
            if state is not None:
                state.answered = True
        yield HttpRequestHook(flow)  # the journal records the refusal (nothing forwarded)
        flow.response.timestamp_start = time.time()
        yield HttpResponseHeadersHook(flow)
        yield from self.send_response()
        if flow.request.is_http2:
            # HTTP/2 can end our side of the stream and ignore what the agent still sends.
            yield SendHttp(ResponseEndOfMessage(self.stream_id), self.context.client)
        else:
            # HTTP/1: the rest of the body is never read; closing is the only way past it.
            yield SendHttp(
                ResponseProtocolError(
                    self.stream_id, "request body refused", status_codes.NO_RESPONSE
                ),
                self.context.client,
            )
        self.client_state = self.server_state = self.state_errored
        flow.live = False

    # --- response bodies --------------------------------------------------------------------

    def _bound_response(self) -> layer.CommandGenerator[None]:
        response = self.flow.response
        if response is None or response.stream or not self.response_body_buf:
            return  # announced sizes are streamed by the Streaming addon's responseheaders
        if len(self.response_body_buf) <= STREAM_RESPONSE_OVER:
            return
        # As mitmproxy's stream_large_bodies does for a response: send what arrived, then
        # pass the rest on as it comes, through the tap that keeps the journal's copy.
        response.stream = tap_for(self.flow)
        arrived = bytes(self.response_body_buf)
        self.response_body_buf.clear()
        yield from self.start_response_stream()
        yield from self.handle_event(ResponseData(self.stream_id, arrived))


class BoundedHttpLayer(HttpLayer):
    """mitmproxy's HTTP layer, with `BoundedStream`s under `policy`."""

    policy: BodyPolicy

    def make_stream(self, stream_id: int) -> layer.CommandGenerator[None]:
        ctx = self.context.fork()
        stream = BoundedStream(ctx, stream_id)
        stream.policy = self.policy
        self.streams[stream_id] = stream
        yield from self.event_to_child(stream, events.Start())


def bound(http_layer: HttpLayer, policy: BodyPolicy) -> None:
    """Make one of mitmproxy's HTTP layers a BoundedHttpLayer (before it has started)."""
    http_layer.__class__ = BoundedHttpLayer
    http_layer.policy = policy  # type: ignore[attr-defined]


def _http_layer(stream: HttpStream) -> HttpLayer | None:
    layers = stream.context.layers
    index = layers.index(stream) if stream in layers else -1
    parent = layers[index - 1] if index > 0 else None
    return parent if isinstance(parent, HttpLayer) else None
