"""Fail closed: undoproxy's addons run in one order, every hook inside one guard.

mitmproxy catches an exception raised by an addon, logs "Addon error" and carries on: the flow
is forwarded with whatever the failed addon had not yet decided (no session, no rule, no
snapshot, no journal entry). A proxy whose job is to stop things must not do that. `FailClosed`
is the only addon of ours that mitmproxy sees; it calls ours in their fixed order and, when
one raises on a flow, answers the agent itself and stops the chain for that hook:

    http_connect, requestheaders, request   502 undoproxy_internal_error; nothing forwarded
    responseheaders, response               502 undoproxy_internal_error in place of the
                                            upstream's answer (which did happen: the body says
                                            `"forwarded": true` and the upstream's status)
    error                                   logged; the flow has already failed
    websocket_start, websocket_message      the message (if any) is dropped and the socket
                                            closed (`close_socket`): nothing more is relayed
    websocket_end                           logged

Once the request hooks have run, an answer of undoproxy's own is given the shape the agent's
protocol expects (`reshape`: an MCP client gets a JSON-RPC error in a 200, proxy/mcp.py).

The failure is logged with its traceback and journaled on the flow's step (a new `failed`
step when there was none yet; `unknown` when the request had been forwarded, so that rollback
decides it by reading the target). Hooks that are not about one flow (`running`, `done`,
`client_disconnected`) log the error and go on to the next addon.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from mitmproxy import connection, http

from undoproxy import redact
from undoproxy.compensators.record import nothing
from undoproxy.inflight import InFlight
from undoproxy.methods import is_mutation
from undoproxy.proxy import answers
from undoproxy.proxy.bodies import JUDGED_EARLY
from undoproxy.proxy.state import KEY, FlowState, state_of
from undoproxy.proxy.steps import new_step
from undoproxy.store.journal import Journal

log = logging.getLogger(__name__)

# The hooks undoproxy's addons may implement; FailClosed answers every one of them.
BEFORE_FORWARDING = ("http_connect", "requestheaders", "request")
AFTER_FORWARDING = ("responseheaders", "response")
FLOW_HOOKS = (*BEFORE_FORWARDING, *AFTER_FORWARDING, "error")
SOCKET_HOOKS = ("websocket_start", "websocket_message", "websocket_end")
OTHER_HOOKS = ("running", "done", "client_disconnected")
CloseSocket = Callable[[http.HTTPFlow, str], None]
Reshape = Callable[[http.HTTPFlow], None]


class FailClosed:
    """Runs `chain` (our addons, in order) for every hook; any exception answers the agent."""

    name = "undoproxy"

    def __init__(
        self,
        chain: Sequence[Any],
        journal: Journal,
        inflight: InFlight | None = None,
        close_socket: CloseSocket | None = None,
        reshape: Sequence[Reshape] = (),
    ) -> None:
        unknown = {
            f"{type(a).__name__}.{h}"
            for a in chain
            for h in dir(a)
            if not h.startswith("_") and h in _MITMPROXY_HOOKS and h not in HOOKS
        }
        if unknown:  # a hook FailClosed does not forward would silently never run
            raise TypeError(f"hooks not handled by FailClosed: {', '.join(sorted(unknown))}")
        self.chain = list(chain)
        # Per hook, the addons that implement it: a hook runs for every flow, so the chain is
        # not searched each time. The method itself is looked up when it runs (it may be
        # replaced on the instance, as the fault-injection tests do).
        self._implementing = {
            hook: tuple(a for a in self.chain if getattr(a, hook, None) is not None)
            for hook in HOOKS
        }
        self.journal = journal
        self.inflight = inflight
        self.close_socket = close_socket  # closes a WebSocket's connections (websockets.py)
        self.reshape = list(reshape)  # give undoproxy's own answers the agent's protocol
        self.failures = 0

    # --- flow hooks -----------------------------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        """CONNECT of a tunnel (identity is read here)."""
        await self._flow_hook("http_connect", flow)

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Request headers read, body not yet."""
        await self._flow_hook("requestheaders", flow)

    async def request(self, flow: http.HTTPFlow) -> None:
        """Whole request read; nothing forwarded yet (a request judged on its headers, a gRPC
        stream, ran this hook then: the one at the end of its body is not ours)."""
        if flow.metadata.get(JUDGED_EARLY) == "judged":
            return
        await self._flow_hook("request", flow)
        if flow.response is not None:
            for reshape in self.reshape:
                try:
                    reshape(flow)
                except Exception:  # the answer stays as it was: still a refusal
                    log.exception("could not reshape undoproxy's answer for its protocol")

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Upstream answered; body not yet read."""
        await self._flow_hook("responseheaders", flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        """Upstream's whole response read."""
        await self._flow_hook("response", flow)

    async def error(self, flow: http.HTTPFlow) -> None:
        """The flow failed (upstream unreachable, connection broken)."""
        await self._flow_hook("error", flow)

    # --- WebSocket hooks ------------------------------------------------------------------

    async def websocket_start(self, flow: http.HTTPFlow) -> None:
        """A WebSocket opened (after the 101)."""
        await self._socket_hook("websocket_start", flow)

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A WebSocket message arrived, not yet relayed (`flow.websocket.messages[-1]`)."""
        await self._socket_hook("websocket_message", flow)

    async def websocket_end(self, flow: http.HTTPFlow) -> None:
        """A WebSocket closed."""
        await self._socket_hook("websocket_end", flow)

    # --- other hooks ----------------------------------------------------------------------

    async def running(self) -> None:
        """The proxy is up."""
        await self._each("running")

    async def done(self) -> None:
        """The proxy is shutting down."""
        await self._each("done")

    async def client_disconnected(self, client: connection.Client) -> None:
        """An agent connection closed."""
        await self._each("client_disconnected", client)

    # --- the guard ------------------------------------------------------------------------

    async def _flow_hook(self, hook: str, flow: http.HTTPFlow) -> None:
        failed = flow.metadata.get(_FAILED)
        if failed is not None:  # an earlier hook of this flow failed: keep its answer
            if hook == "response":
                flow.response = failed
            return
        failure = await self._until_failure(hook, flow)
        if failure is not None:
            self._failed(hook, *failure, flow)

    async def _socket_hook(self, hook: str, flow: http.HTTPFlow) -> None:
        failure = await self._until_failure(hook, flow)
        if failure is not None:
            self._socket_failed(hook, *failure, flow)

    async def _until_failure(self, hook: str, flow: http.HTTPFlow) -> tuple[Any, Exception] | None:
        """Run `hook` of each addon that has it, in order, until one raises: that addon and
        its exception (the addons after it do not run), or None."""
        for addon in self._implementing[hook]:
            try:
                result = getattr(addon, hook)(flow)
                if result is not None and inspect.isawaitable(result):
                    await result
            except Exception as exc:
                return addon, exc
        return None

    def _socket_failed(self, hook: str, addon: Any, exc: Exception, flow: http.HTTPFlow) -> None:
        """Fail closed on a socket: drop the message at hand and close the socket."""
        self.failures += 1
        where = f"{type(addon).__name__}.{hook}"
        log.error(
            "internal error in %s on the WebSocket of %s: %s\n%s",
            where,
            redact.url(flow.request.pretty_url),
            type(exc).__name__,
            redact.text("".join(traceback.format_exception(exc))).rstrip(),
        )
        if hook == "websocket_end":
            return
        ws = flow.websocket
        if hook == "websocket_message" and ws is not None and ws.messages:
            ws.messages[-1].drop()
        if self.close_socket is not None:
            try:
                self.close_socket(flow, f"undoproxy internal error in {where}")
            except Exception:
                log.exception("could not close the WebSocket after an internal error")

    async def _each(self, hook: str, *args: Any) -> None:
        for addon in self._implementing[hook]:
            try:
                result = getattr(addon, hook)(*args)
                if result is not None and inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("undoproxy addon %s failed in %s", type(addon).__name__, hook)

    def _failed(self, hook: str, addon: Any, exc: Exception, flow: http.HTTPFlow) -> None:
        self.failures += 1
        where = f"{type(addon).__name__}.{hook}"
        # The traceback goes to the log as text, redacted: an exception's message may carry
        # a URL or a header value of the request.
        log.error(
            "internal error in %s on %s %s: %s\n%s",
            where,
            flow.request.method,
            redact.url(flow.request.pretty_url),
            type(exc).__name__,
            redact.text("".join(traceback.format_exception(exc))).rstrip(),
        )
        if hook == "error":
            return
        forwarded = hook in AFTER_FORWARDING
        upstream_status = flow.response.status_code if forwarded and flow.response else None
        step_id = self._journal(flow, where, exc, forwarded)
        answer = answers.internal_error(step_id, forwarded, upstream_status)
        if hook == "responseheaders":
            # mitmproxy still reads the upstream's body into the response after this hook:
            # buffer it, and put our answer in its place once it is complete.
            assert flow.response is not None
            flow.response.stream = False
            flow.metadata[_FAILED] = answer
        else:
            flow.response = answer

    def _journal(self, flow: http.HTTPFlow, where: str, exc: Exception, forwarded: bool) -> str:
        """Record the failure on the flow's step (or a new one); never raises."""
        error = f"undoproxy internal error in {where}: {type(exc).__name__}"
        try:
            state = state_of(flow)
            if state is not None and state.in_flight and self.inflight is not None:
                state.in_flight = False  # its answer is in: a freeze must not wait for it
                self.inflight.ended(state.session_id)
            if state is None:  # identity itself failed: the request is filed under default
                state = FlowState("default", is_mutation(flow.request.method))
                flow.metadata[KEY] = state
                self.journal.ensure_session("default")
            state.answered = True
            if state.step is not None:
                if forwarded and state.is_mutation:
                    self.journal.update(state.step, status="unknown", error=error)
                elif state.step.status in ("pending", "held"):
                    kept = nothing("never forwarded: undoproxy failed before", "not_forwarded")
                    self.journal.update(state.step, status="failed", error=error, compensation=kept)
                else:  # it had an outcome already: only the error is added
                    self.journal.update(state.step, error=error)
                return state.step.id
            step = new_step(flow, state, self.journal, "failed")
            step.error = error
            if state.is_mutation and not forwarded:
                step.compensation = nothing(
                    "never forwarded: undoproxy failed before", "not_forwarded"
                )
            self.journal.record(step)
            return step.id
        except Exception:
            log.exception("could not journal the internal error in %s", where)
            return ""


_FAILED = "undoproxy_failed"  # flow.metadata: the answer of a hook that failed earlier

# Hook names mitmproxy would call on an addon (a subset we check our addons against).
_MITMPROXY_HOOKS = frozenset(
    {
        *FLOW_HOOKS,
        *SOCKET_HOOKS,
        *OTHER_HOOKS,
        "load",
        "configure",
        "client_connected",
        "server_connect",
        "server_connected",
        "server_disconnected",
        "tls_clienthello",
        "tls_start_client",
        "tls_start_server",
        "update",
    }
)
HOOKS = frozenset({*FLOW_HOOKS, *SOCKET_HOOKS, *OTHER_HOOKS})
