"""What the journal keeps of each request, and what happens when it cannot write."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import received
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


def journal_rows(proxy: Undoproxy, session: str) -> list[sqlite3.Row]:
    proxy.api("GET", f"/api/sessions/{session}")  # flushes the writer
    db = sqlite3.connect(proxy.dir / "journal.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute(
            "SELECT * FROM steps WHERE session_id=? ORDER BY seq", (session,)
        ).fetchall()
    finally:
        db.close()


def test_a_mutation_and_a_read_leave_these_rows(
    proxy: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    body = json.dumps({"name": "Ada", "password": "hunter2"}).encode()
    with proxy.agent(session_id) as s:
        s.post(
            f"{tls_upstream.base_url}/echo/customers",
            data=body,
            headers={
                "Authorization": "Bearer sk-live-SECRET",
                "Content-Type": "application/json",
                "Cookie": "sid=COOKIESECRET",
            },
        ).raise_for_status()
        s.get(f"{tls_upstream.base_url}/echo/customers?status=404")
    post, get = journal_rows(proxy, session_id)

    assert (post["method"], post["is_mutation"], post["status"]) == ("POST", 1, "succeeded")
    assert post["response_status"] == 200
    assert post["request_body_len"] == len(body)
    assert post["request_body_sha256"] == hashlib.sha256(body).hexdigest()
    headers = dict(json.loads(post["request_headers"]))
    assert headers["Authorization"] == "[redacted]" and headers["Cookie"] == "[redacted]"
    assert post["duration_ms"] is not None and post["duration_ms"] >= 0

    assert (get["method"], get["is_mutation"], get["status"]) == ("GET", 0, "failed")
    assert get["response_status"] == 404  # non-2xx is `failed`, as the contract says

    # Headers are redacted at rest; bodies are kept as sent (an exact restore needs them) and
    # redacted wherever they are shown: the echo upstream copied the headers into its body.
    at_rest = " ".join(
        str(row[k]) for row in (post, get) for k in ("url", "request_headers", "response_headers")
    )
    assert "sk-live-SECRET" not in at_rest and "COOKIESECRET" not in at_rest
    shown = proxy.api("GET", f"/api/sessions/{session_id}").text
    assert "sk-live-SECRET" not in shown and "COOKIESECRET" not in shown


def test_the_api_shows_steps_with_secrets_redacted(
    proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    with proxy.agent(session_id) as s:
        s.put(
            f"{plain_upstream.base_url}/echo/users/1?api_key=QUERYSECRET",
            json={"email": "a@b.test", "password": "hunter2"},
            headers={"X-Api-Key": "HEADERSECRET"},
        ).raise_for_status()
    text = proxy.api("GET", f"/api/sessions/{session_id}").text
    for secret in ("QUERYSECRET", "HEADERSECRET", "hunter2"):
        assert secret not in text
    [step] = json.loads(text)["steps"]
    assert step["request"]["body_length"] > 0
    assert json.loads(step["request"]["body"]) == {"email": "a@b.test", "password": "[redacted]"}


def test_unreachable_upstream_is_journaled_as_failed(proxy: Undoproxy, session_id: str) -> None:
    with proxy.agent(session_id) as s:
        r = s.post("http://127.0.0.1:9/nothing-listens-here", json={})
    assert r.status_code == 502
    [row] = journal_rows(proxy, session_id)
    assert row["status"] == "failed" and row["error"]


@pytest.fixture
def own_proxy(tmp_path: Path) -> Undoproxy:
    instance = Undoproxy(tmp_path).start()
    yield instance  # type: ignore[misc]
    instance.stop()


def test_a_mutation_that_cannot_be_journaled_is_answered_503_and_not_forwarded(
    own_proxy: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    marker = uuid.uuid4().hex
    with own_proxy.agent(session_id) as s:
        s.get(f"{plain_upstream.base_url}/echo/warmup").raise_for_status()
        own_proxy.api("GET", f"/api/sessions/{session_id}")
        # Another process holds the database's write lock: undoproxy cannot write ahead.
        locker = sqlite3.connect(own_proxy.dir / "journal.db", isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            r = s.post(f"{plain_upstream.base_url}/echo/{marker}", json={"charge": 100})
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        assert r.status_code == 503
        assert r.json()["error"] == "undoproxy_journal_unavailable"
        assert not any(marker in rec.path for rec in received(plain_upstream))
        # Once the journal is writable again, mutations flow and are journaled.
        ok = s.post(f"{plain_upstream.base_url}/echo/{marker}-again", json={"charge": 100})
    assert ok.status_code == 200
    statuses = [
        st["status"] for st in own_proxy.api("GET", f"/api/sessions/{session_id}").json()["steps"]
    ]
    assert statuses[-1] == "succeeded"


def test_journal_survives_a_restart_and_pending_becomes_unknown(
    tmp_path: Path, plain_upstream: ThreadedServer, session_id: str
) -> None:
    first = Undoproxy(tmp_path).start()
    with first.agent(session_id) as s:
        s.post(f"{plain_upstream.base_url}/echo/kept", json={}).raise_for_status()
    assert first.stop() == 0
    assert "journal flushed" in "".join(first.output)
    # Simulate a crash between write-ahead and outcome: a step left `pending`.
    db = sqlite3.connect(tmp_path / "journal.db")
    db.execute("UPDATE steps SET status='pending' WHERE session_id=?", (session_id,))
    db.commit()
    db.close()
    second = Undoproxy(tmp_path).start()
    try:
        [step] = second.api("GET", f"/api/sessions/{session_id}").json()["steps"]
        assert step["status"] == "unknown"
        assert "outcome" in step["error"]
    finally:
        second.stop()


def test_requests_library_error_shape_for_admin_without_token(proxy: Undoproxy) -> None:
    r = requests.get(proxy.admin_url + "/api/sessions", timeout=10)
    assert r.status_code == 401
    assert set(r.json()) == {"error", "message"} and r.json()["error"] == "unauthorized"
    pem = requests.get(proxy.admin_url + "/ca.pem", timeout=10)
    assert pem.status_code == 200 and "BEGIN CERTIFICATE" in pem.text
