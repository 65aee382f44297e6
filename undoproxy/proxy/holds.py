"""Holding requests for approval, as a mitmproxy addon (the Gate's `Holder`).

A held request is journaled (`held`) and its approval written ahead before the agent starts
waiting; then the hook awaits the approval's future, which holds only this flow: every other
request keeps flowing. Approved: the hook returns and the later addons forward it as usual.
Denied, timed out, expired, or anything unexpected: the agent gets the contract's 403 and
nothing is forwarded (this addon fails closed; it never lets a held request through by error).
Pending requests of a session that are byte-identical as the upstream would receive them
(method, URL, every forwarded header, body: `approvals.grouping.grouping_key`) share one
approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mitmproxy import connection, http

from undoproxy import redact
from undoproxy.approvals import badges
from undoproxy.approvals.diff import PREVIEW_METHODS, update_diff
from undoproxy.approvals.grouping import card_context, grouping_key
from undoproxy.approvals.queue import ApprovalQueue, Decision
from undoproxy.errors import JournalError
from undoproxy.limits import MUTATION_BODY_LIMIT
from undoproxy.proxy import answers
from undoproxy.proxy.bodies import body_identity, request_body, spooled
from undoproxy.proxy.state import FlowState
from undoproxy.proxy.steps import new_step
from undoproxy.store import approvals as store
from undoproxy.store.approvals import Approval
from undoproxy.store.journal import Journal
from undoproxy.store.records import Step, new_id

log = logging.getLogger(__name__)
Preview = Callable[[http.HTTPFlow, FlowState], Awaitable[dict[str, Any] | None]]
BODY_SHOWN = 64 * 1024  # of the pretty, redacted body
PREVIEW_TIMEOUT = 10.0


def fingerprint(flow: http.HTTPFlow) -> str:
    """Equal for two requests exactly when the upstream would receive the same bytes (method,
    URL, every forwarded header, body): only those share an approval."""
    request = flow.request
    return grouping_key(
        request.method, request.url, request.headers.items(multi=True), body_identity(flow)
    )


class Holds:
    """Parks held flows on approvals; expires approvals whose agents disconnected."""

    def __init__(
        self,
        queue: ApprovalQueue,
        journal: Journal,
        *,
        default_timeout: float,
        defaults_compensate: str = "auto",
        preview: Preview | None = None,
    ) -> None:
        self.queue = queue
        self.journal = journal
        self.default_timeout = default_timeout
        self.defaults_compensate = defaults_compensate
        self.preview = preview

    async def hold(self, flow: http.HTTPFlow, state: FlowState, timeout: float | None) -> None:
        """Return once approved; otherwise set the 403 (or 503) the agent gets."""
        try:
            await self._hold(flow, state, timeout or self.default_timeout)
        except Exception:
            log.exception("holding %s %s failed", flow.request.method, redact.url(flow.request.url))
            if flow.response is None:
                self._refuse(flow, state, None, Decision("denied", "undoproxy failed to hold it"))

    async def _hold(self, flow: http.HTTPFlow, state: FlowState, timeout: float) -> None:
        step = new_step(flow, state, self.journal, "held")
        try:
            await self.journal.write_ahead(step)
        except JournalError as exc:
            state.answered = True
            flow.response = answers.journal_unavailable(str(exc))
            return
        fp = fingerprint(flow)
        pending = self.queue.find(state.session_id, fp)
        if pending is not None:
            self.queue.join(pending, step.id, flow.id, flow.client_conn.id)
        else:
            pending = self.queue.open(self._approval(flow, state, step, fp))
            self.queue.join(pending, step.id, flow.id, flow.client_conn.id)
            pending.approval.context = await self._context(flow, state, step)
            # On JournalError the queue has failed the approval: `wait` returns that at once.
            with contextlib.suppress(JournalError):
                await self.queue.store(pending, timeout)
        log.info(
            "holding %s %s (session %s) for approval %s",
            flow.request.method,
            redact.url(flow.request.url),
            state.session_id,
            pending.approval.id,
        )
        decision = await self.queue.wait(pending)
        if decision.state != "approved":
            self._refuse(flow, state, pending.approval, decision)

    def _refuse(
        self, flow: http.HTTPFlow, state: FlowState, approval: Approval | None, decision: Decision
    ) -> None:
        state.answered = True
        rule = state.rule.name if state.rule is not None else None
        rule = rule or state.hold_source or "defaults.mutations"
        if decision.state == "failed":
            flow.response = answers.journal_unavailable(decision.reason)
        else:
            flow.response = answers.denied(
                rule,
                decision.reason,
                approval.id if approval else "",
                decision="timeout" if decision.state == "timed_out" else "denied",
            )
        if state.step is not None:
            self.journal.update(
                state.step,
                status="denied",
                response_status=flow.response.status_code,
                error=f"{decision.state}: {decision.reason}",
                duration_ms=round((time.monotonic() - state.started) * 1000, 3),
            )

    def _approval(self, flow: http.HTTPFlow, state: FlowState, step: Step, fp: str) -> Approval:
        now = time.time()
        rule = state.rule
        return Approval(
            id=new_id("ap"),
            session_id=state.session_id,
            step_id=step.id,
            fingerprint=fp,
            method=flow.request.method,
            url=redact.url(flow.request.url),
            created_at=now,
            expires_at=now,
            rule=rule.name if rule is not None else state.hold_source,
            risk=rule.risk if rule is not None else None,
        )

    async def _context(self, flow: http.HTTPFlow, state: FlowState, step: Step) -> dict[str, Any]:
        """What the page shows with the approval: body, badges, diff (all redacted)."""
        request = flow.request
        content_type = request.headers.get("Content-Type", "")
        decoded = request_body(flow, state)
        raw = decoded.body
        parsed: Any = None
        copy = spooled(flow)
        length = copy.length if copy is not None else len(raw)
        if decoded.problem is not None:
            shown = f"<{length} bytes as sent: {redact.text(decoded.problem)}>"
        elif raw and len(raw) <= MUTATION_BODY_LIMIT:
            try:
                parsed = json.loads(raw)
            except (ValueError, RecursionError):
                parsed = None
            shown = redact.body_text(raw, content_type) or ""
        else:
            shown = f"<{len(raw)} bytes: too large to show>" if raw else ""
        if len(shown) > BODY_SHOWN:
            shown = shown[:BODY_SHOWN] + "\n... (truncated)"
        host = request.pretty_host
        first = not await store.seen_host(self.journal, state.session_id, host, step.id)
        rule = state.rule
        context: dict[str, Any] = {
            "host": host,
            "content_type": content_type or None,
            "body": shown if length else None,
            "body_length": length,
            "badges": badges.compute(
                request.method,
                parsed,
                compensate=rule.compensate if rule is not None else None,
                defaults_compensate=self.defaults_compensate,
                first_to_host=first,
                host=host,
            ),
            "diff": None,
            "hold_reason": state.hold_reason,
            "intent": state.intent,
            # What will really be sent: the headers (secrets tagged, never shown) and any
            # method override the upstream may act on instead of the method shown.
            **card_context(request.url, request.headers.items(multi=True), raw, content_type),
        }
        if self.preview is not None and request.method in PREVIEW_METHODS:
            try:
                current = await asyncio.wait_for(self.preview(flow, state), PREVIEW_TIMEOUT)
            except Exception as exc:
                why = str(exc) or type(exc).__name__
                context["diff_error"] = f"could not read the current target: {why}"
            else:
                wanted = parsed if parsed is not None else raw.decode("utf-8", "replace")
                context["diff"] = update_diff(request.method, current, wanted)
        return context

    def client_disconnected(self, client: connection.Client) -> None:
        """The agent gave up: approvals none of whose requests remain expire."""
        self.queue.disconnected(client.id)

    async def done(self) -> None:
        """undoproxy stops: every pending approval expires (nothing held is ever forwarded)."""
        await self.queue.close()
