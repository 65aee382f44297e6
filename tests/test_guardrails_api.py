"""The kill switch and resolve as an operator meets them: the CLI and the admin API of a real
`undoproxy run`, agents going through it to real upstreams, and restarts of the process.

Each freeze test counts what reached the upstream (its own record); each resolve test checks
what a later rollback sends.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import received
from tests.support import rest
from tests.support.holding import in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

HOLD_DELETES: dict[str, Any] = {
    "approvals": {"timeout": "60s"},
    "rules": [
        {
            "name": "hold-deletes",
            "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/**"},
            "action": "hold",
            "risk": "high",
        }
    ],
}


def _writes(server: ThreadedServer, marker: str) -> list[str]:
    return [r.method for r in received(server) if marker in r.path and r.method != "GET"]


def _session(up: Undoproxy, session_id: str) -> dict[str, Any]:
    r = up.api("GET", f"/api/sessions/{session_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


# --- the kill switch -----------------------------------------------------------------------


def test_freezing_a_session_refuses_its_mutations_denies_its_held_ones_and_survives_a_restart(
    tmp_path: Path, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/frozen/{marker}"
    other = f"{session_id}-other"
    up = Undoproxy(tmp_path, HOLD_DELETES).start()
    try:
        with up.agent(session_id) as agent:
            assert agent.post(url, json={"n": 1}).status_code == 200
        held = in_thread(lambda: up.agent(session_id).delete(url, timeout=60))
        wait_pending(up, session_id)

        frozen = up.cli("freeze", session_id)
        assert frozen.returncode == 0, frozen.stderr
        assert f"session {session_id} is frozen" in frozen.stdout
        assert "1 held request denied" in frozen.stdout

        answer = held.result(20)
        assert answer.status_code == 403
        assert answer.json()["error"] == "undoproxy_denied"
        assert "frozen" in answer.json()["reason"]
        with up.agent(session_id) as agent:
            refused = agent.post(url, json={"n": 2})
            assert agent.put(url, json={"n": 3}).status_code == 403
            read = agent.get(url)
        with up.agent(other) as agent:  # other sessions go on
            assert agent.post(url, json={"n": 4}).status_code == 200
        assert _writes(tls_upstream, marker) == ["POST", "POST"]  # the first, and the other's
        assert refused.status_code == 403
        assert refused.headers["X-Undoproxy-Decision"] == "denied"
        assert refused.json()["error"] == "undoproxy_frozen"
        assert refused.json()["session"] == session_id
        assert read.status_code == 200  # reads pass

        assert _session(up, session_id)["frozen"] is True
        listed = {s["id"]: s for s in up.api("GET", "/api/sessions").json()["sessions"]}
        assert (listed[session_id]["frozen"], listed[other]["frozen"]) == (True, False)
        sessions = up.cli("sessions")
        line = next(x for x in sessions.stdout.splitlines() if x.startswith(session_id + " "))
        assert "open (frozen)" in line
        assert "FROZEN" in up.cli("show", session_id).stdout
    finally:
        assert up.stop() == 0

    again = Undoproxy(tmp_path, HOLD_DELETES).start()  # the same journal
    try:
        with again.agent(session_id) as agent:
            assert agent.post(url, json={"n": 5}).json()["error"] == "undoproxy_frozen"
        assert _writes(tls_upstream, marker) == ["POST", "POST"]
        assert _session(again, session_id)["frozen"] is True

        thawed = again.cli("unfreeze", session_id)
        assert thawed.returncode == 0, thawed.stderr
        assert f"session {session_id} is unfrozen" in thawed.stdout
        with again.agent(session_id) as agent:
            assert agent.post(url, json={"n": 6}).status_code == 200
        assert _writes(tls_upstream, marker) == ["POST", "POST", "POST"]
        assert _session(again, session_id)["frozen"] is False
    finally:
        again.stop()


def test_freezing_everything_covers_every_session_and_new_ones_and_survives_a_restart(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/all/{marker}"
    up = Undoproxy(tmp_path, HOLD_DELETES).start()
    try:
        assert up.api("GET", "/api/info").json()["frozen_all"] is False
        with up.agent("a") as agent:
            assert agent.post(url, json={"s": "a"}).status_code == 200
        held = [in_thread(lambda s=s: up.agent(s).delete(url, timeout=60)) for s in ("a", "b")]
        wait_pending(up, "a")
        wait_pending(up, "b")

        r = up.api("POST", "/api/freeze")
        assert r.status_code == 200, r.text
        assert r.json() == {"frozen_all": True, "denied": 2, "still_in_flight": 0}
        assert [f.result(20).status_code for f in held] == [403, 403]
        for session in ("a", "b", "never-seen-before"):
            with up.agent(session) as agent:
                refused = agent.post(url, json={"s": session})
                assert agent.get(url).status_code == 200
            assert refused.status_code == 403
            assert refused.json()["error"] == "undoproxy_frozen"
            assert refused.json()["scope"] == "all"
        assert _writes(tls_upstream, marker) == ["POST"]
        assert up.api("GET", "/api/info").json()["frozen_all"] is True
        assert "every session is frozen" in up.cli("sessions").stdout
    finally:
        assert up.stop() == 0

    again = Undoproxy(tmp_path, HOLD_DELETES).start()
    try:
        assert again.api("GET", "/api/info").json()["frozen_all"] is True
        with again.agent("a") as agent:
            assert agent.post(url, json={"s": "again"}).json()["scope"] == "all"
        # A session frozen on its own stays frozen when the global switch goes off.
        assert again.cli("freeze", "b").returncode == 0
        thawed = again.cli("unfreeze", "--all")
        assert thawed.returncode == 0, thawed.stderr
        assert "the global switch is off" in thawed.stdout
        assert again.api("GET", "/api/info").json()["frozen_all"] is False
        with again.agent("a") as agent:
            assert agent.post(url, json={"s": "a2"}).status_code == 200
        with again.agent("b") as agent:
            assert agent.post(url, json={"s": "b2"}).json()["scope"] == "session"
        assert _writes(tls_upstream, marker) == ["POST", "POST"]
    finally:
        again.stop()


def test_unfreezing_a_session_while_everything_is_frozen_says_so(
    tmp_path: Path, tls_upstream: ThreadedServer
) -> None:
    up = Undoproxy(tmp_path).start()
    try:
        assert up.cli("freeze", "--all").returncode == 0
        up.api("POST", "/api/sessions", json={"id": "s1"})
        thawed = up.cli("unfreeze", "s1")
        assert thawed.returncode == 0
        assert "still frozen by the global switch" in thawed.stdout
        with up.agent("s1") as agent:
            assert agent.post(tls_upstream.base_url + "/x").status_code == 403
    finally:
        up.stop()


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/api/sessions/no-such-session/freeze", None, 404, "no session 'no-such-session'"),
        ("POST", "/api/sessions/no-such-session/unfreeze", None, 404, "no session"),
        ("POST", "/api/freeze", {"all": True}, 400, "unknown field(s): all"),
        ("POST", "/api/sessions/{sid}/freeze", {"reason": "x"}, 400, "unknown field(s)"),
        ("POST", "/api/sessions/{sid}/freeze", [], 400, "must be a JSON object"),
        ("GET", "/api/freeze", None, 405, ""),
    ],
)
def test_freeze_refuses_bad_calls_with_the_one_error_shape(
    proxy: Undoproxy,
    session_id: str,
    method: str,
    path: str,
    body: Any,
    status: int,
    message: str,
) -> None:
    proxy.api("POST", "/api/sessions", json={"id": session_id})
    kwargs = {} if body is None else {"json": body}
    r = proxy.api(method, path.format(sid=session_id), **kwargs)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error", "message"}
    assert message in r.json()["message"]
    assert _session(proxy, session_id)["frozen"] is False
    assert proxy.api("GET", "/api/info").json()["frozen_all"] is False


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["freeze"], "name one SESSION, or --all"),
        (["freeze", "x", "--all"], "name one SESSION, or --all"),
        (["unfreeze"], "name one SESSION, or --all"),
        (["freeze", "no-such-session"], "no session 'no-such-session'"),
    ],
)
def test_freeze_cli_mistakes_are_explained(proxy: Undoproxy, args: list[str], error: str) -> None:
    done = proxy.cli(*args)
    assert done.returncode == 1
    assert error in done.stderr
    assert "Traceback" not in done.stderr


# --- resolve -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def items() -> rest.RestState:
    return rest.RestState()


@pytest.fixture(scope="module")
def rest_api(items: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = rest.serve(items, upstream_cert)
    yield server
    server.stop()


def _resolve(up: Undoproxy, step_id: str, body: Any) -> requests.Response:
    return up.api("POST", f"/api/steps/{step_id}/resolve", json=body)


def test_an_irreversible_step_resolved_by_hand_completes_the_rollback_and_is_never_sent(
    proxy: Undoproxy,
    rest_api: ThreadedServer,
    items: rest.RestState,
    tls_upstream: ThreadedServer,
    session_id: str,
) -> None:
    marker = uuid.uuid4().hex
    items.items["r1"] = {"id": "r1", "name": "Ada"}
    with proxy.agent(session_id) as agent:
        agent.patch(f"{rest_api.base_url}/items/r1", json={"name": "Ada L."}).raise_for_status()
        # The echo answers name nothing it created: no inverse is known.
        agent.post(f"{tls_upstream.base_url}/notes/{marker}", json={"text": "hi"})
        agent.get(f"{rest_api.base_url}/items/r1").raise_for_status()
    first = proxy.rollback(session_id)
    assert first["state"] == "rollback_incomplete"
    assert [s["status"] for s in first["steps"]] == ["irreversible", "compensated"]
    patch_step, post_step = (s["id"] for s in reversed(first["steps"]))
    read_step = _session(proxy, session_id)["steps"][2]["id"]

    refused = _resolve(proxy, patch_step, {"reason": "nothing to do"})
    assert refused.status_code == 409
    assert refused.json()["error"] == "conflict"
    assert f"step {patch_step} (compensated) cannot be resolved" in refused.json()["message"]
    assert _resolve(proxy, read_step, {"reason": "x"}).status_code == 409

    done = proxy.cli("resolve", post_step, "--reason", "deleted the note by hand", "--by", "Ada")
    assert done.returncode == 0, done.stderr
    assert f"step {post_step} (#2 POST" in done.stdout
    assert "resolved by Ada: deleted the note by hand" in done.stdout
    assert f"session {session_id} is rolled_back" in done.stdout

    shown = _session(proxy, session_id)
    assert shown["state"] == "rolled_back"
    step = next(s for s in shown["steps"] if s["id"] == post_step)
    assert step["status"] == "resolved"
    assert step["resolved"]["by"] == "Ada"
    assert step["resolved"]["reason"] == "deleted the note by hand"
    assert isinstance(step["resolved"]["at"], float)
    show = proxy.cli("show", session_id).stdout
    assert "resolved by hand:" in show
    assert f"#2 {post_step}: by Ada at " in show and "deleted the note by hand" in show

    sent = len(received(tls_upstream))
    second = proxy.rollback(session_id)  # nothing is left to do: nothing is sent
    assert second["state"] == "rolled_back"
    assert [(s["status"], s["detail"]) for s in second["steps"]] == [
        ("skipped", "resolved by a person"),
        ("skipped", "already compensated by an earlier rollback"),
    ]
    assert len(received(tls_upstream)) == sent
    assert [r.method for r in received(tls_upstream) if marker in r.path] == ["POST"]
    again = next(s for s in _session(proxy, session_id)["steps"] if s["id"] == post_step)
    assert (again["status"], again["resolved"]) == ("resolved", step["resolved"])
    assert _resolve(proxy, post_step, {"reason": "twice"}).status_code == 409


def test_the_session_is_rolled_back_only_once_every_irreversible_step_is_resolved(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    base = f"{tls_upstream.base_url}/dav/{uuid.uuid4().hex}"
    with proxy.agent(session_id) as agent:
        assert agent.request("MKCOL", base + "/a").status_code == 200
        assert agent.request("MKCOL", base + "/b").status_code == 200
    report = proxy.rollback(session_id)
    assert [s["status"] for s in report["steps"]] == ["irreversible", "irreversible"]
    newest, oldest = (s["id"] for s in report["steps"])

    r = _resolve(proxy, oldest, {"reason": "removed /a by hand", "by": "Grace"})
    assert r.status_code == 200, r.text
    assert r.json()["step"]["resolved"]["by"] == "Grace"
    assert r.json()["session"]["state"] == "rollback_incomplete"  # /b is still there

    r = _resolve(proxy, newest, {"reason": "removed /b by hand"})
    assert r.status_code == 200, r.text
    assert r.json()["step"]["resolved"]["by"] == "api"  # no name given
    assert r.json()["session"]["state"] == "rolled_back"
    assert _session(proxy, session_id)["state"] == "rolled_back"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "reason is required"),
        (None, "reason is required"),
        ({"reason": ""}, "reason must be a non-empty string"),
        ({"reason": "   "}, "reason must be a non-empty string"),
        ({"reason": 42}, "reason must be a non-empty string"),
        ({"reason": ["x"]}, "reason must be a non-empty string"),
        ({"reason": "x" * 2001}, "at most 2000"),
        ({"reason": "ok", "by": ""}, "by must be a name"),
        ({"reason": "ok", "by": 7}, "by must be a name"),
        ({"reason": "ok", "who": "me"}, "unknown field(s): who"),
        ("fixed", "must be a JSON object"),
    ],
)
def test_resolve_refuses_a_missing_or_mistyped_reason(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str, body: Any, message: str
) -> None:
    with proxy.agent(session_id) as agent:
        agent.request("MKCOL", f"{tls_upstream.base_url}/dav/{uuid.uuid4().hex}")
    step = proxy.rollback(session_id)["steps"][0]
    assert step["status"] == "irreversible"
    r = proxy.api("POST", f"/api/steps/{step['id']}/resolve", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_request"
    assert message in r.json()["message"]
    assert _session(proxy, session_id)["steps"][0]["status"] == "irreversible"


def test_resolve_of_an_unknown_step_is_404_and_the_cli_needs_a_reason(proxy: Undoproxy) -> None:
    r = _resolve(proxy, "st_nope", {"reason": "x"})
    assert r.status_code == 404
    assert r.json() == {"error": "not_found", "message": "no step 'st_nope'"}
    done = proxy.cli("resolve", "st_nope", "--reason", "x")
    assert done.returncode == 1 and "no step 'st_nope'" in done.stderr
    missing = proxy.cli("resolve", "st_nope")
    assert missing.returncode == 2 and "--reason" in missing.stderr


def test_after_the_freeze_answer_not_one_more_mutation_reaches_the_upstream(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/race/{marker}"
    started = threading.Barrier(21)

    def agent(n: int) -> int:
        """Post until refused; how many were accepted."""
        accepted = 0
        with proxy.agent(session_id) as s:
            started.wait(30)
            while True:
                r = s.post(url, json={"agent": n, "i": accepted}, timeout=30)
                if r.status_code != 200:
                    assert r.json()["error"] == "undoproxy_frozen", r.text
                    return accepted
                accepted += 1

    with ThreadPoolExecutor(max_workers=20) as pool:
        agents = [pool.submit(agent, n) for n in range(20)]
        started.wait(30)
        while len(_writes(tls_upstream, marker)) < 40:  # they are all going
            time.sleep(0.01)
        r = proxy.api("POST", f"/api/sessions/{session_id}/freeze")
        assert r.status_code == 200, r.text
        assert r.json()["still_in_flight"] == 0  # it answered once nothing was travelling
        at_answer = len(_writes(tls_upstream, marker))
        accepted = sum(f.result(60) for f in agents)
    assert len(_writes(tls_upstream, marker)) == at_answer == accepted
