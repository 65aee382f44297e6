"""Secrets an agent sends never come out of undoproxy: planted in every place a request can
carry one, then looked for in every output a person or a program can read — the admin API,
the event stream, every CLI command and export format, the page, the approval webhook and
undoproxy's own log — and in the database file with its WAL, byte for byte, for everything but
the agent's own request and response bodies (the audit record, kept as sent: see README, The
journal; what rollback replays is sealed: tests/rollback/test_sealed_bodies.py).

The real values of the credential broker (`secrets:`, from the environment and from a file)
are held to more: they appear nowhere, the database file's bodies included. The API accepts
only the real token, so every request of the agent (which holds none), every snapshot and
every undo shows that undoproxy put it in; the agent that sends one anyway is refused."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web

from tests.support import rest
from tests.support.holding import decide, in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

TAG = uuid.uuid4().hex[:8]
SECRETS = {
    "authorization": f"sk-live-AUTH{TAG}",
    "cookie": f"COOKIE{TAG}",
    "api key header": f"XAPIKEY{TAG}",
    "query api_key": f"QUERY{TAG}",
    "query access_token": f"ACCESS{TAG}",
    "json password": f"PASSWORD{TAG}",
    "nested client_secret": f"NESTED{TAG}",
    "list under a secret key": f"LISTED{TAG}",
    "form client_secret": f"FORM{TAG}",
    "form refresh_token": f"REFRESH{TAG}",
    "intent": f"INTENT{TAG}",
    "userinfo password": f"USERINFO{TAG}",
}
RULES = [{"name": "hold-payouts", "match": {"path": "/payouts/**"}, "action": "hold"}]
BROKERED = {
    "brokered token (env)": f"brokered-ENV-{TAG}",
    "brokered service key (file)": f"brokered-FILE-{TAG}",
    # A header whose name redaction would not hide: only the broker keeps it out.
    "brokered X-Org header": f"brokered-ORG-{TAG}",
}


class EventTap:
    """Everything `/api/events` sends while the test runs."""

    def __init__(self, proxy: Undoproxy) -> None:
        self.text: list[str] = []
        self._response = proxy.api("GET", "/api/events", stream=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for chunk in self._response.iter_content(chunk_size=None):
                self.text.append(chunk.decode("utf-8", "replace"))
        except (requests.RequestException, AttributeError, ValueError):
            pass

    def close(self) -> str:
        self._response.close()
        self._thread.join(5)
        return "".join(self.text)


BODY_SECRETS = {
    "json password",
    "nested client_secret",
    "list under a secret key",
    "form client_secret",
    "form refresh_token",
}


def _agent_traffic(proxy: Undoproxy, upstream: ThreadedServer, session: str) -> None:
    # The agent that holds a real value after all: refused, and never recorded.
    with proxy.agent(session) as leaky:
        leaked = {
            "note": BROKERED["brokered token (env)"],
            "url": BROKERED["brokered service key (file)"],
        }
        refused = leaky.post(f"{upstream.base_url}/items", json=leaked)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "undoproxy_secret_in_agent"
    headers = {
        "Authorization": f"Bearer {SECRETS['authorization']}",
        "Cookie": f"session={SECRETS['cookie']}",
        "X-Api-Key": SECRETS["api key header"],
        "X-Undoproxy-Intent": f"pay the invoice (token={SECRETS['intent']})",
    }
    base = upstream.base_url
    query = f"api_key={SECRETS['query api_key']}&access_token={SECRETS['query access_token']}"
    body = {
        "name": "Ada",
        "password": SECRETS["json password"],
        "nested": {"client_secret": SECRETS["nested client_secret"]},
        "api_keys": [SECRETS["list under a secret key"]],
    }
    form = (
        f"client_secret={SECRETS['form client_secret']}"
        f"&refresh_token={SECRETS['form refresh_token']}&grant_type=refresh_token"
    )
    with proxy.agent(session, headers=headers) as agent:
        assert agent.get(f"{base}/items/1?{query}").ok
        assert agent.put(f"{base}/items/1?{query}", json=body).ok
        agent.post(
            f"{base}/items?{query}",
            data=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )  # the API wants JSON: refused, but journaled all the same
        userinfo = base.replace("https://", f"https://bot:{SECRETS['userinfo password']}@")
        assert agent.post(f"{userinfo}/items", json={"name": "hook"}).ok
    held_agent = proxy.agent(session, headers=headers)
    held = in_thread(lambda: held_agent.post(f"{base}/payouts/7?{query}", json=body, timeout=60))
    approval = wait_pending(proxy, session)
    outputs["approval card (API)"] = proxy.api("GET", f"/api/approvals/{approval['id']}").text
    assert decide(proxy, approval["id"], "deny", reason="not today").status_code == 200
    assert held.result(30).status_code == 403


outputs: dict[str, str] = {}


def _page(proxy: Undoproxy, session: str) -> dict[str, str]:
    signin = requests.post(
        f"{proxy.admin_url}/api/signin",
        json={"name": "Ada"},
        headers={"Authorization": f"Bearer {proxy.token}"},
        timeout=10,
    )
    assert signin.status_code == 201, signin.text
    key = signin.json()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    pages = {}
    for path in ("/", f"/sessions/{session}", "/sessions", "/?state=all"):
        r = requests.get(f"{proxy.admin_url}{path}", params={"partial": "1"}, headers=auth)
        assert r.status_code == 200, (path, r.status_code)
        pages[f"page {path}"] = r.text
    return pages


class WebhookTap:
    """A webhook receiver (approvals.notify): every body it is sent."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        app = web.Application()
        app.router.add_post("/hook", self._receive)
        self.server = ThreadedServer(app).start()

    async def _receive(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.text())
        return web.json_response({"ok": True})


@pytest.fixture
def webhook() -> Any:
    tap = WebhookTap()
    yield tap
    tap.server.stop()


@pytest.fixture
def proxy(tmp_path: Path, webhook: WebhookTap) -> Any:
    (tmp_path / "service-key").write_text(BROKERED["brokered service key (file)"] + "\n")
    config = {
        "rules": RULES,
        "approvals": {"notify": [f"{webhook.server.base_url}/hook"]},
        "secrets": [
            {
                "name": "api-token",
                "host": "127.0.0.1",  # any port: the API of this test
                "header": "Authorization",
                "value": "Bearer ${NO_SECRET_TEST_TOKEN}",
            },
            {
                "name": "service-key",
                "host": "127.0.0.1",
                "header": "X-Service-Key",
                "value": f"${{file:{tmp_path / 'service-key'}}}",
            },
            {
                "name": "org",
                "host": "127.0.0.1",
                "header": "X-Org",
                "value": "${NO_SECRET_TEST_ORG}",
            },
        ],
    }
    env = {
        "NO_SECRET_TEST_TOKEN": BROKERED["brokered token (env)"],
        "NO_SECRET_TEST_ORG": BROKERED["brokered X-Org header"],
    }
    instance = Undoproxy(tmp_path, config, env=env).start()
    yield instance
    instance.stop()


def test_no_planted_secret_comes_out_anywhere(
    proxy: Undoproxy, upstream_cert: tuple[Path, Path], session_id: str, webhook: WebhookTap
) -> None:
    outputs.clear()
    state = rest.RestState(token=BROKERED["brokered token (env)"])
    state.items["1"] = {"id": "1", "name": "Eve"}
    api = rest.serve(state, upstream_cert)
    events = EventTap(proxy)
    try:
        _agent_traffic(proxy, api, session_id)
        report = proxy.api("POST", f"/api/sessions/{session_id}/rollback")
    finally:
        api.stop()
    outputs["rollback report"] = report.text
    # Undone with the real token: the API accepts nothing else.
    assert [s["status"] for s in report.json()["steps"]].count("compensated") >= 2, report.text
    outputs["secrets (API)"] = proxy.api("GET", "/api/secrets").text
    outputs["metrics"] = proxy.api("GET", "/metrics").text
    outputs["env (CLI)"] = proxy.cli("env", "--session", session_id).stdout
    outputs["session (API)"] = proxy.api("GET", f"/api/sessions/{session_id}").text
    outputs["sessions (API)"] = proxy.api("GET", "/api/sessions").text
    outputs["approvals (API)"] = proxy.api("GET", "/api/approvals?state=all").text
    for fmt in ("jsonl", "har", "csv", "md"):
        exported = proxy.api("GET", f"/api/sessions/{session_id}/export?format={fmt}")
        assert exported.status_code == 200, fmt
        outputs[f"export {fmt} (API)"] = exported.text
    for args in (
        ("show", session_id),
        ("show", session_id, "--json"),
        ("sessions",),
        ("approvals", "--state", "all"),
        ("export", session_id, "--format", "har"),
        ("export", session_id, "--format", "csv"),
        ("rollback", session_id, "--dry-run"),
    ):
        run = proxy.cli(*args)
        outputs[f"cli {' '.join(args[:1] + args[2:])}"] = run.stdout + run.stderr
    outputs.update(_page(proxy, session_id))
    outputs["events (SSE)"] = events.close()
    outputs["approval webhook"] = "\n".join(webhook.bodies)
    assert webhook.bodies, "the held request was announced"
    assert proxy.stop() == 0
    outputs["undoproxy's own output"] = "".join(proxy.output)
    database = b"".join(p.read_bytes() for p in sorted(proxy.dir.glob("journal.db*")))

    # The outputs are not empty: the traffic is there, only the secrets are not.
    assert "/items/1" in outputs["session (API)"] and "Ada" in outputs["export har (API)"]
    assert "pay the invoice" in outputs["session (API)"]
    leaks = [
        f"{what} in {where}"
        for what, secret in SECRETS.items()
        for where, text in outputs.items()
        if secret in text
    ]
    leaks += [
        f"{what} in the database file"
        for what, s in SECRETS.items()
        if what not in BODY_SECRETS and s.encode() in database
    ]
    leaks += [
        f"{what} in {where}"
        for what, secret in BROKERED.items()
        for where, text in outputs.items()
        if secret in text
    ]
    leaks += [
        f"{what} in the database file" for what, s in BROKERED.items() if s.encode() in database
    ]
    assert leaks == [], "\n".join(leaks)
    assert "api-token" in outputs["secrets (API)"] and "service-key" in outputs["metrics"]
