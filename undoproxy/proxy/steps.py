"""Turning a flow into the journal's Step record (headers redacted, bodies bounded and hashed)."""

from __future__ import annotations

import hashlib
import time

from mitmproxy import http

from undoproxy import redact
from undoproxy.proxy.state import FlowState
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step, new_id

READ_BODY_LIMIT = 64 * 1024  # what the journal keeps of a read's bodies
MUTATION_BODY_LIMIT = 1024 * 1024  # mutations keep more: compensations and drift checks use them


def body_limit(state: FlowState) -> int:
    """How many bytes of a body the journal keeps for this flow."""
    return MUTATION_BODY_LIMIT if state.is_mutation else READ_BODY_LIMIT


def new_step(flow: http.HTTPFlow, state: FlowState, journal: Journal, status: str) -> Step:
    """The Step for a flow's request, numbered in its session; not yet written."""
    request = flow.request
    body = request.raw_content or b""
    rule = state.rule
    step = Step(
        id=new_id("st"),
        session_id=state.session_id,
        seq=journal.next_seq(state.session_id),
        method=request.method,
        url=request.url,
        is_mutation=state.is_mutation,
        status=status,
        rule=rule.name if rule is not None else None,
        risk=rule.risk if rule is not None else None,
        action=state.action,
        captures=state.captures or None,
        request_headers=[list(p) for p in redact.headers(request.headers.items(multi=True))],
        request_body=body[: body_limit(state)] if body else None,
        request_body_len=len(body),
        request_body_sha256=hashlib.sha256(body).hexdigest() if body else None,
        intent=state.intent,
    )
    state.step = step
    return step


def response_fields(flow: http.HTTPFlow, state: FlowState) -> dict[str, object]:
    """The journal fields a response fills in."""
    response = flow.response
    assert response is not None
    streamed = bool(response.stream)
    body = None if streamed else (response.raw_content or b"")
    return {
        "status": "succeeded" if 200 <= response.status_code < 300 else "failed",
        "response_status": response.status_code,
        "response_headers": [list(p) for p in redact.headers(response.headers.items(multi=True))],
        "response_body": body[: body_limit(state)] if body else None,
        "response_body_len": None if body is None else len(body),
        "duration_ms": round((time.monotonic() - state.started) * 1000, 3),
        "error": "response streamed to the agent; body not journaled" if streamed else None,
    }
