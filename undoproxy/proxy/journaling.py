"""The write-ahead journal, as a mitmproxy addon.

A mutation is committed to the journal as `pending` before it is forwarded; if that write fails
the agent gets 503 and nothing is forwarded (like mitmproxy's save addon, we would rather stop
traffic than let it through unrecorded). Afterwards the step becomes `succeeded`/`failed`, or
`unknown` when the connection was lost after the request may have been sent. Reads are written
once, after their response, in the writer's next batch.
"""

from __future__ import annotations

import logging
import time

from mitmproxy import http

from undoproxy import redact
from undoproxy.compensators.record import nothing
from undoproxy.errors import JournalError
from undoproxy.inflight import InFlight
from undoproxy.proxy import answers
from undoproxy.proxy.budgets import OverBudget
from undoproxy.proxy.gate import refuse_if_stopped
from undoproxy.proxy.state import FlowState, decided_state, state_of
from undoproxy.proxy.steps import (
    irreversible_reason,
    new_step,
    record_meta,
    response_fields,
    streamed_request_fields,
)
from undoproxy.store.base import BudgetExceeded, SessionStopped
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step

log = logging.getLogger(__name__)


class JournalAddon:
    """Journals every request of every session."""

    def __init__(self, journal: Journal, inflight: InFlight | None = None) -> None:
        self.journal = journal
        self.inflight = inflight or InFlight()

    async def request(self, flow: http.HTTPFlow) -> None:
        """Write mutations ahead; record requests undoproxy answered itself."""
        state = decided_state(flow)
        if state is None:
            return
        if flow.response is not None:  # denied, timed out, or refused earlier: nothing forwarded
            if state.step is None and state.journaled:
                self.journal.record(self._answered_step(flow, state))
            return
        if not state.is_mutation:
            return
        if not self.journal.in_touch:
            # A replica that cannot hear the others may not know of a freeze, a rollback or a
            # decision made there: it forwards no mutation until it has caught up.
            log.warning(
                "not forwarding %s %s: out of touch with the other replicas",
                flow.request.method,
                redact.url(flow.request.url),
            )
            state.answered = True
            flow.response = answers.journal_unavailable(
                "this replica lost its connection to the other replicas; it takes no "
                "mutations until it has caught up (retry in a moment)"
            )
            if state.step is None:
                self.journal.record(self._answered_step(flow, state))
            else:
                self.journal.update(state.step, status="denied", response_status=503)
            return
        try:
            if state.step is None:
                step = new_step(flow, state, self.journal, "pending")
                self._say_irreversible(state, step.meta)
                for name, value in state.pending_fields.items():
                    setattr(step, name, value)
                await self.journal.write_ahead(step, limits=state.limits)
            else:  # written earlier (held, then approved): now it is about to be sent
                meta = record_meta(flow, state, with_response=False)
                self._say_irreversible(state, meta)
                await self.journal.update_now(
                    state.step, status="pending", meta=meta, **state.pending_fields
                )
            # The write-ahead was awaited: the session may have been frozen, committed or
            # rolled back meanwhile. Checked here, with no await before it is forwarded, so a
            # freeze or rollback either refuses it or finds it in flight and waits for it.
            if refuse_if_stopped(self.journal, flow, state, "while it was being journaled"):
                return
            self.inflight.started(state.session_id)
            state.in_flight = True
        except BudgetExceeded as exc:  # counted over every replica's steps, in the database
            state.step = None
            state.answered = True
            over = OverBudget(exc.limit, exc.value, exc.scope)
            flow.response = answers.over_budget(state.session_id, over)
            self.journal.record(self._answered_step(flow, state))
        except SessionStopped:
            # Another replica froze the session or started its rollback: the database said no
            # to the write-ahead (nothing written). Refused with the reason, journaled as such.
            state.step = None  # only a new step's write-ahead is fenced: it was not written
            if not refuse_if_stopped(self.journal, flow, state, "on another replica"):
                state.answered = True
                flow.response = answers.session_closed(state.session_id, "not open")
            self.journal.record(self._answered_step(flow, state))
        except JournalError as exc:
            log.error(
                "not forwarding %s %s: %s",
                flow.request.method,
                redact.url(flow.request.url),
                redact.text(str(exc)),
            )
            state.answered = True
            flow.response = answers.journal_unavailable(str(exc))

    def _landed(self, state: FlowState) -> None:
        if state.in_flight:
            state.in_flight = False
            self.inflight.ended(state.session_id)

    @staticmethod
    def _say_irreversible(state: FlowState, meta: dict[str, object] | None) -> None:
        """A `compensate: none` rule's reason, with what it recorded, becomes the step's reason."""
        comp = state.pending_fields.get("compensation")
        reason = irreversible_reason(state.rule, meta)
        if reason and isinstance(comp, dict) and comp.get("reason"):
            comp["reason"] = reason  # in place: the response's completion keeps this record

    def _answered_step(self, flow: http.HTTPFlow, state: FlowState) -> Step:
        step = new_step(flow, state, self.journal, "denied")
        assert flow.response is not None
        step.response_status = flow.response.status_code
        step.error = answers.reason_of(flow.response)  # what `show` gives as the step's why
        step.duration_ms = round((time.monotonic() - state.started) * 1000, 3)
        return step

    def response(self, flow: http.HTTPFlow) -> None:
        """Record the outcome."""
        state = state_of(flow)
        if state is not None:
            self._landed(state)
        if state is None or state.answered:
            return
        fields = response_fields(flow, state)
        if state.step is None:  # a read: one insert with everything
            step = new_step(flow, state, self.journal, "succeeded", record=False)
            for k, v in fields.items():
                setattr(step, k, v)
            self.journal.record(step)
        else:
            self.journal.update(state.step, **fields, **state.outcome_fields)

    def _cut_short(self, flow: http.HTTPFlow, state: FlowState, message: str) -> None:
        """The upstream had answered (its status is known) when a side closed the stream:
        an MCP client closes an answer's event stream once it has its reply, an agent stops
        reading a download. The outcome is the status; the journal's copy is partial."""
        fields = response_fields(flow, state)
        fields["error"] = f"{message}: the stream was cut short after the upstream answered"
        if state.step is None:
            step = new_step(flow, state, self.journal, "succeeded", record=False)
            for k, v in fields.items():
                setattr(step, k, v)
            self.journal.record(step)
        else:
            self.journal.update(state.step, **fields, **state.outcome_fields)

    def error(self, flow: http.HTTPFlow) -> None:
        """The upstream could not be reached or the connection broke."""
        state = state_of(flow)
        if state is not None:
            self._landed(state)
        if state is None or state.answered:
            return
        message = flow.error.msg if flow.error else "connection error"
        if flow.response is not None:
            self._cut_short(flow, state, message)
            return
        duration = round((time.monotonic() - state.started) * 1000, 3)
        if state.step is None:
            step = new_step(flow, state, self.journal, "failed")
            step.error, step.duration_ms = message, duration
            self.journal.record(step)
            return
        # Connected upstream: the request may have been sent, so its outcome is unknown.
        server = flow.server_conn
        sent = server is not None and server.timestamp_tcp_setup is not None
        if sent:
            self.journal.update(
                state.step,
                status="unknown",
                error=message,
                duration_ms=duration,
                **streamed_request_fields(flow),  # what passed of a body streamed on, if one was
            )
            return
        self.journal.update(
            state.step,
            status="failed",
            error=message,
            duration_ms=duration,
            compensation=nothing(
                "never sent: the connection to the upstream was never made", "not_sent", message
            ),
        )
