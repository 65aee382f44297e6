"""What the journal keeps of each request, and what happens when it cannot write: through a
real undoproxy journaling to SQLite (`[sqlite]`) and to PostgreSQL (`[postgres]`)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import requests
import yaml

from tests.conftest import received
from tests.support.postgres import Cluster
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

STORES = ["sqlite", "postgres"]


def store_config(store: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The config that puts an undoproxy's journal on `store` (a fresh database for each)."""
    if store == "sqlite":
        return {}
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return {"store": {"url": cluster.database()}}


@pytest.fixture(scope="module", params=STORES)
def journaled(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Undoproxy]:
    """An undoproxy (default config) journaling to SQLite, then one journaling to PostgreSQL."""
    if request.param == "sqlite":
        yield request.getfixturevalue("proxy")
        return
    instance = Undoproxy(tmp_path_factory.mktemp("pg-journal"), store_config("postgres", request))
    yield instance.start(timeout=60)
    instance.stop()


def _url(proxy: Undoproxy) -> str | None:
    return yaml.safe_load(proxy.config_path.read_text())["store"].get("url")


def journal_sql(proxy: Undoproxy, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Run SQL (`$1` parameters) on the proxy's journal, outside undoproxy."""
    url = _url(proxy)
    if url is None:
        db = sqlite3.connect(proxy.dir / "journal.db")
        db.row_factory = sqlite3.Row
        try:
            with db:
                return [dict(r) for r in db.execute(sql.replace("$1", "?"), args).fetchall()]
        finally:
            db.close()

    async def run() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(url)
        try:
            return [dict(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    return asyncio.run(run())


def journal_rows(proxy: Undoproxy, session: str) -> list[dict[str, Any]]:
    proxy.api("GET", f"/api/sessions/{session}")  # flushes the writer
    return journal_sql(proxy, "SELECT * FROM steps WHERE session_id=$1 ORDER BY seq", session)


def test_a_mutation_and_a_read_leave_these_rows(
    journaled: Undoproxy, tls_upstream: ThreadedServer, session_id: str
) -> None:
    proxy = journaled
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
    journaled: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    proxy = journaled
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


def test_unreachable_upstream_is_journaled_as_failed(journaled: Undoproxy, session_id: str) -> None:
    proxy = journaled
    with proxy.agent(session_id) as s:
        r = s.post("http://127.0.0.1:9/nothing-listens-here", json={})
    assert r.status_code == 502
    [row] = journal_rows(proxy, session_id)
    assert row["status"] == "failed" and row["error"]


@contextlib.contextmanager
def database_locked(proxy: Undoproxy) -> Iterator[None]:
    """Another program holds the journal so that undoproxy cannot write to it (SQLite: the
    database's write lock; PostgreSQL: a lock on `steps` that blocks every write to it)."""
    url = _url(proxy)
    if url is None:
        locker = sqlite3.connect(proxy.dir / "journal.db", isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        return
    locked, release = threading.Event(), threading.Event()

    async def hold() -> None:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE steps IN EXCLUSIVE MODE")
                locked.set()
                await asyncio.get_running_loop().run_in_executor(None, release.wait)
        finally:
            await conn.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert locked.wait(30), "could not lock the journal"
        yield
    finally:
        release.set()
        holder.join(30)


@pytest.mark.parametrize("store", STORES)
def test_a_mutation_that_cannot_be_journaled_is_answered_503_and_not_forwarded(
    store: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    plain_upstream: ThreadedServer,
    session_id: str,
) -> None:
    """The wait for the lock is bounded: SQLite's busy timeout (2 s), PostgreSQL's
    lock_timeout on the writer's connection (5 s)."""
    own_proxy = Undoproxy(tmp_path, store_config(store, request)).start(timeout=60)
    marker = uuid.uuid4().hex
    try:
        with own_proxy.agent(session_id) as s:
            s.get(f"{plain_upstream.base_url}/echo/warmup").raise_for_status()
            own_proxy.api("GET", f"/api/sessions/{session_id}")
            with database_locked(own_proxy):  # undoproxy cannot write ahead
                r = s.post(f"{plain_upstream.base_url}/echo/{marker}", json={"charge": 100})
            assert r.status_code == 503
            assert r.json()["error"] == "undoproxy_journal_unavailable"
            assert not r.json()["detail"].rstrip().endswith(":"), r.json()  # says why
            assert not any(marker in rec.path for rec in received(plain_upstream))
            # Once the journal is writable again, mutations flow and are journaled.
            ok = s.post(f"{plain_upstream.base_url}/echo/{marker}-again", json={"charge": 100})
        assert ok.status_code == 200
        statuses = [s["status"] for s in own_proxy.steps(session_id)]
        assert statuses[-1] == "succeeded"
        # Refused means not written: no row of the refused request ever appears.
        urls = [row["url"] for row in journal_rows(own_proxy, session_id)]
        assert not any(u.endswith(f"/echo/{marker}") for u in urls), urls
    finally:
        own_proxy.stop()


@pytest.mark.parametrize("store", STORES)
def test_journal_survives_a_restart_and_pending_becomes_unknown(
    store: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    plain_upstream: ThreadedServer,
    session_id: str,
) -> None:
    config = store_config(store, request)
    first = Undoproxy(tmp_path / "first", config).start(timeout=60)
    with first.agent(session_id) as s:
        s.post(f"{plain_upstream.base_url}/echo/kept", json={}).raise_for_status()
    assert first.stop() == 0
    assert "journal flushed" in "".join(first.output)
    # Simulate a crash between write-ahead and outcome: a step left `pending`.
    journal_sql(first, "UPDATE steps SET status='pending' WHERE session_id=$1", session_id)
    # The same undoproxy again. On PostgreSQL it is a replica of another name (the pid is in
    # it), which finds the first one's rows left by a dead replica and settles them.
    second = Undoproxy(tmp_path / "first", config).start(timeout=60)
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
