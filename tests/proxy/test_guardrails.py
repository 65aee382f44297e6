"""Guardrails through the real proxy: budgets, loop detection, hold-irreversible, hold_at.

Each test checks what reached the upstream (its own record) and what the agent was told.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import received
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy, run_cli
from tests.support.servers import ThreadedServer


def _posts(server: ThreadedServer, marker: str) -> list[str]:
    return [r.method for r in received(server) if marker in r.path and r.method != "GET"]


def test_a_session_budget_refuses_the_mutation_past_it_and_survives_a_restart(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    config = {"guard": {"max_mutations": 2}}
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/budget/{marker}"
    first = Undoproxy(tmp_path, config).start()
    try:
        with first.agent(session_id) as agent:
            assert agent.post(url, json={"n": 1}).status_code == 200
            assert agent.post(url, json={"n": 2}).status_code == 200
            refused = agent.post(url, json={"n": 3})
            assert agent.get(url).status_code == 200  # reads are not budgeted
    finally:
        assert first.stop() == 0
    assert refused.status_code == 403
    assert refused.json() == {
        "error": "undoproxy_budget",
        "limit": "max_mutations",
        "max": 2,
        "scope": "session",
        "session": session_id,
        "reason": "this session may make at most 2 mutations (guard.max_mutations)",
    }
    assert _posts(tls_upstream, marker) == ["POST", "POST"]

    again = Undoproxy(tmp_path, config).start()  # same journal: the count is remembered
    try:
        with again.agent(session_id) as agent:
            assert agent.post(url, json={"n": 4}).status_code == 403
        with again.agent(f"{session_id}-other") as agent:
            assert agent.post(url, json={"n": 5}).status_code == 200  # budgets are per session
    finally:
        again.stop()
    assert _posts(tls_upstream, marker) == ["POST", "POST", "POST"]


def test_a_rule_budget_counts_only_that_rules_matches(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    rules = [
        {
            "name": "charges",
            "match": {"method": "POST", "path": "/charges/**"},
            "guard": {"max_mutations_per_minute": 1},
        }
    ]
    marker = uuid.uuid4().hex
    instance = Undoproxy(tmp_path, {"rules": rules}).start()
    try:
        with instance.agent(session_id) as agent:
            assert agent.post(f"{tls_upstream.base_url}/charges/{marker}", json={}).ok
            refused = agent.post(f"{tls_upstream.base_url}/charges/{marker}", json={"b": 1})
            other = agent.post(f"{tls_upstream.base_url}/notes/{marker}", json={})
    finally:
        instance.stop()
    assert refused.status_code == 403
    body = refused.json()
    assert (body["limit"], body["max"], body["scope"]) == (
        "max_mutations_per_minute",
        1,
        "rule charges",
    )
    assert other.status_code == 200
    assert [r.path.split("/")[1] for r in received(tls_upstream) if marker in r.path] == [
        "charges",
        "notes",
    ]


@pytest.fixture
def looping(tmp_path: Path) -> Any:
    instance = Undoproxy(tmp_path, {"guard": {"repeat": {"count": 2, "window": "10m"}}})
    instance.start()
    yield instance
    instance.stop()


def test_the_same_write_repeated_too_often_is_held_as_a_loop(
    looping: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/loop/{marker}"
    agent = looping.agent(session_id)
    assert agent.post(url, json={"same": True}).status_code == 200
    assert agent.post(url, json={"same": True}).status_code == 200
    assert agent.post(url, json={"other": True}).status_code == 200  # not the same write
    third = in_thread(lambda: agent.post(url, json={"same": True}, timeout=60))
    approval = wait_pending(looping, session_id)
    assert approval["rule"] == "guard.repeat"
    assert "repeated 3 times in 600s" in approval["hold_reason"]
    assert _posts(tls_upstream, marker) == ["POST", "POST", "POST"]  # the third is waiting
    assert decide(looping, approval["id"], "deny", reason="stuck").status_code == 200
    answer = third.result(30)
    assert answer.status_code == 403 and answer.json()["rule"] == "guard.repeat"
    assert _posts(tls_upstream, marker) == ["POST", "POST", "POST"]


def test_hold_irreversible_holds_only_what_cannot_be_undone(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    instance = Undoproxy(tmp_path, {"defaults": {"mutations": "hold-irreversible"}}).start()
    try:
        marker = uuid.uuid4().hex
        agent = instance.agent(session_id)
        # PUT has a compensation (restore from the snapshot): it flows.
        assert agent.put(f"{tls_upstream.base_url}/ok/{marker}", json={"a": 1}).ok
        # A cache PURGE has none (no pack knows it; MKCOL would be undone by the webdav pack):
        # it waits for a person.
        held = in_thread(
            lambda: agent.request("PURGE", f"{tls_upstream.base_url}/dav/{marker}/", timeout=60)
        )
        approval = wait_pending(instance, session_id)
        assert "no compensation is known" in approval["hold_reason"]
        assert [r.method for r in received(tls_upstream) if f"/dav/{marker}" in r.path] == []
        assert decide(instance, approval["id"], "approve").status_code == 200
        assert held.result(30).status_code == 200
        assert [r.method for r in received(tls_upstream) if f"/dav/{marker}" in r.path] == ["PURGE"]
    finally:
        instance.stop()


def test_hold_at_holds_allowed_requests_of_high_risk_rules(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    rules = [
        {"name": "refunds", "match": {"path": "/refunds/**"}, "risk": "high"},
        {"name": "notes", "match": {"path": "/notes/**"}, "risk": "medium"},
    ]
    config = {"approvals": {"hold_at": "high"}, "rules": rules}
    instance = Undoproxy(tmp_path, config).start()
    try:
        marker = uuid.uuid4().hex
        agent = instance.agent(session_id)
        assert agent.post(f"{tls_upstream.base_url}/notes/{marker}", json={}).ok
        held = in_thread(
            lambda: agent.post(f"{tls_upstream.base_url}/refunds/{marker}", json={}, timeout=60)
        )
        approval = wait_pending(instance, session_id)
        assert approval["rule"] == "refunds" and approval["risk"] == "high"
        assert "approvals.hold_at" in approval["hold_reason"]
        assert decide(instance, approval["id"], "deny").status_code == 200
        assert held.result(30).status_code == 403
        assert [r.path.split("/")[1] for r in received(tls_upstream) if marker in r.path] == [
            "notes"
        ]
    finally:
        instance.stop()


def _explain(tmp_path: Path, config: str, *args: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    run = run_cli("rules", "explain", *args, "-c", str(path))
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_rules_explain_shows_hold_irreversible_and_hold_at(tmp_path: Path) -> None:
    config = (
        "defaults: {mutations: hold-irreversible}\n"
        "approvals: {hold_at: high}\n"
        "rules:\n"
        "  - {name: refunds, match: {path: /refunds/**}, risk: high}\n"
    )
    held = _explain(tmp_path, config, "PURGE", "https://cdn.test/files/")
    assert "held: no compensation is known (no compensation is known for PURGE)" in held
    flows = _explain(tmp_path, config, "PUT", "https://api.test/things/1")
    assert "forwarded: a compensation is known" in flows
    refund = _explain(tmp_path, config, "POST", "https://api.test/refunds/1")
    assert "approvals.hold_at is high and the risk is high, so it is held" in refund


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ("guard:\n  max_mutations: -1\n", "config.yaml:2: guard.max_mutations: limit: expected"),
        (
            "guard:\n  repeat: {count: 2, every: 1m}\n",
            "config.yaml:2: guard.repeat: repeat: unknown",
        ),
        (
            "rules:\n  - name: r\n    match: {path: /x}\n    guard: {max_mutation: 1}\n",
            "config.yaml:4: guard: unknown key(s) max_mutation",
        ),
        ("approvals:\n  hold_at: medium\n", "config.yaml:2: approvals.hold_at"),
        (
            "guard:\n  repeat: {count: 2, window: 0s}\n",
            "config.yaml:2: guard.repeat: repeat.window must be more than zero",
        ),
        ("guard:\n  max_mutations: ten\n", "config.yaml:2: guard.max_mutations: limit"),
    ],
)
def test_guard_config_errors_name_file_and_line(tmp_path: Path, config: str, error: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    run = run_cli("rules", "check", "-c", str(path))
    assert run.returncode != 0
    assert error in run.stderr + run.stdout


def test_a_budget_is_exact_under_concurrency(
    tmp_path: Path, plain_upstream: ThreadedServer, session_id: str
) -> None:
    """50 agents of one session post at once against max_mutations: 10: exactly 10 reach
    the upstream, 40 are refused, none is lost."""
    instance = Undoproxy(tmp_path, {"guard": {"max_mutations": 10}}).start()
    try:
        marker = uuid.uuid4().hex
        url = f"{plain_upstream.base_url}/burst/{marker}"

        def post(n: int) -> int:
            with instance.agent(session_id) as agent:
                return agent.post(url, json={"n": n}, timeout=60).status_code

        with ThreadPoolExecutor(max_workers=50) as pool:
            codes = list(pool.map(post, range(50)))
    finally:
        instance.stop()
    assert sorted(codes) == [200] * 10 + [403] * 40
    assert len(_posts(plain_upstream, marker)) == 10


def test_after_the_freeze_answers_not_one_more_mutation_reaches_the_upstream(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    """20 agents keep posting while a freeze lands: once the freeze call has answered, the
    upstream gets nothing more; reads still pass."""
    marker = uuid.uuid4().hex
    url = f"{plain_upstream.base_url}/freeze/{marker}"
    stop = threading.Event()
    answers: list[int] = []

    def agent_loop(n: int) -> None:
        with proxy.agent(session_id) as agent:
            while not stop.is_set():
                answers.append(agent.post(url, json={"agent": n}, timeout=60).status_code)

    threads = [threading.Thread(target=agent_loop, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    while len(answers) < 40:  # the agents are busy writing
        time.sleep(0.01)
    frozen = proxy.api("POST", f"/api/sessions/{session_id}/freeze", json={})
    assert frozen.status_code == 200, frozen.text
    assert frozen.json()["still_in_flight"] == 0
    arrived_at_freeze = len(_posts(plain_upstream, marker))
    refused_before = answers.count(403)
    while answers.count(403) < refused_before + 40:  # they keep trying, and are refused
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(60)
    # The freeze answered once nothing of the session was travelling: not one more arrived.
    assert len(_posts(plain_upstream, marker)) == arrived_at_freeze
    settled = len(_posts(plain_upstream, marker))
    assert settled == answers.count(200)  # every refused request stayed here, none was lost
    with proxy.agent(session_id) as agent:
        refused = agent.post(url, json={"late": True})
        read = agent.get(url)
    assert refused.status_code == 403 and refused.json()["error"] == "undoproxy_frozen"
    assert read.status_code == 200
    assert len(_posts(plain_upstream, marker)) == settled
