"""Rule enforcement: match each request, then allow, deny or hold it.

The first matching rule decides; an unmatched mutation gets `defaults.mutations` (with
`hold-irreversible`: held only when no compensation is known for it); an unmatched read
passes. Then, for mutations: a closed session answers 409, a budget (`guard:`) that would be
exceeded answers 403 `undoproxy_budget`, and a write repeated too often, or an allowed request
whose rule's risk reaches `approvals.hold_at`, is held. A deny answers the contract's 403
`undoproxy_blocked` and forwards nothing. What was decided is kept on the flow for the journal.
"""

from __future__ import annotations

import copy
import logging
from typing import Protocol

from mitmproxy import http

from undoproxy import redact
from undoproxy.proxy import answers
from undoproxy.proxy.bodies import body_identity
from undoproxy.proxy.budgets import Budgets
from undoproxy.proxy.planning import plan_of, request_view
from undoproxy.proxy.state import FlowState, decided_state
from undoproxy.rules import RuleSet
from undoproxy.rules.guards import Guard
from undoproxy.rules.model import RISKS
from undoproxy.signing import Signers
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
        signers: Signers | None = None,
    ) -> None:
        self.rules = rules
        self.signers = signers
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
        state = decided_state(flow)  # none at all: refused by the guard, never forwarded
        if state is None or flow.response is not None:
            return
        self._decide(flow, state)  # first: a rule may say what kind of request this is
        if self.journal is not None and refuse_if_stopped(self.journal, flow, state, "already"):
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
                state.session_id, rule, request.method, request.url, body_identity(flow)
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
            if flow.response is None and self.journal is not None:  # approved meanwhile?
                refuse_if_stopped(self.journal, flow, state, "by the time it was approved")
        if flow.response is None and state.is_mutation:
            self.budgets.record(state.session_id, rule)
            if self.journal is not None and self.journal.shared:
                state.limits = self.budgets.limits(rule)

    def foresee(self, flow: http.HTTPFlow) -> str | None:
        """Why this request could not be judged without its body or a person, or None: what
        `request` would decide with the body unknown, worked out on a copy of the flow's state
        (nothing is held, counted or logged). proxy/upload_plan.py asks it of large uploads."""
        state = decided_state(flow)
        if state is None or flow.response is not None:
            return "it is answered already"
        trial = copy.copy(state)
        self._decide(flow, trial, quiet=True)
        if trial.action == "hold":  # a person decides: the body waits on disk meanwhile
            return f"{trial.hold_source or 'the rules'} would hold it"
        if trial.action == "deny" or not trial.is_mutation:  # refused unread, or a read
            return None
        if self.journal is not None and stopped(self.journal, trial.session_id) is not None:
            return "its session is frozen or closed"
        if self.budgets.over(trial.session_id, trial.rule) is not None:
            return "a budget (guard:) would refuse it"
        if self.budgets.compares_bodies(trial.rule):
            return "a repeat guard (guard.repeat) compares bodies"
        return None

    def _decide(self, flow: http.HTTPFlow, state: FlowState, *, quiet: bool = False) -> None:
        """The action of the first matching rule, or of the defaults."""
        match = None
        if self.rules.rules:
            # Built once per request (the MCP addon may have built it, with the tool's hints).
            state.view = state.view or request_view(flow, state)
            match = self.rules.match(state.view)
        if match is None:
            if state.is_mutation:
                self._by_defaults(flow, state, quiet=quiet)
            return
        rule = match.rule
        state.rule, state.captures, state.action = rule, match.captures, rule.action
        if rule.kind is not None:
            state.is_mutation = rule.kind == "mutation"
        state.hold_source = rule.name
        if rule.defers_action and state.is_mutation:
            # A pack rule that names no action recognises and compensates; whether the
            # mutation may go is for defaults.mutations to say, as for one no rule matched.
            self._by_defaults(flow, state, quiet=quiet)
        if state.action in ("allow", "log") and RISKS.index(rule.risk) >= self.hold_at:
            state.action, state.hold_source = "hold", "approvals.hold_at"
            state.hold_reason = f"rule {rule.name} has risk {rule.risk} (approvals.hold_at)"

    def _by_defaults(self, flow: http.HTTPFlow, state: FlowState, *, quiet: bool) -> None:
        state.action = self.default_mutations
        if state.rule is not None:
            state.hold_source = f"defaults.mutations (rule {state.rule.name} names no action)"
        if state.action == "hold-irreversible":
            plan = plan_of(flow, state, auto=self.auto_compensate, signers=self.signers)
            if plan.irreversible:
                state.action = "hold"
                state.hold_reason = f"no compensation is known: {plan.reason}"
            else:
                state.action = "log"
        if state.action == "log" and state.rule is None and not quiet:
            log.info(
                "mutation matched no rule: %s %s (session %s)",
                flow.request.method,
                redact.url(flow.request.url),
                state.session_id,
            )


def refuse_if_stopped(journal: Journal, flow: http.HTTPFlow, state: FlowState, when: str) -> bool:
    """Answer a mutation its session may not make now, and say so (True when it did).

    403 `undoproxy_frozen` while the session, or everything, is frozen; 409
    `undoproxy_session_closed` once it is committed or being (or was) rolled back: a write
    then would land after the rollback's report, or inside a closed transaction. A step
    already journaled (held, or written ahead) becomes `denied`; `when` says when it was
    found, for the step's error. The gate asks before deciding and after a hold, the
    journal addon once more right before forwarding.
    """
    if not state.is_mutation:
        return False
    stop = stopped(journal, state.session_id)
    if stop is None:
        return False
    if stop in ("all", "session"):
        flow.response = answers.frozen(state.session_id, stop)
        why = f"frozen {when}: not forwarded"
    else:
        flow.response = answers.session_closed(state.session_id, stop)
        why = f"the session was {stop} {when}: not forwarded"
    state.answered = True
    if state.step is not None:
        journal.update(
            state.step, status="denied", response_status=flow.response.status_code, error=why
        )
    return True


def stopped(journal: Journal, session_id: str) -> str | None:
    """Why the session may not make mutations now, or None: "all" or "session" while frozen
    (everything, or it), else its state once it is no longer open."""
    session = journal.sessions.get(session_id)
    if journal.frozen_all:
        return "all"
    if session is None:
        return None
    if session.frozen:
        return "session"
    return session.state if session.state not in OPEN_STATES else None


def _why(state: FlowState) -> str:
    rule = state.rule
    if rule is None:
        return "mutations that match no rule are denied (defaults.mutations: deny)"
    return rule.reason or f"denied by rule {rule.name}"
