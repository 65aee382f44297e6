"""WebSockets: the upgrade is judged as a mutation, every message is journaled, and the kill
switch closes open sockets.

Once a WebSocket is open its messages pass no request hook, so undoproxy judges the upgrade
(a `GET` with `Upgrade: websocket`) as what it is, a channel for writes: it is a mutation
(a rule's `kind: read` may say otherwise), so rules, `defaults.mutations`, holds, budgets, the
kill switch and a closed session all apply to it, and its step is irreversible. Its step
`succeeded` with the 101 that opened the socket. Then every message is a step of its own,
method `WEBSOCKET`, at the upgrade's URL, with its direction, type, size and SHA-256 and its
first bytes (capped as bodies are, proxy/steps.py):

- sent by the agent: a `mutation`, written ahead (awaited) before it is relayed, with an
  irreversible compensation record (`rollback` reports it `irreversible`, never `skipped`).
  While its session is frozen (or everything is), closed, or over a `guard:` budget, the
  message is dropped, its step is `denied` and the socket is closed;
- received from the upstream: a `read`, journaled in the writer's next batch.

Freezing a session (or everything) and a session's commit or rollback close its open sockets
at once, on this replica and, through the journal's events, on the others. A closed socket
is closed under the agent (no WebSocket close frame reaches it: mitmproxy offers no way to
send one), and the upgrade's step records why, with how many messages went each way.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from mitmproxy import connection, http
from mitmproxy.websocket import WebSocketMessage

from undoproxy.errors import JournalError
from undoproxy.proxy.budgets import Budgets
from undoproxy.proxy.gate import OPEN_STATES
from undoproxy.proxy.state import FlowState, state_of
from undoproxy.proxy.steps import message_step
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)


def is_upgrade(request: http.Request) -> bool:
    """A request asking to switch to WebSocket (`Upgrade: websocket`)."""
    return "websocket" in request.headers.get("upgrade", "").lower()


class WebSockets:
    """Judges upgrades, journals messages, closes the sockets of stopped sessions.

    `proxyserver` is mitmproxy's Proxyserver addon (its live connections are closed through
    it); `budgets` are the gate's, so that messages count against `guard:` limits too.
    """

    def __init__(self, journal: Journal, proxyserver: Any, budgets: Budgets | None = None) -> None:
        self.journal = journal
        self.proxyserver = proxyserver
        self.budgets = budgets
        self._open: dict[str, dict[str, http.HTTPFlow]] = defaultdict(dict)  # session -> id -> flow
        self._stop_listening: list[Any] = []

    # --- the kill switch ------------------------------------------------------------------

    async def running(self) -> None:
        """Listen for freezes and closed sessions, here and on other replicas."""
        events = self.journal.events
        self._stop_listening = [events.listen(self._changed), events.listen_remote(self._changed)]

    async def done(self) -> None:
        """Stop listening."""
        for stop in self._stop_listening:
            stop()
        self._stop_listening = []

    def _changed(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "freeze" and data.get("all"):
            for session_id in list(self._open):
                self.close_session(session_id, "everything was frozen")
        elif kind == "session" and isinstance(data.get("id"), str):
            why = _stopped_why(self.journal, data["id"], data)
            if why is not None:
                self.close_session(data["id"], why)

    def close_session(self, session_id: str, why: str) -> int:
        """Close every open socket of the session; how many were open."""
        flows = list(self._open.get(session_id, {}).values())
        for flow in flows:
            self.close(flow, why)
        return len(flows)

    def close(self, flow: http.HTTPFlow, why: str) -> None:
        """Close the socket's connections now (nothing more is relayed either way)."""
        self._forget(flow, why)
        handler = self.proxyserver.connections.get(flow.client_conn.id)
        if handler is not None and flow.client_conn.connected:
            handler.close_connection(flow.client_conn)
        log.info("closed a WebSocket of session %s: %s", _session(flow), why)

    # --- hooks ----------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """An upgrade is a mutation (before the gate decides)."""
        state = state_of(flow)
        if state is None or flow.response is not None or not is_upgrade(flow.request):
            return
        state.websocket = True
        state.is_mutation = True

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        """The socket is open: remember it, unless its session stopped meanwhile."""
        state = state_of(flow)
        if state is None:
            self.close(flow, "no session state: undoproxy cannot journal this socket")
            return
        self._open[state.session_id][flow.id] = flow
        why = _stopped_why(self.journal, state.session_id)
        if why is not None:
            self.close(flow, why)

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        """Journal the message; refuse (drop it, close the socket) one the agent may not send."""
        assert flow.websocket is not None
        message = flow.websocket.messages[-1]
        # mitmproxy keeps every message of the socket on the flow: keep only this one.
        del flow.websocket.messages[:-1]
        state = state_of(flow)
        if state is None:
            message.drop()
            self.close(flow, "no session state: undoproxy cannot journal this socket")
            return
        _count(flow, message)
        if not message.from_client:
            self.journal.record(message_step(flow, state, self.journal, message, "succeeded"))
            return
        why = self._refused(state)
        if why is not None:
            self._deny(flow, state, message, why)
            return
        step = message_step(flow, state, self.journal, message, "pending")
        try:
            await self.journal.write_ahead(step)
        except JournalError as exc:
            message.drop()
            self.close(flow, f"the journal could not record a message: {exc}")
            return
        why = self._refused(state)  # the session may have stopped while it was written
        if why is not None:
            self.journal.update(step, status="denied", error=f"{why}: not relayed")
            message.drop()
            self.close(flow, why)
            return
        if self.budgets is not None:
            self.budgets.record(state.session_id, state.rule)
        self.journal.update(step, status="succeeded")

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        """The socket closed: record how."""
        ws = flow.websocket
        by = "agent" if ws is not None and ws.closed_by_client else "upstream"
        code = ws.close_code if ws is not None else None
        self._forget(flow, f"closed by the {by} (code {code})")

    def client_disconnected(self, client: connection.Client) -> None:
        """A socket whose agent went away without a close frame."""
        for flows in list(self._open.values()):
            for flow in list(flows.values()):
                if flow.client_conn.id == client.id:
                    self._forget(flow, "the agent's connection closed")

    # --- helpers --------------------------------------------------------------------------

    def _refused(self, state: FlowState) -> str | None:
        why = _stopped_why(self.journal, state.session_id)
        if why is None and self.budgets is not None:
            over = self.budgets.over(state.session_id, state.rule)
            if over is not None:
                why = over.message()
        return why

    def _deny(
        self, flow: http.HTTPFlow, state: FlowState, message: WebSocketMessage, why: str
    ) -> None:
        message.drop()
        step = message_step(flow, state, self.journal, message, "denied")
        step.error = f"{why}: not relayed; the socket was closed"
        self.journal.record(step)
        self.close(flow, why)

    def _forget(self, flow: http.HTTPFlow, why: str) -> None:
        """Drop the socket from the open ones and record on its upgrade step how it ended."""
        state = state_of(flow)
        if state is None:
            return
        if self._open.get(state.session_id, {}).pop(flow.id, None) is None:
            return  # already forgotten
        if not self._open[state.session_id]:
            del self._open[state.session_id]
        if state.step is not None:
            meta = dict(state.step.meta or {})
            meta["websocket"] = {**flow.metadata.get(_COUNTS, {}), "closed": why}
            self.journal.update(state.step, meta=meta)

    @property
    def open_sockets(self) -> int:
        """How many sockets are open now."""
        return sum(len(flows) for flows in self._open.values())


_COUNTS = "undoproxy_websocket"  # flow.metadata: messages sent and received so far


def _count(flow: http.HTTPFlow, message: WebSocketMessage) -> None:
    counts = flow.metadata.setdefault(_COUNTS, {"sent": 0, "received": 0})
    counts["sent" if message.from_client else "received"] += 1


def _stopped_why(
    journal: Journal, session_id: str, said: dict[str, Any] | None = None
) -> str | None:
    """Why the session may send nothing now (frozen, closed), or None."""
    if journal.frozen_all:
        return "everything is frozen"
    session = journal.sessions.get(session_id)
    frozen = bool(session is not None and session.frozen) or bool(said and said.get("frozen"))
    if frozen:
        return f"session {session_id!r} is frozen"
    state = (said or {}).get("state") or (session.state if session is not None else "open")
    if state not in OPEN_STATES:
        return f"session {session_id!r} is {state}"
    return None


def _session(flow: http.HTTPFlow) -> str:
    state = state_of(flow)
    return state.session_id if state is not None else "?"
