"""Rollback survives what goes wrong around it: a crash mid-send, a client that goes away, a
step that cannot be sent, a compensation that points elsewhere, a loosely typed request."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import received
from tests.rollback.helpers import AUTH, details, rollback_ends, statuses
from tests.support import objects
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def wait_for(what: Callable[[], bool], message: str, tries: int = 400) -> None:
    """Poll until `what()` holds (an event from another process has no other signal)."""
    ready = threading.Event()
    for _ in range(tries):
        if what():
            return
        ready.wait(0.05)
    raise AssertionError(f"timed out waiting for: {message}")


def session_state(up: Undoproxy, session: str) -> str:
    return str(up.api("GET", f"/api/sessions/{session}").json()["state"])


def seed(store: objects.StoreState) -> objects.Obj:
    store.put("report.txt", "v1", content_type="text/plain", x_amz_meta_owner="ada")
    return objects.Obj(store.objects["report.txt"].body, dict(store.objects["report.txt"].headers))


def overwrite(up: Undoproxy, server: ThreadedServer, session: str) -> None:
    with up.agent(session, headers=AUTH) as s:
        r = s.put(
            f"{server.base_url}/o/report.txt",
            data=b"v2",
            headers={"Content-Type": "text/plain", "x-amz-meta-owner": "agent"},
        )
        assert r.status_code == 200


def gate(server: ThreadedServer, store: objects.StoreState) -> Callable[[], None]:
    """Hold the store's writes from now on; returns what releases them."""
    event = asyncio.Event()
    store.gate = event
    return lambda: server.call(event.set)


@pytest.mark.parametrize("arrived", [True, False], ids=["applied-before-crash", "lost-in-crash"])
def test_a_compensation_interrupted_by_a_crash_is_decided_by_reading_never_resent_blind(
    tmp_path: Path,
    server: ThreadedServer,
    store: objects.StoreState,
    session_id: str,
    arrived: bool,
) -> None:
    first = Undoproxy(tmp_path).start()
    before = seed(store)
    overwrite(first, server, session_id)
    release = gate(server, store)
    threading.Thread(
        target=lambda: _quietly(
            lambda: first.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        ),
        daemon=True,
    ).start()
    wait_for(lambda: len(store.requests("PUT")) == 2, "the restore reaches the store")
    assert first.proc is not None
    first.proc.kill()  # kill -9 while the restore is in flight
    first.proc.wait(10)
    store.ignore_writes = not arrived
    release()
    wait_for(lambda: store.writes_done == 2, "the store finishes the interrupted restore")
    store.gate, store.ignore_writes = None, False

    second = Undoproxy(tmp_path).start()
    try:
        [step] = second.steps(session_id)
        assert step["status"] == "compensating"  # recorded before it was sent
        report = second.rollback(session_id)
    finally:
        second.stop()
    assert (report["state"], statuses(report)) == ("rolled_back", ["compensated"])
    assert "undoproxy stopped while undoing this step" in details(report)[0]
    assert store.objects["report.txt"] == before
    if arrived:
        assert "nothing was sent again" in details(report)[0]
        assert len(store.requests("PUT")) == 2  # never twice
    else:
        assert len(store.requests("PUT")) == 3  # it had not applied: sent once more


def _quietly(call: Callable[[], Any]) -> None:
    with contextlib.suppress(requests.RequestException):
        call()


def test_ctrl_c_on_the_cli_never_aborts_the_rollback(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    release = gate(server, store)
    cli = subprocess.Popen(
        [sys.executable, "-m", "undoproxy", "rollback", session_id],
        env=up.cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(store.requests("PUT")) == 2, "the restore reaches the store")
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=30)
    finally:
        release()
    assert cli.returncode == 130
    assert "goes on in undoproxy" in err
    wait_for(lambda: session_state(up, session_id) != "rolling_back", "the rollback ends")
    assert session_state(up, session_id) == "rolled_back"
    assert store.objects["report.txt"] == before


def test_a_streaming_client_that_disconnects_never_aborts_the_rollback(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    overwrite(up, server, session_id)
    with up.agent(session_id, headers=AUTH) as s:
        s.post(f"{server.base_url}/o/", data=b"scratch").raise_for_status()
    release = gate(server, store)
    client = socket.create_connection(("127.0.0.1", up.admin_port), timeout=30)
    client.sendall(
        (
            f"POST /api/sessions/{session_id}/rollback HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{up.admin_port}\r\nAuthorization: Bearer {up.token}\r\n"
            "Accept: application/x-ndjson\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\n\r\n{}"
        ).encode()
    )
    try:
        wait_for(lambda: len(store.requests("DELETE")) == 1, "the first undo reaches the store")
        client.close()  # the client goes away before any progress line could reach it
    finally:
        release()
    wait_for(lambda: session_state(up, session_id) != "rolling_back", "the rollback ends")
    assert session_state(up, session_id) == "rolled_back"
    assert store.objects == {"report.txt": before}


@pytest.mark.parametrize(
    "body",
    [{"force": "false"}, {"force": 0}, {"dry_run": "true"}, {"dry_run": None}],
    ids=["force-string", "force-number", "dry-run-string", "dry-run-null"],
)
def test_flags_are_json_booleans_or_the_request_is_refused(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str, body: Any
) -> None:
    seed(store)
    overwrite(up, server, session_id)
    store.put("report.txt", "a person's edit", content_type="text/plain")
    r = up.api("POST", f"/api/sessions/{session_id}/rollback", json=body)
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request" and "JSON boolean" in r.json()["message"]
    assert session_state(up, session_id) == "open"
    assert store.objects["report.txt"].body == b"a person's edit"  # nothing forced over it
    assert len(store.requests("PUT")) == 1


def test_force_targets_the_resource_not_the_version_in_the_query(
    up: Undoproxy, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    before = seed(store)
    with up.agent(session_id, headers=AUTH) as s:
        s.put(
            f"{server.base_url}/o/report.txt?rev=1-abc",
            data=b"v2",
            headers={"Content-Type": "text/plain"},
        ).raise_for_status()
    store.put("report.txt", "a person's edit", content_type="text/plain")
    assert statuses(up.rollback(session_id)) == ["conflict"]
    rollback_ends(up, session_id, "rolled_back", ["compensated"], force=True)
    assert store.requests("PUT")[-1].path == "/o/report.txt"
    assert store.objects["report.txt"] == before


# --- steps that cannot be sent, and compensations that point elsewhere ---------------------


def test_one_step_that_cannot_be_sent_never_stops_the_others(
    ruled: Undoproxy,
    server: ThreadedServer,
    store: objects.StoreState,
    plain_upstream: ThreadedServer,
    session_id: str,
) -> None:
    before = seed(store)
    overwrite(ruled, server, session_id)
    base = server.base_url
    target = base.replace("https://", "https://user:pw@") + "/o/linked/x"
    with ruled.agent(session_id, headers=AUTH) as s:
        s.post(f"{base}/o/", json={"reason": "cleanup\r\nX-Injected: 1"}).raise_for_status()
        s.put(f"{base}/o/linked/x", json={"target": target}).raise_for_status()
        s.post(f"{base}/v1/jobs", json={"run": "x"}).raise_for_status()
    seen = len(received(plain_upstream))

    r = ruled.api("POST", f"/api/sessions/{session_id}/rollback", json={})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["state"] == "rollback_incomplete"
    jobs, linked, note, restore = report["steps"]
    assert restore["status"] == "compensated"
    assert store.objects["report.txt"] == before  # the good step was undone
    assert linked["status"] == "failed" and "user:password@" in linked["detail"]
    assert note["status"] in ("failed", "irreversible")  # refused when built or when sent
    assert not [r for r in store.requests("DELETE") if "X-Injected" in r.headers]
    # The rule's template names another origin: the request goes there without credentials,
    # and with no snapshot to compare with, it cannot be shown to have worked.
    assert jobs["status"] == "unverified" and "no snapshot to compare with" in jobs["detail"]
    [cancel] = received(plain_upstream)[seen:]
    assert cancel.path == "/echo/cancel" and "Authorization" not in cancel.headers
    assert report["counts"] == {"unverified": 1, "failed": 1, "compensated": 1} | {
        note["status"]: report["counts"][note["status"]]
    }


def test_steps_marked_ahead_but_never_reached_are_decided_by_reading_after_a_crash(
    tmp_path: Path, server: ThreadedServer, store: objects.StoreState, session_id: str
) -> None:
    first = Undoproxy(tmp_path).start()
    names = ["a.txt", "b.txt", "c.txt"]
    for name in names:
        store.put(name, f"{name} v1", content_type="text/plain")
    before = {n: objects.Obj(store.objects[n].body, dict(store.objects[n].headers)) for n in names}
    with first.agent(session_id, headers=AUTH) as s:
        for name in names:
            s.put(f"{server.base_url}/o/{name}", data=b"v2", headers={"Content-Type": "text/plain"})
    release = gate(server, store)
    threading.Thread(
        target=lambda: _quietly(
            lambda: first.api("POST", f"/api/sessions/{session_id}/rollback", json={})
        ),
        daemon=True,
    ).start()
    wait_for(lambda: len(store.requests("PUT")) == 4, "the newest step's restore is in flight")
    assert first.proc is not None
    first.proc.kill()
    first.proc.wait(10)
    release()
    wait_for(lambda: store.writes_done == 4, "the interrupted restore is applied")
    store.gate = None

    second = Undoproxy(tmp_path).start()
    try:
        steps = second.steps(session_id)
        assert [s["status"] for s in steps] == ["compensating"] * 3  # marked in one commit
        report = second.rollback(session_id)
    finally:
        second.stop()
    assert (report["state"], statuses(report)) == ("rolled_back", ["compensated"] * 3)
    assert "nothing was sent again" in details(report)[0]
    assert all("did not take effect" in d for d in details(report)[1:])
    assert {n: store.objects[n] for n in names} == before
    restores = [r.path for r in store.requests("PUT")[3:]]
    assert sorted(restores) == [f"/o/{n}" for n in names]  # each undo applied exactly once
