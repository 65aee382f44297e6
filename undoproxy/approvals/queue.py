"""The approvals queue: pending approvals in memory, each with the one future its flows await.

Lifecycle of an approval: `open` (registered, so identical requests can join it at once) →
`store` (written ahead, then the timer starts, the page and webhooks are told) → exactly one
of: approved or denied by a person (`decide`), timed out (its timer), expired (every agent
waiting on it disconnected, or undoproxy stopped). The first decision wins: the state is
claimed in memory before anything is awaited, so a second one finds it taken and gets 409.

Usage from a hook (the fingerprint is `grouping.grouping_key` of the request: only
byte-identical requests, headers included, share an approval):

    pending = queue.find(session_id, fingerprint) or queue.open(approval)
    queue.join(pending, step_id, flow_id, client_id)
    decision = await queue.wait(pending)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from undoproxy.approvals.notify import Webhooks
from undoproxy.approvals.views import approval_json, notify_text
from undoproxy.errors import JournalError, UndoproxyError
from undoproxy.store import approvals as store
from undoproxy.store.approvals import Approval
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)
FROZEN_SESSION = "the session was frozen (kill switch); this request was never forwarded"
FROZEN_ALL = "every session was frozen (kill switch); this request was never forwarded"
ROLLING_BACK = "the session is being rolled back; this request was never forwarded"


class ApprovalError(UndoproxyError):
    """A decision that cannot be taken; `status` is the HTTP status the API answers."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Decision:
    """What became of an approval: approved, denied, timed_out, expired (or failed to store)."""

    state: str
    reason: str
    by: str | None = None


@dataclass
class Pending:
    """An approval still waiting, with the flows parked on it."""

    approval: Approval
    future: asyncio.Future[Decision]
    waiting: dict[str, str] = field(default_factory=dict)  # flow id -> client connection id
    stored: bool = False  # its INSERT is queued: later joiners are written by UPDATE
    timer: asyncio.TimerHandle | None = None


class ApprovalQueue:
    """Every pending approval of the running undoproxy, and the decisions on them."""

    def __init__(self, journal: Journal, webhooks: Webhooks | None = None) -> None:
        self.journal = journal
        self.webhooks = webhooks
        self.admin_url = ""  # set once the admin app listens; used in webhook links
        self._by_id: dict[str, Pending] = {}
        self._by_fingerprint: dict[tuple[str, str], Pending] = {}
        self._by_client: dict[str, set[str]] = {}  # client connection id -> approval ids
        self._tasks: set[asyncio.Task[None]] = set()
        journal.events.listen_remote(self._arrived)

    async def recover(self) -> int:
        """Expire what an earlier run left pending (its agents are gone); call before serving."""
        count = await store.expire_stale(self.journal)
        if count:
            log.info("%d approval(s) left pending by the last run are now expired", count)
        return count

    # --- held flows -----------------------------------------------------------------------

    def find(self, session_id: str, fingerprint: str) -> Pending | None:
        """The pending approval an identical request of the session is already waiting on."""
        pending = self._by_fingerprint.get((session_id, fingerprint))
        return pending if pending is not None and pending.approval.state == "pending" else None

    def open(self, approval: Approval) -> Pending:
        """Register a new approval (not yet stored) so identical requests join it.

        A session frozen meanwhile (the kill switch) gets it denied at once: a freeze denies
        what is registered (`deny_session`, `deny_all`) once its switch is on, so every
        approval is either registered before the switch, or sees it here.
        """
        pending = Pending(approval, asyncio.get_running_loop().create_future())
        frozen = self._frozen(approval.session_id)
        if frozen is not None:
            self._claim(pending, "denied", frozen, "undoproxy")
            pending.future.set_result(self._decision(pending))
            return pending
        self._by_id[approval.id] = pending
        self._by_fingerprint[(approval.session_id, approval.fingerprint)] = pending
        return pending

    def join(self, pending: Pending, step_id: str, flow_id: str, client_id: str) -> None:
        """Park one more flow (with its own step) on an approval."""
        pending.waiting[flow_id] = client_id
        self._by_client.setdefault(client_id, set()).add(pending.approval.id)
        if step_id not in pending.approval.step_ids:
            pending.approval.step_ids.append(step_id)
            if pending.stored:
                self.journal.writer.submit(store.SET_STEPS, store.decide_params(pending.approval))
                self._publish(pending.approval)

    async def store(self, pending: Pending, timeout: float) -> None:
        """Write the approval ahead, start its timer, tell the page and the webhooks.

        Raises JournalError (after failing every flow waiting on it) when it cannot be written.
        """
        approval = pending.approval
        approval.created_at = time.time()
        approval.expires_at = approval.created_at + timeout
        pending.stored = True
        try:
            await self.journal.writer.write(store.INSERT, approval.to_row())
        except JournalError as exc:
            self._finish(pending, Decision("failed", str(exc)), publish=False)
            raise
        if approval.state != "pending":  # decided before it was stored (a freeze)
            self._publish(approval)
            return
        pending.timer = asyncio.get_running_loop().call_later(timeout, self._time_out, pending)
        self._publish(approval)
        if self.webhooks is not None and self.webhooks.urls:
            self.webhooks.send(notify_text(approval, self.admin_url))

    async def wait(self, pending: Pending) -> Decision:
        """The decision on an approval (shared by every flow waiting on it)."""
        return await asyncio.shield(pending.future)

    def disconnected(self, client_id: str) -> None:
        """An agent connection closed: approvals none of whose flows remain are expired."""
        for approval_id in self._by_client.pop(client_id, set()):
            pending = self._by_id.get(approval_id)
            if pending is None:
                continue
            gone = [f for f, c in pending.waiting.items() if c == client_id]
            for flow_id in gone:
                del pending.waiting[flow_id]
            if not pending.waiting and pending.approval.state == "pending":
                self._claim(pending, "expired", "the agent disconnected before anyone decided")
                self.journal.writer.submit(store.DECIDE, store.decide_params(pending.approval))
                self._finish(pending, self._decision(pending))

    # --- decisions --------------------------------------------------------------------------

    async def decide(
        self, approval_id: str, *, approve: bool, by: str, reason: str | None
    ) -> Approval:
        """Approve or deny; raises ApprovalError (404, 409, 400 or 503) when that cannot be."""
        pending = self._by_id.get(approval_id)
        reason = (reason or "").strip() or None
        if pending is None or not pending.stored:
            await self.journal.writer.flush()
            known = await store.load(self.journal, approval_id)
            if known is None:
                raise ApprovalError(404, "not_found", f"no approval {approval_id!r}")
            if pending is None and known.state == "pending" and self.journal.shared:
                return await self._decide_elsewhere(known, approve, by, reason)
            raise ApprovalError(409, "conflict", _already(known))
        approval = pending.approval
        if approval.state != "pending":
            raise ApprovalError(409, "conflict", _already(approval))
        _require_reason(approval, reason)
        self._claim(pending, "approved" if approve else "denied", reason, by)
        try:
            changed = await self.journal.writer.write(store.DECIDE, store.decide_params(approval))
        except JournalError as exc:
            # Not durable, so not decided: put it back (and time it out if its time has come).
            approval.state, approval.decided_at, approval.decided_by = "pending", None, None
            approval.reason = None
            if time.time() >= approval.expires_at:
                self._time_out(pending)
            raise ApprovalError(503, "journal_unavailable", str(exc)) from None
        if changed == []:  # a shared journal: another replica decided first (its decision holds)
            await self._adopt(pending)
            raise ApprovalError(409, "conflict", _already(pending.approval))
        self._finish(pending, self._decision(pending))
        return approval

    async def _decide_elsewhere(
        self, known: Approval, approve: bool, by: str, reason: str | None
    ) -> Approval:
        """Decide an approval another replica holds: the database takes the first decision
        (a conditional update); the holder hears of it (`_arrived`) and acts on it."""
        _require_reason(known, reason)
        known.state = "approved" if approve else "denied"
        known.decided_at, known.decided_by, known.reason = time.time(), by, reason
        try:
            changed = await self.journal.writer.write(store.DECIDE, store.decide_params(known))
        except JournalError as exc:
            raise ApprovalError(503, "journal_unavailable", str(exc)) from None
        if not changed:
            now = await store.load(self.journal, known.id)
            raise ApprovalError(409, "conflict", _already(now or known))
        self._publish(known)
        return known

    def _arrived(self, kind: str, data: dict[str, Any]) -> None:
        """A change on another replica (shared journals) that requests held here depend on:
        their approval was decided, their session was frozen or is being rolled back, or
        every session was frozen."""
        work: Coroutine[Any, Any, Any] | None = None
        if kind == "approval" and isinstance(data.get("id"), str):
            work = self._apply_remote(data["id"])
        elif kind == "session" and isinstance(data.get("id"), str):
            if data.get("frozen"):
                work = self.deny_session(data["id"], FROZEN_SESSION)
            elif data.get("state") == "rolling_back":
                work = self.deny_session(data["id"], ROLLING_BACK)
        elif kind == "freeze" and data.get("all"):
            work = self.deny_all(FROZEN_ALL)
        elif kind == "rejoined":  # deaf for a while: what was decided elsewhere meanwhile?
            work = self._recheck_all()
        if work is not None:
            task = asyncio.get_running_loop().create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _recheck_all(self) -> None:
        """Every request held here, checked against the journal: approvals decided, sessions
        frozen or rolled back while this replica could not hear the others."""
        if self.journal.frozen_all:
            await self.deny_all(FROZEN_ALL)
        for pending in list(self._by_id.values()):
            session = self.journal.sessions.get(pending.approval.session_id)
            if session is not None and session.frozen:
                await self.deny_session(session.id, FROZEN_SESSION)
            elif session is not None and session.state != "open":
                await self.deny_session(session.id, ROLLING_BACK)
            else:
                await self._apply_remote(pending.approval.id)

    async def _apply_remote(self, approval_id: str) -> None:
        known = await store.load(self.journal, approval_id)
        if known is None:
            return
        pending = self._by_id.get(approval_id)
        if pending is not None and pending.approval.state == "pending" and known.state != "pending":
            await self._adopt(pending, known)
            self._finish(pending, self._decision(pending), publish=False)
            known = pending.approval
        self.journal.events.publish("approval", approval_json(known, self.journal), remote=True)

    async def _adopt(self, pending: Pending, known: Approval | None = None) -> None:
        """Take the decision the journal has for an approval held here."""
        known = known or await store.load(self.journal, pending.approval.id)
        if known is None:
            return
        approval = pending.approval
        approval.state, approval.reason = known.state, known.reason
        approval.decided_at, approval.decided_by = known.decided_at, known.decided_by

    async def deny_session(self, session_id: str, reason: str) -> int:
        """Deny every pending approval of a session (rolled back, or frozen); how many."""
        return await self._deny(reason, session_id)

    async def deny_all(self, reason: str) -> int:
        """Deny every pending approval of every session (the global kill switch); how many."""
        return await self._deny(reason)

    async def _deny(self, reason: str, session_id: str | None = None) -> int:
        mine = [
            p
            for p in self._by_id.values()
            if p.approval.state == "pending"
            and (session_id is None or p.approval.session_id == session_id)
        ]
        for pending in mine:
            self._claim(pending, "denied", reason, "undoproxy")
            self.journal.writer.submit(store.DECIDE, store.decide_params(pending.approval))
            self._finish(pending, self._decision(pending))
        if mine:
            await self.journal.writer.flush()
        return len(mine)

    def _frozen(self, session_id: str) -> str | None:
        """Why a new approval of this session is denied at once (None: it is not frozen)."""
        if self.journal.frozen_all:
            return FROZEN_ALL
        session = self.journal.sessions.get(session_id)
        return FROZEN_SESSION if session is not None and session.frozen else None

    def _time_out(self, pending: Pending) -> None:
        if pending.approval.state != "pending":
            return
        seconds = pending.approval.expires_at - pending.approval.created_at
        self._claim(pending, "timed_out", f"nobody decided within {seconds:g}s")
        if self.journal.shared:  # another replica may have decided it meanwhile: ask first
            task = asyncio.get_running_loop().create_task(self._time_out_shared(pending))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self.journal.writer.submit(store.DECIDE, store.decide_params(pending.approval))
        self._finish(pending, self._decision(pending))

    async def _time_out_shared(self, pending: Pending) -> None:
        try:
            changed = await self.journal.writer.write(
                store.DECIDE, store.decide_params(pending.approval)
            )
        except JournalError:
            changed = None  # timed out here all the same: nothing is forwarded
        if changed == []:  # decided on another replica first: that decision holds
            await self._adopt(pending)
        self._finish(pending, self._decision(pending))

    @staticmethod
    def _claim(pending: Pending, state: str, reason: str | None, by: str | None = None) -> None:
        approval = pending.approval
        approval.state, approval.reason, approval.decided_by = state, reason, by
        approval.decided_at = time.time()

    @staticmethod
    def _decision(pending: Pending) -> Decision:
        approval = pending.approval
        by = approval.decided_by
        default = f"{approval.state} by {by}" if by else approval.state
        return Decision(approval.state, approval.reason or default, by)

    def _finish(self, pending: Pending, decision: Decision, *, publish: bool = True) -> None:
        approval = pending.approval
        self._by_id.pop(approval.id, None)
        key = (approval.session_id, approval.fingerprint)
        if self._by_fingerprint.get(key) is pending:
            del self._by_fingerprint[key]
        if pending.timer is not None:
            pending.timer.cancel()
        for client_id in pending.waiting.values():
            ids = self._by_client.get(client_id)
            if ids is not None:
                ids.discard(approval.id)
                if not ids:
                    del self._by_client[client_id]
        if not pending.future.done():
            pending.future.set_result(decision)
        if publish:
            self._publish(approval)

    def _publish(self, approval: Approval) -> None:
        self.journal.events.publish("approval", approval_json(approval, self.journal))

    # --- reading and stopping -------------------------------------------------------------

    async def get(self, approval_id: str) -> Approval | None:
        """One approval, pending (from memory) or not (from the journal)."""
        pending = self._by_id.get(approval_id)
        if pending is not None and pending.stored:
            return pending.approval
        await self.journal.writer.flush()
        return await store.load(self.journal, approval_id)

    async def recent(
        self, *, state: str | None = None, session_id: str | None = None, limit: int = 200
    ) -> list[Approval]:
        """Approvals newest first, as committed (everything queued so far included)."""
        await self.journal.writer.flush()
        return await store.load_many(self.journal, state=state, session_id=session_id, limit=limit)

    async def close(self) -> None:
        """Undoproxy stops: nothing pending can be forwarded any more, so it all expires."""
        for pending in list(self._by_id.values()):
            if pending.approval.state == "pending":
                self._claim(pending, "expired", "undoproxy stopped before anyone decided")
                if pending.stored:
                    self.journal.writer.submit(store.DECIDE, store.decide_params(pending.approval))
            self._finish(pending, self._decision(pending))
        if self.webhooks is not None:
            await self.webhooks.close()


def _require_reason(approval: Approval, reason: str | None) -> None:
    if approval.risk == "critical" and reason is None:
        raise ApprovalError(
            400, "reason_required", "this request is critical risk: give a reason to decide"
        )


def _already(approval: Approval) -> str:
    who = f" by {approval.decided_by}" if approval.decided_by else ""
    return f"approval {approval.id} is already {approval.state}{who}; it cannot be decided again"
