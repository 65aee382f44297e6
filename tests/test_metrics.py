"""GET /metrics after real traffic through a real undoproxy, parsed with prometheus_client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import rest
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.events import EventBus
from undoproxy.metrics import Metrics
from undoproxy.store.journal import step_event
from undoproxy.store.records import Step

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-patches",
        "match": {"host": "127.0.0.1", "method": "PATCH", "path": "/items/{id}"},
        "action": "hold",
    },
    {
        "name": "no-deletes",
        "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/items/{id}"},
        "action": "deny",
    },
]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def state() -> rest.RestState:
    s = rest.RestState()
    s.items = {"1": {"id": "1", "name": "Ada"}, "2": {"id": "2", "name": "Grace"}}
    return s


@pytest.fixture
def api(state: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = rest.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Undoproxy]:
    """A fresh undoproxy per test: its counters start at zero."""
    instance = Undoproxy(tmp_path, {"rules": RULES}).start()
    yield instance
    instance.stop()


def scrape(proxy: Undoproxy) -> Samples:
    r = proxy.api("GET", "/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_metrics_count_requests_holds_rollbacks_and_compensations(
    up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    before = state.snapshot()
    with up.agent(session_id) as agent:
        for item in ("1", "2", "1"):
            agent.get(f"{api.base_url}/items/{item}").raise_for_status()
        agent.post(f"{api.base_url}/items", json={"name": "Linus"}).raise_for_status()
        agent.put(f"{api.base_url}/items/1", json={"name": "Ada L."}).raise_for_status()
        assert agent.delete(f"{api.base_url}/items/2").status_code == 403  # denied by rule

        for verdict, expected in (("approve", 200), ("deny", 403)):
            url = f"{api.base_url}/items/2"
            held = in_thread(lambda u=url, v=verdict: agent.patch(u, json={"v": v}))
            approval = wait_pending(up, session_id)
            assert decide(up, approval["id"], verdict).status_code == 200
            assert held.result(timeout=30).status_code == expected

    pending = scrape(up)
    assert value(pending, "undoproxy_holds_pending") == 0

    r = up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["state"] == "rolled_back"
    assert state.items == before

    m = scrape(up)
    requests_by = {
        ("read", "pass"): 3,
        ("mutation", "log"): 2,  # defaults.mutations
        ("mutation", "hold"): 2,
        ("mutation", "deny"): 1,
        ("mutation", "allow"): 0,
    }
    for (kind, action), n in requests_by.items():
        assert value(m, "undoproxy_requests_total", kind=kind, action=action) == n, (kind, action)
    for outcome, n in (("approved", 1), ("denied", 1), ("timed_out", 0), ("expired", 0)):
        assert value(m, "undoproxy_holds_total", outcome=outcome) == n, outcome
        assert value(m, "undoproxy_decision_wait_seconds_count", outcome=outcome) == n, outcome
    assert value(m, "undoproxy_rollbacks_total", result="rolled_back") == 1
    assert value(m, "undoproxy_rollbacks_total", result="rollback_incomplete") == 0
    assert value(m, "undoproxy_rollback_duration_seconds_count") == 1

    # Each step the rollback reported, once, by the status it reported.
    reported: dict[str, int] = {}
    for step in report["steps"]:
        reported[step["status"]] = reported.get(step["status"], 0) + 1
    assert reported == {"compensated": 3, "skipped": 2}  # POST, PUT, PATCH; the refused two
    for status in ("compensated", "skipped", "failed", "conflict", "irreversible", "unverified"):
        n = reported.get(status, 0)
        assert value(m, "undoproxy_compensations_total", status=status) == n, status

    # Latency: what the upstream answered, held requests (a person's wait) excluded.
    assert value(m, "undoproxy_upstream_latency_seconds_count", kind="read") == 3
    assert value(m, "undoproxy_upstream_latency_seconds_count", kind="mutation") == 2

    # Steps are published again by the rollback: the requests were not counted twice.
    assert value(m, "undoproxy_requests_total", kind="mutation", action="log") == 2


def test_a_second_rollback_counts_only_its_own_results(
    up: Undoproxy, api: ThreadedServer, session_id: str
) -> None:
    with up.agent(session_id) as agent:
        agent.post(f"{api.base_url}/items", json={"name": "Linus"}).raise_for_status()
    for _ in range(2):
        r = up.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        assert r.status_code == 200, r.text
    m = scrape(up)
    assert value(m, "undoproxy_rollbacks_total", result="rolled_back") == 2
    assert value(m, "undoproxy_compensations_total", status="compensated") == 1
    assert value(m, "undoproxy_requests_total", kind="mutation", action="log") == 1


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789", "Basic eDp5"])
def test_metrics_need_the_admin_token(up: Undoproxy, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    r = requests.get(f"{up.admin_url}/metrics", headers=headers, timeout=10)
    assert r.status_code == 401
    assert r.json()["error"] == "unauthorized"
    assert "undoproxy_requests_total" not in r.text


def _count(metrics: Metrics, kind: str, action: str) -> float:
    value = metrics.registry.get_sample_value(
        "undoproxy_requests_total", {"kind": kind, "action": action}
    )
    assert value is not None
    return value


def test_a_step_published_at_every_change_is_counted_once_per_instance() -> None:
    # Two undoproxies in one process (two admin apps) never share a count.
    bus, other = EventBus(), EventBus()
    mine, theirs = Metrics(), Metrics()
    bus.listen(mine.observe)
    other.listen(theirs.observe)
    step = Step("st_1", "s", 1, "PUT", "https://api.test/x", True, "pending", action="log")
    for status in ("pending", "succeeded", "succeeded"):  # write-ahead, outcome, after-read
        step.status, step.response_status, step.duration_ms = status, 200, 12.5
        bus.publish("step", step_event(step))
    assert _count(mine, "mutation", "log") == 1
    assert _count(theirs, "mutation", "log") == 0
    latency = mine.registry.get_sample_value(
        "undoproxy_upstream_latency_seconds_count", {"kind": "mutation"}
    )
    assert latency == 1


def test_a_failing_listener_never_fails_the_publisher() -> None:
    bus, metrics = EventBus(), Metrics()

    def broken(kind: str, data: dict[str, Any]) -> None:
        raise RuntimeError("bug")

    bus.listen(broken)
    stop = bus.listen(metrics.observe)
    read = Step("st_2", "s", 1, "GET", "https://api.test/x", False, "succeeded", action="pass")
    bus.publish("step", step_event(read))  # does not raise; later listeners still run
    assert _count(metrics, "read", "pass") == 1
    stop()
    read.id = "st_3"
    bus.publish("step", step_event(read))
    assert _count(metrics, "read", "pass") == 1
