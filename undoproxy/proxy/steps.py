"""Turning a flow into the journal's Step record (headers redacted, bodies bounded and hashed)."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

from mitmproxy import http

from undoproxy import redact
from undoproxy.limits import MUTATION_BODY_LIMIT, READ_BODY_LIMIT
from undoproxy.proxy.bodies import body_copy, readable, request_body, response_body
from undoproxy.proxy.state import FlowState
from undoproxy.proxy.streaming import BodyTap
from undoproxy.rules.matcher import graphql_operation
from undoproxy.rules.record import request_fields
from undoproxy.rules.request import NOT_JSON
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step, new_id


def body_limit(state: FlowState) -> int:
    """How many bytes of a body the journal keeps for this flow."""
    return MUTATION_BODY_LIMIT if state.is_mutation else READ_BODY_LIMIT


def new_step(
    flow: http.HTTPFlow, state: FlowState, journal: Journal, status: str, *, record: bool = True
) -> Step:
    """The Step for a flow's request, numbered in its session; not yet written.

    `record=False` leaves `meta` to the caller (a read recorded with its response at once).
    """
    request = flow.request
    body = body_copy(flow, body_limit(state))
    rule = state.rule
    headers, url = request.headers, request.url
    if state.as_agent_sent is not None:  # secrets are in it (proxy/brokering.py): not the agent's
        fields, _, url = state.as_agent_sent
        headers = http.Headers(fields)
    step = Step(
        id=new_id("st"),
        session_id=state.session_id,
        seq=journal.next_seq(state.session_id),
        method=request.method,
        url=url,
        is_mutation=state.is_mutation,
        status=status,
        rule=rule.name if rule is not None else None,
        risk=rule.risk if rule is not None else None,
        action=state.action,
        captures=state.captures or None,
        request_headers=[list(p) for p in redact.headers(headers.items(multi=True))],
        request_body=body.head or None,
        request_body_len=body.length,
        request_body_sha256=body.sha256 or None,
        intent=state.intent,
        meta=with_facts(record_meta(flow, state, with_response=False), state) if record else None,
    )
    state.step = step
    return step


def with_facts(meta: dict[str, Any] | None, state: FlowState) -> dict[str, Any] | None:
    """`meta` with what protocol addons learnt about the exchange (`state.facts`)."""
    if not state.facts:
        return meta
    return {**(meta or {}), **copy.deepcopy(state.facts)}


def record_meta(
    flow: http.HTTPFlow, state: FlowState, *, with_response: bool
) -> dict[str, Any] | None:
    """What the matched rule's `record:` finds in the request (and the response), or None."""
    record = getattr(state.rule, "record", None)
    if record is None:
        return None
    request = flow.request
    content_type = request.headers.get("content-type")
    view = state.view
    if view is not None and not _is_form(content_type):
        body = None if view.json is NOT_JSON else view.json  # parsed once, shared with the rules
    else:
        body = request_fields(readable(request_body(flow, state)) or b"", content_type)
    response = flow.response if with_response else None
    docs: list[Any] = []
    headers: dict[str, str] = {}
    if response is not None:
        headers = dict(response.headers.items())
        tap = response.stream
        if isinstance(tap, BodyTap) and tap.tail is not None:
            docs = tap.tail.events()
        elif not response.stream:
            try:
                docs = [json.loads(readable(response_body(flow, state)) or b"")]
            except (ValueError, RecursionError):
                docs = []
    meta = record.evaluate(
        captures=state.captures,
        request_body=body,
        response_docs=docs,
        response_headers=headers,
        request_only=response is None,
        graphql=graphql_operation(view) if view is not None and record.needs_graphql else None,
    )
    return meta or None


def _is_form(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media in ("application/x-www-form-urlencoded", "multipart/form-data")


def irreversible_reason(rule: Any, meta: dict[str, Any] | None) -> str | None:
    """A `compensate: none` rule's `reason:`, followed by what it recorded (e.g. recipients)."""
    if rule is None or rule.compensate != "none" or not rule.reason:
        return None
    said = [f"{name}: {_shown(value)}" for name, value in (meta or {}).items() if _shown(value)]
    return f"{rule.reason} ({'; '.join(said)})" if said else rule.reason


def _shown(value: Any) -> str:
    """A recorded value as a reason shows it: text, or a list of texts; objects are left out."""
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return (
            json.dumps(value, ensure_ascii=False)
            if isinstance(value, str) and " " in value
            else str(value)
        )
    return ""


def response_fields(flow: http.HTTPFlow, state: FlowState) -> dict[str, object]:
    """The journal fields a response fills in (a streamed one's from its tap: first bytes,
    length and SHA-256, in `meta.stream`; a request streamed on after it was judged, a gRPC
    stream, gets its own copy from its tap too)."""
    response = flow.response
    assert response is not None
    tap = response.stream if isinstance(response.stream, BodyTap) else None
    streamed = bool(response.stream)
    # 101 to a WebSocket upgrade is its success: the socket is open (proxy/websockets.py).
    opened = response.status_code == 101 and flow.websocket is not None
    ok = 200 <= response.status_code < 300 or opened
    refused = (_refused_in_body(flow, state) if ok and not streamed else None) or state.failure
    meta = with_facts(record_meta(flow, state, with_response=True), state)
    error = refused
    if tap is not None:
        copy = tap.copy()
        body: bytes | None = copy.head
        length: int | None = copy.length
        meta = {**(meta or {}), "stream": stream_meta(tap)}
        if not tap.ended:
            error = "the stream ended before its end: the copy is partial"
    elif streamed:  # streamed by something other than undoproxy's tap
        body, length = None, None
        error = error or "response streamed to the agent; body not journaled"
    else:
        raw = response.raw_content or b""
        body, length = raw[: body_limit(state)], len(raw)
    return {
        **streamed_request_fields(flow),
        "status": "succeeded" if ok and refused is None else "failed",
        "response_status": response.status_code,
        "response_headers": [list(p) for p in redact.headers(response.headers.items(multi=True))],
        "response_body": body or None,
        "response_body_len": length,
        "duration_ms": round((time.monotonic() - state.started) * 1000, 3),
        "error": error,
        "meta": meta,
    }


def streamed_request_fields(flow: http.HTTPFlow) -> dict[str, object]:
    """The journal fields of a request body streamed on after it was judged (a gRPC stream,
    a large upload), from its tap: what passed of it so far; {} for any other request."""
    sent = flow.request.stream
    if not isinstance(sent, BodyTap):
        return {}
    copy = sent.copy()
    return {
        "request_body": copy.head or None,
        "request_body_len": copy.length,
        "request_body_sha256": copy.sha256 if copy.length else None,
    }


def stream_meta(tap: BodyTap) -> dict[str, object]:
    """`meta.stream` of a streamed response: its length, SHA-256 and whether it ended."""
    copy = tap.copy()
    return {"length": copy.length, "sha256": copy.sha256, "complete": tap.ended}


def _refused_in_body(flow: http.HTTPFlow, state: FlowState) -> str | None:
    """Why a 2xx answer is a failure (the rule's `fails_when` holds on its JSON), or None."""
    rule = state.rule
    if rule is None or not rule.fails_when or flow.response is None:
        return None
    try:
        doc = json.loads(readable(response_body(flow, state)) or b"")
    except (ValueError, RecursionError):
        return None
    if not all(c.holds(doc, True) for c in rule.fails_when):
        return None
    said = doc.get("error") if isinstance(doc, dict) else None
    detail = f": {redact.text(str(said))[:200]}" if said else ""
    return f"the API refused it in a 2xx answer ({rule.name} fails_when){detail}"


WEBSOCKET_METHOD = "WEBSOCKET"  # the method shown for a WebSocket message's step
UNSENDABLE = "a WebSocket message cannot be unsent"


def message_step(
    flow: http.HTTPFlow, state: FlowState, journal: Journal, message: Any, status: str
) -> Step:
    """The step of one WebSocket message (`message`: mitmproxy's WebSocketMessage), not yet
    written: sent by the agent, a mutation with an irreversible compensation record (so that
    rollback reports it `irreversible`); received, a read. Its bytes go where a request's or
    a response's body would, capped as theirs are."""
    content: bytes = message.content
    sent = bool(message.from_client)
    limit = MUTATION_BODY_LIMIT if sent else READ_BODY_LIMIT
    kept = content[:limit] if content else None
    rule = state.rule
    upgrade = state.step.id if state.step is not None else None
    return Step(
        id=new_id("st"),
        session_id=state.session_id,
        seq=journal.next_seq(state.session_id),
        method=WEBSOCKET_METHOD,
        url=flow.request.url,
        is_mutation=sent,
        status=status,
        rule=rule.name if rule is not None else None,
        risk=rule.risk if rule is not None else None,
        action=state.action,
        request_body=kept if sent else None,
        request_body_len=len(content) if sent else 0,
        request_body_sha256=hashlib.sha256(content).hexdigest() if sent else None,
        # A received message is shown as the body of the socket's answer (the 101).
        response_status=None if sent else 101,
        response_body=None if sent else kept,
        response_body_len=None if sent else len(content),
        intent=state.intent,
        meta={
            "websocket": {
                "direction": "sent" if sent else "received",
                "type": "text" if message.is_text else "binary",
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
                "upgrade_step": upgrade,
            }
        },
        compensation={"kind": "irreversible", "ready": False, "reason": UNSENDABLE}
        if sent
        else None,
    )


def refused_connection_step(
    journal: Journal, session_id: str, url: str, reason: str, response_status: int = 400
) -> Step:
    """The step that records a connection undoproxy refused before any HTTP request was read
    (its bytes were not HTTP: proxy/layers.py), not yet written."""
    return Step(
        id=new_id("st"),
        session_id=session_id,
        seq=journal.next_seq(session_id),
        method="CONNECT",
        url=url,
        is_mutation=True,  # what the bytes would have done is unknown: counted as a write
        status="denied",
        action="deny",
        response_status=response_status,
        error=reason,
    )
