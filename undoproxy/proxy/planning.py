"""The compensation plan of a mutation, as the gate (hold-irreversible) and the snapshot addon
both need it: one function, so that what the gate calls undoable is what gets undone."""

from __future__ import annotations

from mitmproxy import http

from undoproxy.compensators.model import Plan
from undoproxy.compensators.plan import correction_of, plan_for
from undoproxy.credentials import signature_scheme
from undoproxy.proxy.bodies import request_body
from undoproxy.proxy.state import FlowState
from undoproxy.rules import RequestView
from undoproxy.signing import Signers, missing_key_reason

WEBSOCKET_REASON = (
    "a WebSocket: what is sent on it cannot be unsent (each message is journaled as a step "
    "of its own)"
)


def request_view(flow: http.HTTPFlow, state: FlowState | None = None) -> RequestView:
    """The plain-data view of a flow's request that the rules engine matches: its body as the
    upstream will read it (content codings decoded), or why that is unknown."""
    request = flow.request
    body = request_body(flow, state)
    return RequestView.from_parts(
        request.method,
        request.url,
        request.headers.items(multi=True),
        body.body,
        body.problem,
    )


def plan_of(
    flow: http.HTTPFlow, state: FlowState, *, auto: bool, signers: Signers | None = None
) -> Plan:
    """Which compensation this mutation gets (decided before it is forwarded).

    A signed request gets one only when `signing:` (or an `aws:` entry of `secrets:` that
    serves its session) gives undoproxy a key for its host: the agent's signature cannot be
    replayed, undoproxy signs its own requests with that key.
    """
    view = state.view or request_view(flow, state)
    state.view = view
    if state.websocket:
        return Plan("irreversible", reason=WEBSOCKET_REASON)
    items = list(flow.request.headers.items(multi=True))
    signed = signature_scheme(items)
    signer = signers.for_url(flow.request.url, state.session_id) if signers else None
    if signed is not None and signer is None:
        return Plan(
            "irreversible",
            reason=missing_key_reason(signed, flow.request.url, items),
            correction=correction_of(state.rule),
            correction_blocked=f"the email was sent with a signed request ({signed}) and "
            "`signing:` gives undoproxy no key for its host: send the correction by hand",
        )
    return plan_for(view, state.rule, state.captures, auto=auto)
