"""gRPC calls in the journal: which method, and how it ended.

A gRPC call is an HTTP/2 POST to `/package.Service/Method` whose answer is HTTP 200 whatever
happened: the outcome is the `grpc-status` trailer (or header, for an answer of headers
alone), with `grpc-message`. `GrpcCalls` keeps `meta.grpc` (`service`, `method`, `status`,
`status_code`, `message`) and makes a call whose status is not OK a `failed` step, with the
reason. Rules classify methods by their path (`match: {path: "/demo.Files/Get*"}, kind:
read`); how gRPC streams are judged and passed on is in proxy/bounded.py and streaming.py.

A refusal of undoproxy's own is answered as gRPC answers (`as_grpc_status`, called by
FailClosed once the request hooks have run): HTTP 200 with no body and the status in its
headers (a "trailers-only" answer): PERMISSION_DENIED for a deny, a denied hold, a freeze or a
budget, FAILED_PRECONDITION for a closed session, UNAVAILABLE when undoproxy could not journal
or snapshot, and so on; `grpc-message` says `undoproxy_denied: <reason>`, and the
`undoproxy-error` metadata holds undoproxy's JSON error body.
"""

from __future__ import annotations

import json
from typing import Final
from urllib.parse import quote, unquote, urlsplit

from mitmproxy import http

from undoproxy import redact
from undoproxy.proxy.state import state_of
from undoproxy.proxy.streaming import is_grpc

# https://grpc.github.io/grpc/core/md_doc_statuscodes.html
CODES: Final = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


# undoproxy's HTTP answer -> the gRPC status a client gets instead
_STATUS_OF_ANSWER: Final = {
    400: 3,  # INVALID_ARGUMENT: a request that names more than one host...
    401: 16,  # UNAUTHENTICATED: the upstream asked for credentials (a snapshot's 401)
    403: 7,  # PERMISSION_DENIED: denied, held and denied, frozen, over budget
    407: 16,  # UNAUTHENTICATED: the proxy credentials
    409: 9,  # FAILED_PRECONDITION: the session is committed or rolled back
    413: 8,  # RESOURCE_EXHAUSTED: larger than proxy.max_body
    421: 3,  # INVALID_ARGUMENT: misdirected
    502: 14,  # UNAVAILABLE: a snapshot failed, an internal error
    503: 14,  # UNAVAILABLE: the journal could not be written
    507: 8,  # RESOURCE_EXHAUSTED: the spool could not be written
}


def as_grpc_status(flow: http.HTTPFlow) -> None:
    """Turn undoproxy's own refusal of a gRPC call into the answer a gRPC client reads (see
    the module docstring); anything else is left as it is."""
    response = flow.response
    if response is None or response.headers.get("X-Undoproxy") != "1":
        return
    if not is_grpc(flow.request) or is_grpc(response):
        return
    try:
        data = json.loads(response.content or b"{}")
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    error = str(data.get("error") or "undoproxy_refused")
    why = str(data.get("reason") or data.get("message") or f"HTTP {response.status_code}")
    code = _STATUS_OF_ANSWER.get(response.status_code, 2)  # else UNKNOWN
    headers = {
        "content-type": "application/grpc",
        "grpc-status": str(code),
        "grpc-message": quote(f"{error}: {why}", safe=" !\"#$&'()*+,-./:;<=>?@[]^_`{|}~"),
        "undoproxy-error": json.dumps({**data, "http_status": response.status_code}),
        **{k: v for k, v in response.headers.items() if k.lower().startswith("x-undoproxy")},
    }
    flow.response = http.Response.make(200, b"", headers)


def method_of(path: str) -> tuple[str, str] | None:
    """(service, method) of a gRPC path `/package.Service/Method`, or None."""
    parts = urlsplit(path).path.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


class GrpcCalls:
    """mitmproxy addon (in FailClosed's chain, before the journal): see the module docstring."""

    def request(self, flow: http.HTTPFlow) -> None:
        """Name the service and method."""
        state = state_of(flow)
        if state is None or not is_grpc(flow.request):
            return
        named = method_of(flow.request.path)
        if named is not None:
            state.facts["grpc"] = {"service": named[0], "method": named[1]}

    def response(self, flow: http.HTTPFlow) -> None:
        """Read the call's status (trailers, else headers)."""
        state = state_of(flow)
        response = flow.response
        if state is None or state.answered or response is None or not is_grpc(response):
            return
        trailers = response.trailers
        status = trailers.get("grpc-status") if trailers is not None else None
        message = trailers.get("grpc-message") if trailers is not None else None
        if status is None:
            status = response.headers.get("grpc-status")
            message = response.headers.get("grpc-message")
        if status is None:
            return  # cut short: no status came (the error hook says why)
        code = int(status) if status.strip().isdigit() else -1
        name = CODES[code] if 0 <= code < len(CODES) else f"status {status}"
        said = redact.text(unquote(message or ""))[:500]
        facts = state.facts.setdefault("grpc", {})
        facts.update({"status": name, "status_code": code})
        if said:
            facts["message"] = said
        if code != 0:
            state.failure = f"gRPC {name} ({code})" + (f": {said}" if said else "")

    def error(self, flow: http.HTTPFlow) -> None:
        """A stream cut short: whatever status arrived."""
        if flow.response is not None:
            self.response(flow)
