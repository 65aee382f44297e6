"""The compensation plan of a mutation, as the gate (hold-irreversible) and the snapshot addon
both need it: one function, so that what the gate calls undoable is what gets undone."""

from __future__ import annotations

from mitmproxy import http

from undoproxy.compensators.model import Plan
from undoproxy.compensators.plan import plan_for
from undoproxy.credentials import signature_scheme
from undoproxy.proxy.state import FlowState
from undoproxy.rules import RequestView


def request_view(flow: http.HTTPFlow) -> RequestView:
    """The plain-data view of a flow's request that the rules engine matches."""
    request = flow.request
    return RequestView.from_parts(
        request.method,
        request.url,
        request.headers.items(multi=True),
        request.get_content(strict=False) or b"",
    )


def plan_of(flow: http.HTTPFlow, state: FlowState, *, auto: bool) -> Plan:
    """Which compensation this mutation gets (decided before it is forwarded)."""
    view = state.view or request_view(flow)
    state.view = view
    signed = signature_scheme(list(flow.request.headers.items(multi=True)))
    if signed is not None:
        return Plan(
            "irreversible",
            reason=f"the request is signed ({signed}): its signature cannot be replayed "
            "to read the target before it or to send an inverse request after it",
        )
    return plan_for(view, state.rule, state.captures, auto=auto)
