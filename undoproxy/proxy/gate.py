"""Rule enforcement: match each request, then allow, deny or hold it.

The first matching rule decides; an unmatched mutation gets `defaults.mutations`; an unmatched
read passes. A deny answers the contract's 403 `undoproxy_blocked` and forwards nothing. What
was decided (rule, risk, captures, action) is kept on the flow for the journal.
"""

from __future__ import annotations

import logging
from typing import Protocol

from mitmproxy import http

from undoproxy import redact
from undoproxy.proxy import answers
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.rules import RequestView, RuleSet
from undoproxy.store.journal import Journal

OPEN_STATES = frozenset({"open"})

log = logging.getLogger(__name__)


class Holder(Protocol):
    """Holds a flow until a person decides (see proxy/holds.py)."""

    async def hold(self, flow: http.HTTPFlow, state: FlowState, timeout: float | None) -> None:
        """Return when the flow may go on, or after setting flow.response (denied, timed out)."""


def request_view(flow: http.HTTPFlow) -> RequestView:
    """The plain-data view of a flow's request that the rules engine matches."""
    request = flow.request
    return RequestView.from_parts(
        request.method,
        request.url,
        request.headers.items(multi=True),
        request.get_content(strict=False) or b"",
    )


class Gate:
    """Applies the rules to every request."""

    def __init__(
        self,
        rules: RuleSet,
        default_mutations: str,
        holder: Holder | None,
        journal: Journal | None = None,
    ) -> None:
        self.rules = rules
        self.journal = journal
        self.default_mutations = default_mutations
        self.holder = holder

    async def request(self, flow: http.HTTPFlow) -> None:
        """Decide; deny or hold here, or let the flow go on to the journal."""
        state = state_of(flow)
        if state is None or flow.response is not None:
            return
        if self._refuse_if_closed(flow, state):
            return
        match = None
        if self.rules.rules:
            state.view = request_view(flow)
            match = self.rules.match(state.view)
        if match is not None:
            state.rule, state.captures, state.action = match.rule, match.captures, match.rule.action
        elif state.is_mutation:
            state.action = self.default_mutations
            if state.action == "log":
                log.info(
                    "mutation matched no rule: %s %s (session %s)",
                    flow.request.method,
                    redact.url(flow.request.url),
                    state.session_id,
                )
        if state.action == "deny":
            rule = match.rule if match else None
            reason = (
                rule.reason
                if rule and rule.reason
                else f"denied by rule {rule.name}"
                if rule
                else "mutations that match no rule are denied (defaults.mutations: deny)"
            )
            state.answered = True
            flow.response = answers.blocked(rule.name if rule else "defaults.mutations", reason)
        elif state.action == "hold":
            rule = match.rule if match else None
            if self.holder is None:
                state.answered = True
                flow.response = answers.blocked(
                    rule.name if rule else "defaults.mutations",
                    "this request must be held for approval, but approvals are not enabled",
                )
                return
            await self.holder.hold(flow, state, rule.timeout if rule else None)
            if flow.response is None:  # approved: the session may have closed meanwhile
                self._refuse_if_closed(flow, state)

    def _refuse_if_closed(self, flow: http.HTTPFlow, state: FlowState) -> bool:
        """Answer 409 to a mutation of a session that takes no more (True when it did)."""
        session = self.journal.sessions.get(state.session_id) if self.journal else None
        if not state.is_mutation or session is None or session.state in OPEN_STATES:
            return False
        # Committed, or being (or already) rolled back: a write now would land after the
        # rollback's report, or inside a transaction that was closed.
        state.answered = True
        flow.response = answers.session_closed(session.id, session.state)
        if state.step is not None and self.journal is not None:  # held, then approved
            self.journal.update(
                state.step,
                status="denied",
                response_status=409,
                error=f"approved, but the session was {session.state} meanwhile: not forwarded",
            )
        return True
