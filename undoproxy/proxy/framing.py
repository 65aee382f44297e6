"""A request forwarded with a body says how long it is, whatever protocol carried it.

An HTTP/2 (or HTTP/3) request need not announce its length: the end of the stream ends the
body (`curl -T -` over HTTP/2 sends none). mitmproxy turns such a request into an HTTP/1.1 one
for an HTTP/1.1 upstream as it is, with neither `Content-Length` nor chunked framing, and an
HTTP/1.1 server reads a request with neither as having no body at all: the upstream got an
empty body while the agent got its 2xx and the journal the full body. undoproxy holds every
request body whole before forwarding it (buffered, or spooled: proxy/bounded.py), so it knows
the length: `Framing` adds it, the last thing before the request goes out. It is right for an
HTTP/2 upstream too (RFC 9113 §8.1.1 allows it when it matches the DATA frames, as it does).
"""

from __future__ import annotations

from mitmproxy import http

from undoproxy.proxy.bodies import spooled

# Methods whose requests carry a body as a rule: one sent empty says so (Content-Length: 0).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def body_length(flow: http.HTTPFlow) -> int:
    """The length of the body that will be forwarded (buffered or spooled)."""
    copy = spooled(flow)
    return copy.length if copy is not None else len(flow.request.raw_content or b"")


class Framing:
    """Adds `Content-Length` to HTTP/2 and HTTP/3 requests that do not announce one."""

    def request(self, flow: http.HTTPFlow) -> None:
        """Run last in the request hook: only for a request that will be forwarded."""
        request = flow.request
        if flow.response is not None or not (request.is_http2 or request.is_http3):
            return
        if "content-length" in request.headers:
            return
        size = body_length(flow)
        if size or request.method in _BODY_METHODS:
            request.headers["content-length"] = str(size)
