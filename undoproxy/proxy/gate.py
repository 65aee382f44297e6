"""Rule enforcement: match each request, then allow, deny or hold it.

The first matching rule decides; an unmatched mutation gets `defaults.mutations` (with
`hold-irreversible`: held only when no compensation is known for it); an unmatched read
passes. Then, for mutations: a closed session answers 409, a budget (`guard:`) that would be
exceeded answers 403 `undoproxy_budget`, and a write repeated too often, or an allowed request
whose rule's risk reaches `approvals.hold_at`, is held. A deny answers the contract's 403
`undoproxy_blocked` and forwards nothing. What was decided is kept on the flow for the journal.
"""

from __future__ import annotations

import logging
from typing import Protocol

from mitmproxy import http

from undoproxy import redact
from undoproxy.proxy import answers
from undoproxy.proxy.budgets import Budgets
from undoproxy.proxy.planning import plan_of, request_view
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.rules import RuleSet
from undoproxy.rules.guards import Guard
from undoproxy.rules.model import RISKS
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)
OPEN_STATES = frozenset({"open"})
HOLD_AT = {"never": len(RISKS), "high": RISKS.index("high"), "critical": RISKS.index("critical")}


class Holder(Protocol):
    """Holds a flow until a person decides (see proxy/holds.py)."""

    async def hold(self, flow: http.HTTPFlow, state: FlowState, timeout: float | None) -> None:
        """Return when the flow may go on, or after setting flow.response (denied, timed out)."""


class Gate:
    """Applies the rules, the defaults and the guardrails to every request."""

    def __init__(
        self,
        rules: RuleSet,
        default_mutations: str,
        holder: Holder | None,
        journal: Journal | None = None,
        *,
        hold_at: str = "never",
        guard: Guard | None = None,
        auto_compensate: bool = True,
    ) -> None:
        self.rules = rules
        self.journal = journal
        self.default_mutations = default_mutations
        self.holder = holder
        self.hold_at = HOLD_AT[hold_at]
        self.budgets = Budgets(guard or Guard(), journal)
        self.auto_compensate = auto_compensate

    async def running(self) -> None:
        """Load the budgets' counts from the journal before traffic arrives."""
        await self.budgets.load()

    async def request(self, flow: http.HTTPFlow) -> None:
        """Decide; deny or hold here, or let the flow go on to the journal."""
        state = state_of(flow)
        if state is None or flow.response is not None:
            return
        self._decide(flow, state)  # first: a rule may say what kind of request this is
        if self._refuse_if_frozen(flow, state) or self._refuse_if_closed(flow, state):
            return
        rule = state.rule
        if state.is_mutation and state.action != "deny":
            over = self.budgets.over(state.session_id, rule)
            if over is not None:
                state.answered = True
                flow.response = answers.over_budget(state.session_id, over)
                return
            request = flow.request
            repeated = self.budgets.repeated(
                state.session_id, rule, request.method, request.url, request.raw_content or b""
            )
            if repeated is not None:
                state.action, state.hold_source = "hold", "guard.repeat"
                state.hold_reason = repeated.message()
        if state.action == "deny":
            state.answered = True
            flow.response = answers.blocked(state.hold_source or "defaults.mutations", _why(state))
            return
        if state.action == "hold":
            if self.holder is None:
                state.answered = True
                flow.response = answers.blocked(
                    state.hold_source or "defaults.mutations",
                    "this request must be held for approval, but approvals are not enabled",
                )
                return
            await self.holder.hold(flow, state, rule.timeout if rule else None)
            if flow.response is None:  # approved: the session may have closed or frozen
                self._refuse_if_frozen(flow, state) or self._refuse_if_closed(flow, state)
        if flow.response is None and state.is_mutation:
            self.budgets.record(state.session_id, rule)

    def _decide(self, flow: http.HTTPFlow, state: FlowState) -> None:
        """The action of the first matching rule, or of the defaults."""
        match = None
        if self.rules.rules:
            state.view = request_view(flow)
            match = self.rules.match(state.view)
        if match is not None:
            rule = match.rule
            state.rule, state.captures, state.action = rule, match.captures, rule.action
            if rule.kind is not None:
                state.is_mutation = rule.kind == "mutation"
            state.hold_source = rule.name
            if rule.action == "allow" and RISKS.index(rule.risk) >= self.hold_at:
                state.action, state.hold_source = "hold", "approvals.hold_at"
                state.hold_reason = f"rule {rule.name} has risk {rule.risk} (approvals.hold_at)"
            return
        if not state.is_mutation:
            return
        state.action = self.default_mutations
        if state.action == "hold-irreversible":
            plan = plan_of(flow, state, auto=self.auto_compensate)
            if plan.irreversible:
                state.action = "hold"
                state.hold_reason = f"no compensation is known: {plan.reason}"
            else:
                state.action = "log"
        if state.action == "log":
            log.info(
                "mutation matched no rule: %s %s (session %s)",
                flow.request.method,
                redact.url(flow.request.url),
                state.session_id,
            )

    def _refuse_if_frozen(self, flow: http.HTTPFlow, state: FlowState) -> bool:
        """Answer 403 to a mutation while its session, or everything, is frozen."""
        if not state.is_mutation or self.journal is None:
            return False
        session = self.journal.sessions.get(state.session_id)
        scope = "all" if self.journal.frozen_all else "session"
        if not self.journal.frozen_all and (session is None or not session.frozen):
            return False
        state.answered = True
        flow.response = answers.frozen(state.session_id, scope)
        if state.step is not None:  # held, then approved while the switch was thrown
            self.journal.update(
                state.step, status="denied", response_status=403, error="frozen: not forwarded"
            )
        return True

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


def _why(state: FlowState) -> str:
    rule = state.rule
    if rule is None:
        return "mutations that match no rule are denied (defaults.mutations: deny)"
    return rule.reason or f"denied by rule {rule.name}"
