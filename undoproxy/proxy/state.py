"""What undoproxy decided about one flow, kept on `flow.metadata[KEY]` from hook to hook."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http

from undoproxy.codings import Decoded
from undoproxy.store.records import Step

KEY = "undoproxy"


@dataclass
class FlowState:
    """Decisions about one request: its session, its rule and its journal step."""

    session_id: str
    is_mutation: bool
    started: float = field(default_factory=time.monotonic)
    rule: Any = None  # undoproxy.rules.Rule when one matched
    captures: dict[str, str] = field(default_factory=dict)
    action: str = "pass"  # pass (reads) | allow | log | hold | deny
    hold_source: str | None = None  # what decided a hold/deny: a rule, or a config key
    hold_reason: str | None = None  # why it is held, when not the rule itself
    intent: str | None = None  # X-Undoproxy-Intent, stripped before forwarding
    sealed_urls: frozenset[str] = frozenset()  # URLs whose full form the credentials keep
    in_flight: bool = False  # forwarded, answer not yet in (counted in undoproxy/inflight.py)
    step: Step | None = None
    answered: bool = False  # undoproxy answered the agent itself (403, 407, 503, 502)
    journaled: bool = True  # False for a 407: no session, nothing to attribute
    view: Any = None  # the rules engine's RequestView, once built
    request_body: Decoded | None = None  # the body as judged (proxy/bodies.py), once decoded
    response_body: Decoded | None = None  # the same for a buffered response
    websocket: bool = False  # a WebSocket upgrade (proxy/websockets.py)
    plan: Any = None  # the compensation plan (compensators), when there is one
    pending_fields: dict[str, Any] = field(default_factory=dict)  # written ahead with the step
    limits: list[Any] = field(default_factory=list)  # budgets a shared journal fences it on
    outcome_fields: dict[str, Any] = field(default_factory=dict)  # written with the outcome
    # What a protocol addon learnt about the exchange (proxy/mcp.py: `mcp`), kept in the
    # step's `meta` whatever rule matched
    facts: dict[str, Any] = field(default_factory=dict)
    response_keep: int | None = None  # bytes of a streamed answer to keep, when more is needed
    mcp: Any = None  # the MCP exchange (proxy/mcp.py), when this is one
    failure: str | None = None  # why an answer that looks like success is not (gRPC status)
    brokered: tuple[str, ...] = ()  # secrets put into the request (proxy/brokering.py)
    # (header fields, path, url) as the agent sent them, while the secrets are put in
    as_agent_sent: Any = None


def state_of(flow: http.HTTPFlow) -> FlowState | None:
    """The state an earlier hook left on the flow, if any."""
    value = flow.metadata.get(KEY)
    return value if isinstance(value, FlowState) else None


class MissingState(RuntimeError):
    """A request reached a deciding hook with no state: undoproxy does not know whose it is
    or what was decided, so it is not forwarded (the fail-closed guard answers it)."""


def decided_state(flow: http.HTTPFlow) -> FlowState | None:
    """The flow's state for a hook that decides whether it goes upstream: None when
    undoproxy has answered it already; MissingState when nothing decided about it at all."""
    state = state_of(flow)
    if state is None and flow.response is None:
        raise MissingState(f"no state for {flow.request.method} request {flow.id}")
    return state
