"""Prometheus metrics, built from the event bus: nothing in the proxy's path counts anything.

`Metrics.observe` listens on the application's `EventBus` (see events.py) and turns the step,
approval and session events the journal and the approvals queue publish into counters and
histograms. Each thing is counted once:

- a request when its step first reaches an outcome (`succeeded`, `failed`, `denied`,
  `unknown`), by kind (`read`, `mutation`) and action (`pass`, `allow`, `log`, `hold`,
  `deny`). Its duration goes into the upstream latency histogram when the upstream answered
  and nobody held it (a hold's wait for a person is the decision wait, not latency);
- a hold when its approval is decided (`approved`, `denied`, `timed_out`, `expired`), with
  the wait from held to decided;
- a rollback when its session leaves `rolling_back` (`rolled_back`, `rollback_incomplete`),
  with its duration, and then the result each of its mutation steps got in that run
  (`compensated`, `unverified`, `failed`, `conflict`, `irreversible`, `skipped`);
- a secret of the credential broker each time it is sent upstream, by its entry's name and
  by who sent it (`agent`: put into an agent's request; `undoproxy`: its own snapshot, read
  or undo). The broker calls `secret_used` (broker/api.py wires it); names only, never values.

A step is published again each time its status changes; the ids of steps already counted are
kept in a bounded set (the newest `SEEN_LIMIT`), which is enough for the late updates of a
step (an after-read, an internal error) to find it. Each registry belongs to one `Metrics`
(one admin app), so several undoproxies in one process never share counts.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from undoproxy.rollback.verdict import REPORT_STATUSES

SEEN_LIMIT = 65536
KINDS = ("read", "mutation")
ACTIONS = ("pass", "allow", "log", "hold", "deny")
OUTCOMES = frozenset({"succeeded", "failed", "denied", "unknown"})  # a request's end
HOLD_OUTCOMES = ("approved", "denied", "timed_out", "expired")
ROLLBACK_RESULTS = ("rolled_back", "rollback_incomplete")
COMPENSATION_STATUSES = tuple(s for s in REPORT_STATUSES if s != "planned")  # dry runs: none

# Seconds. A person decides in seconds to minutes (the default timeout is 5 minutes).
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
ROLLBACK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass
class _Run:
    """A rollback in progress: when it started, and each step's latest result in it."""

    started: float
    results: dict[str, str] = field(default_factory=dict)


class Metrics:
    """The metrics of one running undoproxy; `observe` is an `EventBus` listener."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        self.requests = Counter(
            "undoproxy_requests",
            "Requests agents made, by kind and by the action undoproxy took",
            ["kind", "action"],
            registry=r,
        )
        self.holds = Counter(
            "undoproxy_holds", "Held requests, by how their approval ended", ["outcome"], registry=r
        )
        self.holds_pending = Gauge(
            "undoproxy_holds_pending", "Approvals waiting for a decision now", registry=r
        )
        self.rollbacks = Counter(
            "undoproxy_rollbacks",
            "Session rollbacks, by the state they left",
            ["result"],
            registry=r,
        )
        self.compensations = Counter(
            "undoproxy_compensations",
            "Mutation steps a rollback decided, by the result it reported",
            ["status"],
            registry=r,
        )
        self.decision_wait = Histogram(
            "undoproxy_decision_wait_seconds",
            "From a request being held to its approval being decided",
            ["outcome"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.rollback_duration = Histogram(
            "undoproxy_rollback_duration_seconds",
            "From a session entering rolling_back to it leaving it",
            buckets=ROLLBACK_BUCKETS,
            registry=r,
        )
        self.secret_uses = Counter(
            "undoproxy_secret_uses",
            "Times a secret of `secrets:` was sent upstream, by entry name and by who sent it",
            ["secret", "by"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "undoproxy_upstream_latency_seconds",
            "From an agent's request to the upstream's answer (held requests excluded)",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # Every series exists from the start (at 0), so rates and alerts work before traffic;
        # the children are kept so counting costs a dict lookup, not a labels() call.
        self._request_counters = {
            (k, a): self.requests.labels(k, a) for k in KINDS for a in ACTIONS
        }
        self._latency = {k: self.upstream_latency.labels(k) for k in KINDS}
        for outcome in HOLD_OUTCOMES:
            self.holds.labels(outcome)
            self.decision_wait.labels(outcome)
        for result in ROLLBACK_RESULTS:
            self.rollbacks.labels(result)
        for status in COMPENSATION_STATUSES:
            self.compensations.labels(status)
        # Step ids, oldest first. An OrderedDict: dropping a plain dict's first key again and
        # again scans the holes left before it (measured: 20 times slower at this size).
        self._counted: OrderedDict[str, None] = OrderedDict()
        self._pending: set[str] = set()  # approval ids waiting for a decision
        self._runs: dict[str, _Run] = {}  # session id -> its rollback in progress

    def secrets_known(self, names: list[str], users: tuple[str, ...]) -> None:
        """Create every secret's series at 0, so that rates work before its first use."""
        for name in names:
            for by in users:
                self.secret_uses.labels(name, by)

    def secret_used(self, name: str, by: str) -> None:
        """Count one use of secret `name` by `by` (a broker listener)."""
        self.secret_uses.labels(name, by).inc()

    def observe(self, kind: str, data: dict[str, Any]) -> None:
        """Count one event of the bus (`step`, `approval` or `session`)."""
        if kind == "step":
            self._step(data)
        elif kind == "approval":
            self._approval(data)
        elif kind == "session":
            self._session(data)

    # --- the events -------------------------------------------------------------------------

    def _step(self, data: dict[str, Any]) -> None:
        if data.get("compensation_status") is not None:
            # Only rollback writes a compensation status: a result, not a request.
            run = self._runs.get(data["session_id"])
            if run is not None and data["status"] != "compensating":
                run.results[data["id"]] = data["compensation_status"]
            return
        if data["status"] not in OUTCOMES:
            return
        step_id = data["id"]
        if step_id in self._counted:
            return
        self._counted[step_id] = None
        if len(self._counted) > SEEN_LIMIT:
            self._counted.popitem(last=False)
        kind = "mutation" if data.get("is_mutation") else "read"
        action = data.get("action") or "pass"
        counter = self._request_counters.get((kind, action))
        if counter is None:  # an action this module does not know yet: counted all the same
            counter = self._request_counters[(kind, action)] = self.requests.labels(kind, action)
        counter.inc()
        duration = data.get("duration_ms")
        answered = data.get("response_status") is not None and data["status"] != "denied"
        if duration is not None and answered and action != "hold":
            self._latency[kind].observe(duration / 1000)

    def _approval(self, data: dict[str, Any]) -> None:
        approval_id, state = data["id"], data["state"]
        if state == "pending":
            self._pending.add(approval_id)
        elif state in HOLD_OUTCOMES:
            self._pending.discard(approval_id)
            self.holds.labels(state).inc()
            created, decided = data.get("created_at"), data.get("decided_at")
            if created is not None and decided is not None:
                self.decision_wait.labels(state).observe(max(0.0, decided - created))
        self.holds_pending.set(len(self._pending))

    def _session(self, data: dict[str, Any]) -> None:
        session_id, state = data["id"], data["state"]
        if state == "rolling_back":
            # Published again by other changes (a freeze) while it runs: the run goes on.
            self._runs.setdefault(session_id, _Run(data["updated_at"]))
            return
        if state not in ROLLBACK_RESULTS:
            return
        run = self._runs.pop(session_id, None)
        if run is None:
            return
        self.rollbacks.labels(state).inc()
        self.rollback_duration.observe(max(0.0, data["updated_at"] - run.started))
        for status in run.results.values():
            self.compensations.labels(status).inc()
