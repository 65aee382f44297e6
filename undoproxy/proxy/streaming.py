"""Which bodies flow through live and which are buffered.

Mutations are never streamed upstream: a streamed request body reaches the upstream before the
`request` hook runs, i.e. before a hold, a snapshot or the write-ahead journal entry. Responses
that are server-sent events (LLM APIs) or large are streamed to the agent as they arrive.
"""

from __future__ import annotations

from mitmproxy import http

from undoproxy.methods import is_mutation

STREAM_RESPONSE_OVER = 1024 * 1024  # bytes; bigger responses are not buffered


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
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("text/event-stream"):
            response.stream = True
            return
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > STREAM_RESPONSE_OVER:
            response.stream = True
